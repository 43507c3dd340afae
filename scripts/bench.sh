#!/usr/bin/env bash
# Benchmarks edgelock against the peer lock libraries (etcd3, redlock@5 and
# @sesamecare-oss/redlock over ioredis, redis-semaphore, @upstash/lock over
# @upstash/redis), side by side on
# local backends started by the devtools `testenv`, from Node (npm package) and
# native Rust (examples/bench_native.rs): uncontended ops/s and requests per op,
# handoff latency and the waiter's requests per handoff (Redis push wake-up on
# the Upstash gateway, Webdis and Redlock), 16-client contention fairness
# (default and `fair: true` when the core accepts it), footprint; semaphores
# of 3 next to redis-semaphore's Semaphore/RedlockSemaphore (bench/semaphore.mjs);
# read-write locks next to the same backend's exclusive lock (bench/rwlock.mjs);
# leader election failover next to etcd3's Election (bench/election.mjs); the
# Durable Object lock service and D1 backends inside workerd next to each
# other and to etcd and Redis reached from the same Worker (bench/durable.mjs,
# needs build/ and Miniflare from tests/worker); the Worker's handoff over
# redis:// next to the Upstash gateway inside workerd (bench/workerd_tcp.mjs); the
# native client on a local ZooKeeper next to Curator's InterProcessMutex
# (bench/zookeeper.mjs; the ratio printed, never asserted). Bounded (about 3 minutes of measuring after the builds).
# Writes BENCHMARKS.md, bench/handoff.svg and bench/results.json (and the
# other benches' bench/*-results.json).
#   BENCH_SKIP_SETUP=1   do not run scripts/setup.sh first
#   BENCH_REBUILD_PKG=1  rebuild pkg/ even if it exists (otherwise built only when missing)
#   BENCH_REBUILD_WORKER=1  rebuild build/ (the Worker, optimized) even if it exists
#   BENCH_QUICK=1        a few seconds per phase, to check the harness (numbers meaningless)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}

if [ "${BENCH_SKIP_SETUP:-}" != 1 ]; then
  bash scripts/setup.sh
fi
if [ "${BENCH_REBUILD_PKG:-}" = 1 ] || [ ! -f pkg/package.json ] || [ ! -f pkg/edgelock_wasm_bg.wasm ]; then
  bash scripts/build-pkg.sh
else
  echo "== using the existing pkg/ (BENCH_REBUILD_PKG=1 rebuilds it)"
fi
if [ "${BENCH_REBUILD_WORKER:-}" = 1 ] || [ ! -f build/index.js ] || [ ! -f build/index_bg.wasm ]; then
  # Optimized (wasm-opt): the Durable Object figures come from this build.
  EDGELOCK_WORKER_NO_OPT= EDGELOCK_WORKER_PREBUILT= bash scripts/build-worker.sh
else
  echo "== using the existing build/ (BENCH_REBUILD_WORKER=1 rebuilds it)"
fi
if [ ! -f tests/worker/node_modules/miniflare/package.json ]; then
  echo "== npm ci in tests/worker (Miniflare, for bench/durable.mjs)"
  (cd tests/worker && npm ci --no-audit --no-fund --loglevel=error)
fi
echo "== devtools (testenv)"
cargo build --quiet -p edgelock-devtools --bins
export EDGELOCK_TESTENV_BIN="$CARGO_TARGET_DIR/debug/testenv"

echo "== native bench driver (examples/bench_native.rs, release)"
cargo build --quiet --release --features native --example bench_native
export BENCH_NATIVE_BIN="$CARGO_TARGET_DIR/release/examples/bench_native"

echo "== npm ci in bench/ (pinned peers)"
(cd bench && npm ci --no-audit --no-fund --loglevel=error)

echo "== running bench/run.mjs"
node bench/run.mjs
echo "== wrote BENCHMARKS.md and bench/handoff.svg"
echo "== running bench/semaphore.mjs (semaphores next to redis-semaphore)"
node bench/semaphore.mjs
echo "== running bench/rwlock.mjs (read-write locks next to the same backend's exclusive lock)"
node bench/rwlock.mjs
echo "== running bench/election.mjs (leader election next to etcd3's Election)"
node bench/election.mjs
echo "== running bench/durable.mjs (the Durable Object and D1 backends inside workerd next to etcd and Redis)"
node bench/durable.mjs
echo "== running bench/workerd_tcp.mjs (the Worker's handoff over redis:// next to the Upstash gateway, inside workerd)"
node bench/workerd_tcp.mjs
echo "== running bench/zookeeper.mjs (the native client on ZooKeeper next to Curator's InterProcessMutex; the ratio printed, not asserted)"
node bench/zookeeper.mjs
