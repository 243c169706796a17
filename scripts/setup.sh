#!/usr/bin/env bash
# Installs every tool the project needs on a fresh machine of this project's kind; safe to run again.
# Versions follow ../shared/TOOLCHAIN.md: they are the ones seen to work offline here.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export PATH="$HOME/.cargo/bin:$PATH"
say() { printf '\033[1msetup:\033[0m %s\n' "$*"; }
# --site: only what building the release site needs (the GitHub Pages workflow): no browser, fuzzer or test driver.
site_only=false
[[ ${1:-} == --site ]] && site_only=true

TRUNK_VERSION=0.21.14
WASM_BINDGEN_VERSION=0.2.130   # keep in sync with the exact pin in Cargo.toml
BINARYEN_VERSION=132
PLAYWRIGHT_VERSION=1
AXE_VERSION=4.14.1
TERSER_VERSION=5.51.4      # minifies the wasm-bindgen glue in release builds (scripts/csp.py, the post-build hook)

rustup target list --installed | grep -qx wasm32-unknown-unknown || { say "adding the wasm32 target"; rustup target add wasm32-unknown-unknown; }
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt

if ! $site_only && { ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; }; then
  say "installing Debian's chromium and chromium-driver"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium chromium-driver >/dev/null
fi

if [[ $(trunk --version 2>/dev/null) != "trunk $TRUNK_VERSION" ]]; then
  say "installing trunk $TRUNK_VERSION (several minutes)"
  cargo install --locked "trunk@$TRUNK_VERSION"
fi
if [[ $(wasm-bindgen --version 2>/dev/null) != "wasm-bindgen $WASM_BINDGEN_VERSION" ]]; then
  # Not --locked: one locked dependency is not served by the registry here.
  say "installing wasm-bindgen-cli $WASM_BINDGEN_VERSION (several minutes)"
  cargo install "wasm-bindgen-cli@$WASM_BINDGEN_VERSION"
fi

# The release site's wasm is built by the nightly toolchain with the standard library rebuilt for size
# (scripts/build-site.sh), which needs nightly's rust-src; without a nightly it builds with stable, larger.
# A machine that only builds the site (--site: GitHub Pages) gets a minimal nightly.
if $site_only && ! cargo +nightly --version >/dev/null 2>&1; then
  say "installing a minimal nightly toolchain with rust-src (the site's wasm rebuilds the standard library for size)"
  rustup toolchain install nightly --profile minimal --component rust-src || say "no nightly: the site builds with stable"
fi
if cargo +nightly --version >/dev/null 2>&1 && ! rustup component list --installed --toolchain nightly 2>/dev/null | grep -q '^rust-src'; then
  say "adding rust-src to the nightly toolchain (the release site rebuilds the standard library for size)"
  rustup component add rust-src --toolchain nightly || say "no rust-src: the site builds with stable, about 26 KB gzipped larger"
fi

# Fuzzing needs a nightly toolchain (the machine image has one); without it the fuzz step is skipped, loudly.
if ! $site_only && cargo +nightly --version >/dev/null 2>&1 && ! command -v cargo-fuzz >/dev/null; then
  say "installing cargo-fuzz 0.13.2"
  cargo install --locked cargo-fuzz@0.13.2 || cargo install cargo-fuzz@0.13.2
fi

# Debian's binaryen (108) emits wasm that Chromium rejects; the npm build of 132 works. It goes on the global PATH,
# because trunk (ours, and anyone's run of it) looks wasm-opt up there and otherwise tries to download one.
if [[ $(wasm-opt --version 2>/dev/null) != "wasm-opt version $BINARYEN_VERSION"* ]]; then
  say "installing binaryen@$BINARYEN_VERSION (wasm-opt) globally"
  npm install -g --no-audit --no-fund --silent "binaryen@$BINARYEN_VERSION"
fi
tools="$root/.tools"
mkdir -p "$tools"
[[ -f $tools/package.json ]] || echo '{"private":true}' >"$tools/package.json"
# The release build needs terser: trunk's post-build hook (scripts/csp.py) runs it, and fails without it.
if [[ $("$tools/node_modules/.bin/terser" --version 2>/dev/null) != "terser $TERSER_VERSION" ]]; then
  say "installing terser@$TERSER_VERSION into .tools (the release build minifies wasm-bindgen's JS glue with it)"
  (cd "$tools" && npm install --no-audit --no-fund --silent "terser@$TERSER_VERSION")
fi
if $site_only; then say "site tools ready"; exit 0; fi
# axe-core: the e2e suite's accessibility audit (no serious or critical violation on the laptop, phone and embed views).
if [[ ! -f $tools/node_modules/axe-core/axe.min.js ]]; then
  say "installing axe-core@$AXE_VERSION into .tools (the e2e suite's accessibility audit)"
  (cd "$tools" && npm install --no-audit --no-fund --silent "axe-core@$AXE_VERSION")
fi
if [[ ! -d $tools/node_modules/playwright-core ]]; then
  say "installing playwright-core@$PLAYWRIGHT_VERSION into .tools (it drives Debian's Chromium; no browser download)"
  (cd "$tools" && npm install --no-audit --no-fund --silent "playwright-core@$PLAYWRIGHT_VERSION")
fi
say "tools ready"
