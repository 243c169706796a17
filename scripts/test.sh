#!/usr/bin/env bash
# Runs every test of the project on a fresh machine: installs the tools, then lint, native tests,
# browser tests (wasm-bindgen-test and end-to-end in headless Chromium) and the release site build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$root/.tools/node_modules/.bin:$PATH"
export CHROMEDRIVER=/usr/bin/chromedriver
# The WebGPU browser tests run real training steps on SwiftShader (a CPU): give them room.
export WASM_BINDGEN_TEST_TIMEOUT=${WASM_BINDGEN_TEST_TIMEOUT:-240}
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "format"
cargo fmt --all --check

step "the core has no web dependency"
if cargo tree -q -p peakplan-core -e normal --target all | grep -E '(web-sys|wasm-bindgen|js-sys|leptos)'; then
  echo "peakplan-core must not depend on web crates"; exit 1
fi
echo "none"

step "build scripts (the release build's wasm renaming)"
python3 -m unittest discover -s scripts -p 'test_*.py'

step "clippy (native and wasm32)"
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy -p peakplan-web --target wasm32-unknown-unknown --all-targets -- -D warnings

step "native tests"
cargo test --workspace

step "fuzzing (short runs; see README for long ones)"
if cargo +nightly --version >/dev/null 2>&1 && command -v cargo-fuzz >/dev/null; then
  for target in query config csv import export; do
    [[ -f fuzz/fuzz_targets/$target.rs ]] || continue
    mkdir -p "fuzz/corpus/$target"
    (cd fuzz && cargo +nightly fuzz run "$target" "corpus/$target" "seeds/$target" -- -max_total_time="${FUZZ_SECS:-20}" 2>&1 | grep -E '^Done|ERROR|panicked' )
  done
else
  echo "SKIPPED: no nightly toolchain or cargo-fuzz on this machine"
fi

step "browser tests: wasm-bindgen-test in headless Chromium"
cargo test -p peakplan-web --target wasm32-unknown-unknown

step "release site, served from a sub-path"
dist="$root/target/site"
bash scripts/build-site.sh /peakplan/ "$dist"

step "end-to-end tests: playwright-core driving Chromium"
# Every file runs even when one before it fails (tests/e2e/harness.mjs is their shared server, browser and runner).
e2e=0
node tests/e2e/page.test.mjs "$dist" || e2e=1
node tests/e2e/hub_share.test.mjs "$dist" || e2e=1
node tests/e2e/tasks.test.mjs "$dist" || e2e=1
node tests/e2e/unsloth.test.mjs "$dist" || e2e=1
node tests/e2e/lengths.test.mjs "$dist" || e2e=1
node tests/e2e/deepspeed.test.mjs "$dist" || e2e=1
node tests/e2e/grpo.test.mjs "$dist" || e2e=1
exit $e2e
