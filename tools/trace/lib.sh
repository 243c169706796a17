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
