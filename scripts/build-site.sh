#!/usr/bin/env bash
# Builds the release site: the one the end-to-end tests serve, the benchmarks measure and GitHub Pages publishes.
# Usage: scripts/build-site.sh [PUBLIC_URL] [DIST]   (defaults: /peakplan/ and target/site)
# PUBLIC_URL is the path the site is served under ("/" at a domain's root, "/REPO/" on GitHub Pages); every asset
# URL is relative to it. Prints the gzipped size of what it wrote.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
public_url=${1:-/peakplan/}
dist=${2:-$root/target/site}
export PATH="$HOME/.cargo/bin:$PATH"

# Size: where a nightly toolchain with rust-src answers (scripts/setup.sh adds rust-src to the machine's nightly),
# the wasm is built by it with the standard library rebuilt for size: build-std, std's optimize_for_size, and
# panics as immediate aborts, so no panic message, location or formatting code ships (the page never shows them:
# a panic in wasm aborts either way, and nothing panics by design). 26 KB gzipped smaller than the pinned stable
# toolchain's build (Dec 2026). Where that fails, or SITE_STABLE=1, the pinned stable toolchain builds it, and this
# says so. The flags add to .cargo/config.toml's (cargo merges the two lists).
nightly_build() {
  RUSTUP_TOOLCHAIN=nightly CARGO_UNSTABLE_BUILD_STD=std,panic_abort CARGO_UNSTABLE_BUILD_STD_FEATURES=optimize_for_size \
    CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="-Zunstable-options -Cpanic=immediate-abort" \
    trunk build --release --public-url "$public_url" --dist "$dist"
}
if [[ ${SITE_STABLE:-0} != 1 ]] && rustup component list --installed --toolchain nightly 2>/dev/null | grep -q '^rust-src' \
  && nightly_build; then
  echo "site: wasm built by $(rustc +nightly --version) with the standard library rebuilt for size"
else
  echo "site: wasm built by the pinned stable toolchain (no nightly with rust-src, or SITE_STABLE=1): about 26 KB gzipped larger"
  trunk build --release --public-url "$public_url" --dist "$dist"
fi
size=0; for f in "$dist"/*; do [[ -f $f ]] && size=$((size + $(gzip -9c "$f" | wc -c))); done
echo "site: $((size / 1024)) KB gzipped"
