#!/usr/bin/env bash
# Browser test of the www/ demo page: www/serve.mjs (real etcd, redis-server,
# webdis and the Upstash gateway through the devtools testenv; the built
# Worker's Durable Object lock service in workerd) driven by
# playwright-core in Debian's Chromium (tests/www/www.test.mjs). Screenshots
# are written to .test-output/www/ and their paths printed.
# Reuses pkg/ when it exists (scripts/test-js.sh builds it just before in
# scripts/test.sh); EDGELOCK_WWW_REBUILD=1 forces scripts/build-pkg.sh.
# Needs: node >= 20, npm, chromium (CHROMIUM_BIN overrides /usr/bin/chromium).
# EDGELOCK_WWW_REBUILD=1 also rebuilds build/ (scripts/build-worker.sh).
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

# The durable-object case runs the built Worker (build/) in workerd through
# tests/worker's Miniflare: built when missing or older than its sources
# (EDGELOCK_WWW_REBUILD=1 forces it), as scripts/test-worker.sh would.
if [ "${EDGELOCK_WWW_REBUILD:-}" = 1 ] || [ ! -f build/index.js ] || [ ! -f build/index_bg.wasm ] \
  || [ -n "$(find src Cargo.toml Cargo.lock -newer build/index.js -print -quit)" ]; then
  echo "== www: building the Worker (build/ is missing or older than its sources)"
  EDGELOCK_WORKER_PREBUILT= bash scripts/build-worker.sh
else
  echo "== www: using the existing build/ (EDGELOCK_WWW_REBUILD=1 rebuilds it)"
fi
if [ ! -d tests/worker/node_modules ] || [ tests/worker/package-lock.json -nt tests/worker/node_modules/.package-lock.json ]; then
  echo "== www: Miniflare (tests/worker)"
  (cd tests/worker && npm ci --no-audit --no-fund --loglevel=error)
fi

echo "== www: devtools (testenv)"
cargo build --quiet -p edgelock-devtools --bins
export EDGELOCK_TESTENV_BIN="$CARGO_TARGET_DIR/debug/testenv"

echo "== www: playwright-core (tests/www)"
(cd tests/www && npm ci --no-audit --no-fund --loglevel=error)

echo "== www: demo page in headless Chromium"
# The test bounds itself (210 s); this is the backstop.
timeout --kill-after=10 225 node tests/www/www.test.mjs
