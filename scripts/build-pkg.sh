#!/usr/bin/env bash
# Builds the npm package into pkg/ (generated; the hand-written parts live in
# pkg-src/): wasm-pack --target web (glue + wasm), wasm-opt -Os, then the
# wrapper, entry points, types, README and LICENSE from pkg-src/, and a
# package.json whose version is the crate's. Prints the wasm size (raw, gzip).
#
# Env: CARGO_TARGET_DIR (default ./target), EDGELOCK_SKIP_TOOL_INSTALL=1 to
# fail instead of installing missing wasm-pack / wasm-bindgen-cli.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
export PATH="$HOME/.cargo/bin:$PATH"

WASM_BINDGEN_VERSION=0.2.130   # must equal the wasm-bindgen pin in Cargo.toml
WASM_PACK_VERSION=0.15.1

ensure_tool() { # name version crate
  if "$1" --version 2>/dev/null | grep -q " $2\$"; then return; fi
  if [ "${EDGELOCK_SKIP_TOOL_INSTALL:-}" = 1 ]; then
    echo "build-pkg: $1 $2 is required (cargo install $3 --version =$2)" >&2; exit 1
  fi
  echo "build-pkg: installing $3 $2 (one-time)" >&2
  cargo install "$3" --version "=$2" >&2
}
ensure_tool wasm-bindgen "$WASM_BINDGEN_VERSION" wasm-bindgen-cli
ensure_tool wasm-pack "$WASM_PACK_VERSION" wasm-pack
rustup target list --installed 2>/dev/null | grep -q wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown

stage="$CARGO_TARGET_DIR/edgelock-pkg-stage"
rm -rf "$stage"
# --no-opt: wasm-opt runs below with explicit flags; --no-pack: package.json is ours.
# opt-level "z" for the wasm only (the native release profile keeps "s"):
# 177 -> 162 KiB gzip together with wasm-opt -Oz, and a lock client is bound
# by the network, not by instructions.
CARGO_PROFILE_RELEASE_OPT_LEVEL=${CARGO_PROFILE_RELEASE_OPT_LEVEL:-z} wasm-pack --quiet build "$root" --release --target web --no-pack --no-opt \
  --out-dir "$stage" --out-name edgelock_wasm -- --features js

wasm="$stage/edgelock_wasm_bg.wasm"
# wasm-opt >= 116 is needed: older Binaryen (Debian 12 ships 108) exports the
# wrong table for wasm-bindgen's externref table and the module fails to load.
# Fall back to Binaryen's npm build, pinned.
BINARYEN_NPM_VERSION=132.0.0
wasm_opt=(wasm-opt)
have=$(wasm-opt --version 2>/dev/null | sed -n 's/^wasm-opt version \([0-9]*\).*/\1/p')
if [ -z "$have" ] || [ "$have" -lt 116 ]; then
  wasm_opt=(npm exec --yes --package="binaryen@$BINARYEN_NPM_VERSION" -- wasm-opt)
fi
# The features rustc enables by default for wasm32-unknown-unknown; all
# current browsers, Node >= 20 and workerd have them.
"${wasm_opt[@]}" -Oz --strip-debug --strip-producers \
  --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
  --enable-mutable-globals --enable-reference-types --enable-multivalue \
  "$wasm" -o "$stage/opt.wasm" 2> >(grep -v 'Unknown user config' >&2)
mv "$stage/opt.wasm" "$wasm"

rm -rf pkg
mkdir pkg
cp "$stage/edgelock_wasm.js" "$wasm" pkg/
cp pkg-src/api.mjs pkg-src/index.node.mjs pkg-src/node_http.mjs pkg-src/index.deno.mjs pkg-src/index.browser.mjs pkg-src/index.workerd.mjs \
   pkg-src/index.d.ts pkg-src/README.md pkg-src/LICENSE pkg/
mkdir pkg/sockets
cp pkg-src/sockets/node.mjs pkg-src/sockets/deno.mjs pkg-src/sockets/workerd.mjs pkg/sockets/
version=$(sed -n 's/^version = "\([^"]*\)"$/\1/p' Cargo.toml | head -n 1)
node -e '
  const fs = require("fs");
  const p = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
  p.version = process.argv[2];
  fs.writeFileSync(process.argv[3], JSON.stringify(p, null, 2) + "\n");
' pkg-src/package.json "$version" pkg/package.json

raw=$(wc -c < pkg/edgelock_wasm_bg.wasm)
gz=$(gzip -9 -c pkg/edgelock_wasm_bg.wasm | wc -c)
awk -v v="$version" -v r="$raw" -v g="$gz" 'BEGIN {
  printf "build-pkg: pkg/ edgelock %s: edgelock_wasm_bg.wasm %d bytes raw (%.1f KiB), %d bytes gzip -9 (%.1f KiB)\n", v, r, r / 1024, g, g / 1024 }'
