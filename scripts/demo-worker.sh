#!/usr/bin/env bash
# The Worker demo: builds the job coordinator Worker, starts local backends
# (etcd, Redis behind the Upstash gateway, the fenced resource) and
# `wrangler dev` on loopback, fires a burst of concurrent job requests and a
# cron event at it, and prints the fenced resource's log: one run at a time,
# strictly increasing fencing tokens. No Cloudflare account, nothing fetched.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
export PATH="$HOME/.cargo/bin:$PATH"
export WRANGLER_SEND_METRICS=false CLOUDFLARE_CF_FETCH_ENABLED=false
say() { printf '\n\033[1m%s\033[0m\n' "$*"; }
BURST=${BURST:-12}

say "Building the Worker and the dev tools"
bash scripts/build-worker.sh
cargo build --quiet -p edgelock-devtools --bins

work=$(mktemp -d)
mkfifo "$work/testenv.in"
# testenv runs until its stdin closes: this shell holds the fifo open (fd 9,
# never inherited by children, so that closing it here is the end).
exec 9<>"$work/testenv.in"
"$CARGO_TARGET_DIR/debug/testenv" --etcd 1 --redis 1 --gateway --fenced --token demo-token \
  <"$work/testenv.in" >"$work/env.json" 2>"$work/testenv.log" 9>&- &
testenv_pid=$!
wrangler_pid=
cleanup() {
  if [ -n "$wrangler_pid" ]; then kill "$wrangler_pid" 2>/dev/null || true; wait "$wrangler_pid" 2>/dev/null || true; fi
  exec 9>&-
  wait "$testenv_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 1 300); do [ -s "$work/env.json" ] && break; sleep 0.1; done
[ -s "$work/env.json" ] || { cat "$work/testenv.log" >&2; echo "backends did not start" >&2; exit 1; }
field() { node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")); const v = j[process.argv[2]]; console.log(Array.isArray(v) ? v[0] : v)' "$work/env.json" "$1"; }
ETCD=$(field etcd_urls); GATEWAY=$(field gateway_urls); FENCED=$(field fenced_url)
port=$(node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })')
say "Backends: etcd $ETCD, Upstash gateway $GATEWAY, fenced resource $FENCED"
# Every route needs the deployment's bearer token (src/worker/auth.rs): a
# one-time token for this local demo (a deployment sets it with
# `wrangler secret put EDGELOCK_API_TOKEN`).
API_TOKEN=$(node -e 'console.log(require("crypto").randomBytes(24).toString("hex"))')
AUTH="Authorization: Bearer $API_TOKEN"

print_log() {
  node -e '
    const { entries } = JSON.parse(require("fs").readFileSync(0, "utf8"));
    for (const e of entries) {
      const r = e.record, t = (ms) => new Date(ms).toISOString().slice(11, 23);
      console.log(`  token ${String(e.token).padStart(4)}  ${e.accepted ? "accepted" : "REJECTED"}  ran ${t(r.started)} .. ${t(r.finished)}  invocation ${r.invocation}`);
    }'
}

demo() { # label, wrangler --var args...
  local label=$1; shift
  say "wrangler dev on http://127.0.0.1:$port with the $label backend"
  EDGELOCK_WORKER_PREBUILT=1 tests/worker/node_modules/.bin/wrangler dev --ip 127.0.0.1 --port "$port" \
    --test-scheduled --var "EDGELOCK_API_TOKEN:$API_TOKEN" --var "EDGELOCK_FENCED_URL:$FENCED" --var "EDGELOCK_CRON_WAIT_MS:10000" --var "EDGELOCK_CRON_JOB:nightly-$label" "$@" \
    >"$work/wrangler.log" 2>&1 9>&- &
  wrangler_pid=$!
  for _ in $(seq 1 600); do curl -fs -o /dev/null -H "$AUTH" "http://127.0.0.1:$port/" && break; sleep 0.1; done
  curl -fs -o /dev/null -H "$AUTH" "http://127.0.0.1:$port/" || { cat "$work/wrangler.log" >&2; exit 1; }
  printf 'without the token: HTTP %s\n' "$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$port/jobs/burst-$label/start")"
  local job="burst-$label"
  say "$BURST concurrent POST /jobs/$job/run and 3 cron events"
  local pids=()
  for _ in $(seq 1 "$BURST"); do
    curl -s -X POST -H "$AUTH" "http://127.0.0.1:$port/jobs/$job/run?waitMs=30000" -o /dev/null -w '%{http_code} ' &
    pids+=($!)
  done
  for _ in 1 2 3; do
    curl -s -o /dev/null "http://127.0.0.1:$port/__scheduled?cron=*/5+*+*+*+*" &
    pids+=($!)
  done
  wait "${pids[@]}"
  echo
  for resource in "$job" "nightly-$label"; do
    say "The fenced resource's log for $resource (arrival order):"
    curl -s "$FENCED/log?resource=$resource" | print_log
  done
  kill "$wrangler_pid" 2>/dev/null || true
  wait "$wrangler_pid" 2>/dev/null || true
  wrangler_pid=
}
demo etcd --var EDGELOCK_BACKEND:etcd --var "EDGELOCK_ETCD_ENDPOINTS:$ETCD"
demo upstash --var EDGELOCK_BACKEND:redis --var "EDGELOCK_REDIS_URL:upstash+$GATEWAY" --var EDGELOCK_REDIS_TOKEN:demo-token
say "Done. wrangler and the backends are stopped on exit."
