#!/usr/bin/env bash
# Browser test of the www/ demo page: www/serve.mjs (real etcd, redis-server,
# webdis and the Upstash gateway through the devtools testenv) driven by
# playwright-core in Debian's Chromium (tests/www/www.test.mjs). Screenshots
# are written to .test-output/www/ and their paths printed.
# Reuses pkg/ when it exists (scripts/test-js.sh builds it just before in
# scripts/test.sh); EDGELOCK_WWW_REBUILD=1 forces scripts/build-pkg.sh.
# Needs: node >= 20, npm, chromium (CHROMIUM_BIN overrides /usr/bin/chromium).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
export PATH="$HOME/.cargo/bin:$PATH"

if [ "${EDGELOCK_WWW_REBUILD:-}" = 1 ] || [ ! -f pkg/package.json ] || [ ! -f pkg/edgelock_wasm_bg.wasm ]; then
  bash scripts/build-pkg.sh
else
  echo "== www: using the existing pkg/ (EDGELOCK_WWW_REBUILD=1 rebuilds it)"
fi

echo "== www: devtools (testenv)"
cargo build --quiet -p edgelock-devtools --bins
export EDGELOCK_TESTENV_BIN="$CARGO_TARGET_DIR/debug/testenv"

echo "== www: playwright-core (tests/www)"
(cd tests/www && npm ci --no-audit --no-fund --loglevel=error)

echo "== www: demo page in headless Chromium"
# The test bounds itself (170 s); this is the backstop.
timeout --kill-after=10 185 node tests/www/www.test.mjs
