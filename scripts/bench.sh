#!/usr/bin/env bash
# Runs every benchmark and prints one table: criterion for the native core, then a headless-Chromium run of the
# release site (size, first chart, slider latency, the same core workloads in wasm).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh >/dev/null
export PATH="$HOME/.cargo/bin:$root/.tools/node_modules/.bin:$PATH"
cargo bench -q -p peakplan-core --bench estimate -- --warm-up-time 1 --measurement-time 3 >/dev/null
native="$root/target/bench-native.json"
python3 - "$root/target/criterion" "$native" <<'PY'
import json, sys, os
names = {"estimate 70B QLoRA": "estimate_ns", "estimate 70B QLoRA, replayed": "replayed_ns", "sweep 256 seq x 3 methods": "sweep_ns", "max batch": "max_batch_ns", "max seq": "max_seq_ns", "gpu table": "gpu_table_ns", "slider track, varying lengths": "slider_track_ns"}
out = {}
for name, key in names.items():
    p = os.path.join(sys.argv[1], name, "new", "estimates.json")
    if os.path.exists(p):
        out[key] = json.load(open(p))["median"]["point_estimate"]
json.dump(out, open(sys.argv[2], "w"))
PY
dist="$root/target/site"
bash scripts/build-site.sh /peakplan/ "$dist" >/dev/null 2>&1
node tests/e2e/bench.mjs "$dist" "$native"
# Where the wait for the first figure goes: each start-up milestone over five first visits (a fresh browser each),
# and what runs in tasks of its own once the figure is there.
node tests/e2e/startup.mjs "$dist" 5
