#!/usr/bin/env bash
# The live demo page: starts etcd, 5 redis-server nodes (behind webdis and the
# Upstash gateway), all answering CORS, on loopback, and serves www/ with the
# npm package from pkg/. Prints the URL; Ctrl-C stops everything.
# Builds pkg/ (scripts/build-pkg.sh) only when it is missing.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
export PATH="$HOME/.cargo/bin:$PATH"

if [ ! -f pkg/package.json ] || [ ! -f pkg/edgelock_wasm_bg.wasm ]; then
  bash scripts/build-pkg.sh
fi
cargo build --quiet -p edgelock-devtools --bins
export EDGELOCK_TESTENV_BIN="$CARGO_TARGET_DIR/debug/testenv"

# serve.mjs prints a JSON line on stdout (for tests) and the URL on stderr.
exec node www/serve.mjs "$@" >/dev/null
