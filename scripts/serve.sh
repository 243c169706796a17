#!/usr/bin/env bash
# Installs the tools if needed and serves the planner at http://127.0.0.1:8080/ with live rebuilds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$root/.tools/node_modules/.bin:$PATH"
exec trunk serve --release --no-autoreload "$@"
