#!/usr/bin/env bash
# The reliability suite (issue 8): real etcd / redis-server / webdis / Upstash
# gateway processes on loopback, faults from SIGSTOP/SIGCONT, the in-repo
# fault proxy and libfaketime, judged against a fenced resource.
#
#   bash scripts/reliability.sh            every scenario, long sizes; writes RELIABILITY.md
#   bash scripts/reliability.sh --short    a few scenarios (1, 3m-3q, 4, 5c, 8, 9, 10, 11b), short sizes
#                                          (with ZooKeeper: 1p, 10w)
#                                          (with the Worker's backends in workerd: 1l, 1m, 8c, 10n-10r)
#                                          (< 5 min; part of scripts/test.sh); writes target/reliability-short.md
#   bash scripts/reliability.sh --only 5,6 chosen scenarios (long sizes) to target/reliability-only.md
#   ... --etcd-only                        only the etcd variants (with EDGELOCK_ETCD_BIN: another
#                                          etcd version) to target/reliability-etcd-only.md
#
# Exits non-zero if any scenario's "what must hold" failed.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${EDGELOCK_SETUP_DONE:-}" != 1 ]; then
  bash scripts/setup.sh
fi
out=RELIABILITY.md
case "${1:-}" in
  --short) out=target/reliability-short.md ;;
  --only) out=target/reliability-only.md ;;
esac
case " $* " in
  *" --etcd-only "*) out=target/reliability-etcd-only.md ;;
esac
mkdir -p target
# The Durable Object and D1 variants (1l, 1m, 8c, 10n-10r) run the built
# Worker (build/) in workerd through Miniflare from tests/worker/node_modules
# (tools/devtools/workerd-host.mjs): build them if missing.
case " $* " in
  *" --etcd-only "*) ;;
  *)
    if [ ! -d tests/worker/node_modules ] || [ tests/worker/package-lock.json -nt tests/worker/node_modules/.package-lock.json ]; then
      (cd tests/worker && npm ci --no-audit --no-fund --loglevel=error)
    fi
    if [ ! -f build/index.js ]; then
      bash scripts/build-worker.sh
    fi
    ;;
esac
cargo build --quiet -p edgelock-reliability
"${CARGO_TARGET_DIR:-target}/debug/reliability" "$@" --out "$out"
