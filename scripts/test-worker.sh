#!/usr/bin/env bash
# The Worker's tests: builds the Worker (scripts/build-worker.sh) and the
# devtools binaries, then runs tests/worker in Node: the built Worker in
# workerd through Miniflare's API, against real etcd, Redis behind webdis and
# the local Upstash gateway, Redlock over three nodes, Redis over redis://
# through workerd's connect() (tests/worker/tcp.test.mjs: five redis-servers
# of its own), and the fenced resource (all started by the devtools `testenv`
# on loopback, stopped afterwards).
#
# Needs: etcd, redis-server, webdis (Debian packages), node >= 20, npm.
# Nothing is fetched but crates and npm packages; nothing calls Cloudflare.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
export PATH="$HOME/.cargo/bin:$PATH"
export WRANGLER_SEND_METRICS=false CLOUDFLARE_CF_FETCH_ENABLED=false

# EDGELOCK_WORKER_SKIP_BUILD=1 reuses an existing build/ (quick iteration on tests).
if [ "${EDGELOCK_WORKER_SKIP_BUILD:-}" = 1 ] && [ -f build/index.js ]; then
  echo "== using the existing build/ (EDGELOCK_WORKER_SKIP_BUILD=1)"
else
  echo "== building the Worker"
  bash scripts/build-worker.sh
fi

# The npm package's own tests in workerd (tests/worker/durable_backend.test.mjs
# and d1.test.mjs) need a current pkg/; the README test command has built it
# already (scripts/test-js.sh), so this rebuilds it only when run alone.
if [ ! -f pkg/package.json ] || [ -n "$(find pkg-src src Cargo.toml -newer pkg/package.json -print -quit)" ]; then
  echo "== building the npm package (pkg/ is missing or older than its sources)"
  bash scripts/build-pkg.sh
fi

echo "== devtools (testenv: etcd / redis-server / webdis / Upstash gateway / fenced resource)"
cargo build --quiet -p edgelock-devtools --bins

cd tests/worker
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
echo "== node --test (tests/worker)"
status=0
EDGELOCK_DEVTOOLS_NO_BUILD=1 node --test --test-concurrency=1 "$@" || status=$?
cd "$root"
# The native Rust client and the CLI against this Worker's lock service
# (tests/durable_native.rs: ignored by the plain `cargo test`, which runs
# before build/ exists).
echo "== cargo test --test durable_native -- --ignored (the built Worker in workerd)"
cargo test --quiet --features native --test durable_native -- --ignored || status=$?
exit "$status"
