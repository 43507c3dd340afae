#!/usr/bin/env bash
# The demo (the README's first command): installs what is missing, starts local
# backends on loopback, and shows several CLI processes contending for one
# lock, each printing the fencing token it was granted.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '\n\033[1m%s\033[0m\n' "$*"; }
# The CLI part needs only the backends (Debian packages, seconds); the rest of
# the set-up (the wasm tools compile for minutes on a fresh machine) runs in
# the background meanwhile and is waited for before the Worker and the page.
bash scripts/setup.sh --backends
SETUP_LOG=$(mktemp)
bash scripts/setup.sh >"$SETUP_LOG" 2>&1 &
SETUP_PID=$!

say "Building the edgelock CLI and the dev tools"
cargo build --quiet --features native --bin edgelock
cargo build --quiet -p edgelock-devtools --bins
BIN=target/debug

WORK=$(mktemp -d)
FIFO="$WORK/testenv.stdin"
mkfifo "$FIFO"
# testenv runs until its stdin closes: hold the fifo open from this shell.
exec 9<>"$FIFO"
"$BIN/testenv" --etcd 1 --redis 5 --webdis --gateway --token demo-token <"$FIFO" >"$WORK/env.json" 2>"$WORK/testenv.log" &
TESTENV_PID=$!
cleanup() { exec 9>&-; wait "$TESTENV_PID" 2>/dev/null || true; rm -rf "$WORK" "$SETUP_LOG"; }
trap cleanup EXIT
for _ in $(seq 1 300); do [ -s "$WORK/env.json" ] && break; sleep 0.1; done
[ -s "$WORK/env.json" ] || { cat "$WORK/testenv.log" >&2; echo "backends did not start" >&2; exit 1; }
json() { python3 -c "import json,sys; d=json.load(open('$WORK/env.json')); print($1)"; }
ETCD=$(json "d['etcd_urls'][0]")
say "Local backends are up: etcd at $ETCD; 5 redis-server nodes behind webdis and the Upstash gateway"
json "'\n'.join('  webdis  ' + u for u in d['webdis_urls']) + '\n' + '\n'.join('  upstash ' + u for u in d['gateway_urls'])"

run_contenders() {
  local label=$1; shift
  say "$label: 4 processes x 3 runs of one job under lock 'demo-job'"
  local pids=()
  for w in 1 2 3 4; do
    (
      for r in 1 2 3; do
        W=$w R=$r "$BIN/edgelock" run "$@" --wait 30000 demo-job -- sh -c \
          'printf "  worker %s run %s  token=%-6s start %s\n" "$W" "$R" "$EDGELOCK_FENCING_TOKEN" "$(date +%T.%N | cut -c1-12)"; sleep 0.2' \
          2>/dev/null || echo "  worker $w run $r failed (exit $?)"
      done
    ) &
    pids+=($!)
  done
  # Only the workers: a bare `wait` would also wait for testenv.
  wait "${pids[@]}"
}

# Each line is printed by the job itself while it holds the lock: the tokens
# grow strictly, and no two jobs overlap in time.
run_contenders "etcd" --etcd "$ETCD"
REDLOCK=$(json "','.join('webdis+' + u for u in d['webdis_urls'])")
run_contenders "Redlock on 5 independent redis-server nodes (via Webdis)" --redis "$REDLOCK"
UPSTASH=$(json "'upstash+' + d['gateway_urls'][0]")
EDGELOCK_REDIS_TOKEN=demo-token run_contenders "one Redis node over the Upstash REST protocol" --redis "$UPSTASH"

say "Lock status now (nobody holds it):"
"$BIN/edgelock" status --etcd "$ETCD" demo-job || true
say "Waiting for the rest of the set-up (wasm tools, etcd 3.5, npm packages)"
if ! wait "$SETUP_PID"; then cat "$SETUP_LOG" >&2; echo "set-up failed" >&2; exit 1; fi
grep -E 'tools\]|ready' "$SETUP_LOG" || true
say "Cloudflare Worker job coordinator under wrangler dev (loopback, offline)"
bash scripts/demo-worker.sh
say "Live demo page in the browser: open the URL printed below (Ctrl-C stops it)"
bash scripts/www-demo.sh
say "Done. Backends are stopped on exit."
