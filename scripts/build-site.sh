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
trunk build --release --public-url "$public_url" --dist "$dist"
size=0; for f in "$dist"/*; do [[ -f $f ]] && size=$((size + $(gzip -9c "$f" | wc -c))); done
echo "site: $((size / 1024)) KB gzipped"
