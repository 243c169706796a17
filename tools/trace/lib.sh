# Sourced by every *_cpu.sh: where the traced data lives, which Python runs the harnesses, how a row is written and
# the total peak a harness prints.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
data="$here/../../crates/peakplan-core/tests/data/traced"
py="${PYTHON:-python3}"
# The header of hf_cpu.csv and tt_cpu.csv: a Llama-shaped model's dimensions, then the traced peak and the plan.
llama_header="id,layers,hidden,intermediate,heads,kv_heads,vocab,tied,traced_peak_allocated_bytes,query"

# emit ROW [FILE]: appends a data row to FILE ($out unless given), or prints it where ONLY=REGEX picks cases (the
# data is then left alone).
emit() {
  if [[ -n ${ONLY:-} ]]; then echo "$1"; else echo "$1" >>"${2:-$out}"; fi
}

# total_of HARNESS ARGS...: runs one harness and prints the step's peak allocated bytes.
total_of() {
  "$py" "$here/$1" "${@:2}" 2>/dev/null | tail -1 | "$py" -c 'import json, sys; print(json.load(sys.stdin)["total"])'
}

# sequence_peak FILE: the most a traced sequence's (SEQUENCE=) live allocations ever add up to: its allocated peak.
sequence_peak() {
  "$py" - "$1" <<'PY'
import sys
live, now, peak = {}, 0, 0
for line in open(sys.argv[1]):
    f = line.strip().split(",")
    if f[0] == "a":
        live[f[1]] = int(f[2]); now += int(f[2]); peak = max(peak, now)
    elif f[0] == "f":
        now -= live.pop(f[1])
print(peak)
PY
}
