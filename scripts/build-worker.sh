#!/usr/bin/env bash
# Builds the Cloudflare Worker (src/worker, feature `worker`) into build/ with
# worker-build: build/index.js (entry, wasm-bindgen glue + worker-build's
# shim) and build/index_bg.wasm. wrangler.toml points at it. Prints the wasm
# size (raw, gzip).
#
# Nothing is downloaded but crates and npm packages: worker-build would fetch
# wasm-bindgen, esbuild and wasm-opt binaries itself, so it is handed
#   WASM_BINDGEN_BIN  the wasm-bindgen CLI matching Cargo.lock (cargo install),
#   ESBUILD_BIN       esbuild from tests/worker/node_modules (npm),
# and runs with --no-opt; wasm-opt (Binaryen's npm build, Debian's is too old
# for this output) runs here afterwards with explicit feature flags.
#
# Env: CARGO_TARGET_DIR (default ./target); EDGELOCK_SKIP_TOOL_INSTALL=1 to
# fail instead of installing missing tools; EDGELOCK_WORKER_NO_OPT=1 to skip
# wasm-opt (faster local iteration); EDGELOCK_WORKER_PREBUILT=1 to keep an
# existing build/.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
export PATH="$HOME/.cargo/bin:$PATH"

# wrangler runs this as its [build] command on every `wrangler dev`; a caller
# that has just built (scripts/demo-worker.sh) sets EDGELOCK_WORKER_PREBUILT=1.
if [ "${EDGELOCK_WORKER_PREBUILT:-}" = 1 ] && [ -f build/index.js ]; then
  exit 0
fi

WORKER_BUILD_VERSION=0.8.7   # must equal the `worker` crate pin in Cargo.toml
WASM_BINDGEN_VERSION=$(awk '/^name = "wasm-bindgen"$/{getline; gsub(/version = |"/, ""); print; exit}' Cargo.lock)

install_or_fail() { # what command...
  if [ "${EDGELOCK_SKIP_TOOL_INSTALL:-}" = 1 ]; then
    echo "build-worker: $1 is required" >&2; exit 1
  fi
  echo "build-worker: installing $1 (one-time)" >&2
  shift
  "$@" >&2
}
if [ "$(worker-build --version 2>/dev/null)" != "$WORKER_BUILD_VERSION" ]; then
  install_or_fail "worker-build $WORKER_BUILD_VERSION" \
    cargo install --locked worker-build --version "=$WORKER_BUILD_VERSION"
fi
if ! wasm-bindgen --version 2>/dev/null | grep -q " $WASM_BINDGEN_VERSION\$"; then
  install_or_fail "wasm-bindgen-cli $WASM_BINDGEN_VERSION" \
    cargo install --locked wasm-bindgen-cli --version "=$WASM_BINDGEN_VERSION" --force
fi
rustup target list --installed 2>/dev/null | grep -q wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown
npm_dir=tests/worker
if [ ! -x "$npm_dir/node_modules/.bin/esbuild" ] || [ "$npm_dir/package-lock.json" -nt "$npm_dir/node_modules/.package-lock.json" ]; then
  (cd "$npm_dir" && npm ci --no-audit --no-fund --loglevel=error)
fi

export WASM_BINDGEN_BIN="$HOME/.cargo/bin/wasm-bindgen"
export ESBUILD_BIN="$root/$npm_dir/node_modules/.bin/esbuild"
export WRANGLER_SEND_METRICS=false CLOUDFLARE_CF_FETCH_ENABLED=false

CARGO_PROFILE_RELEASE_OPT_LEVEL=${CARGO_PROFILE_RELEASE_OPT_LEVEL:-z} worker-build --release --no-opt --out-dir build --features worker >&2

wasm=build/index_bg.wasm
[ -f "$wasm" ] || { echo "build-worker: $wasm was not produced" >&2; exit 1; }
if [ "${EDGELOCK_WORKER_NO_OPT:-}" != 1 ]; then
  # The features rustc enables by default for wasm32-unknown-unknown (and
  # worker-build's own list); workerd has them all.
  "$npm_dir/node_modules/.bin/wasm-opt" -Oz --strip-debug --strip-producers \
    --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
    --enable-mutable-globals --enable-reference-types --enable-multivalue \
    --enable-exception-handling \
    "$wasm" -o "$wasm.opt" 2> >(grep -v 'Unknown user config' >&2)
  mv "$wasm.opt" "$wasm"
fi

raw=$(wc -c < "$wasm")
gz=$(gzip -9 -c "$wasm" | wc -c)
awk -v r="$raw" -v g="$gz" 'BEGIN {
  printf "build-worker: build/index_bg.wasm %d bytes raw (%.1f KiB), %d bytes gzip -9 (%.1f KiB)\n", r, r / 1024, g, g / 1024 }'
