#!/usr/bin/env bash
# The examples of README.md, docs/ and the npm package's README compile:
#   1. every code block marked `<!-- example: FILE[#REGION] -->` equals its
#      file or region (scripts/docs-examples.py; `… fix` rewrites the blocks);
#   2. the TypeScript examples (docs/examples/*.ts) type-check with
#      `tsc --strict` against the packed package (npm pack pkg/, unpacked
#      into a scratch project, resolved through its package.json exports);
#   3. the Rust examples (examples/docs_*.rs) build (`cargo build --examples`).
# Uses tests/js's TypeScript (npm ci there when it is missing: the npm
# registry only, from the lock file). Builds pkg/ when it is missing or its
# types or README are not pkg-src/'s.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
export PATH="$HOME/.cargo/bin:$PATH"

echo "== check-docs: code blocks equal their example files"
python3 scripts/docs-examples.py check

bash scripts/docs-npm-deps.sh

if ! cmp -s pkg/index.d.ts pkg-src/index.d.ts || ! cmp -s pkg/README.md pkg-src/README.md; then
  bash scripts/build-pkg.sh
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/edgelock-check-docs.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "== check-docs: tsc --strict of docs/examples/*.ts against the packed package"
tarball=$(cd "$work" && npm pack "$root/pkg" --loglevel=error | tail -n 1)
mkdir -p "$work/project/node_modules/edgelock"
tar -xzf "$work/$tarball" -C "$work/project/node_modules/edgelock" --strip-components=1
printf '{ "private": true, "type": "module" }\n' >"$work/project/package.json"
cp docs/examples/*.ts docs/examples/tsconfig.json "$work/project/"
if ! (cd "$work/project" && node "$root/tests/js/node_modules/typescript/bin/tsc" -p tsconfig.json >"$work/tsc.out" 2>&1); then
  sed -E "s#^([^ ]+\.ts\()#docs/examples/\1#" "$work/tsc.out" >&2
  echo "check-docs: docs/examples/ does not type-check against the packed package" >&2
  exit 1
fi
echo "check-docs: $(ls docs/examples/*.ts | wc -l) files type-check"

echo "== check-docs: cargo build --features native --examples"
cargo build --quiet --features native --examples
echo "== check-docs: all examples compile"
