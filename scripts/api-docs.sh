#!/usr/bin/env bash
# The API references, built with every warning an error:
#   rustdoc: RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --features native
#            -> $CARGO_TARGET_DIR/doc/edgelock/index.html
#   TypeDoc: the npm package's declarations (pkg-src/index.d.ts)
#            -> $CARGO_TARGET_DIR/api-docs/npm/index.html
# `--rustdoc` builds only the first (scripts/test.sh runs that; the npm
# types are type-checked by scripts/check-docs.sh). TypeDoc is tests/js's
# devDependency (scripts/docs-npm-deps.sh installs it from the lock file).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
export PATH="$HOME/.cargo/bin:$PATH"

echo "== api-docs: rustdoc (-D warnings, feature native)"
RUSTDOCFLAGS="-D warnings" cargo doc --quiet --no-deps --features native
echo "api-docs: $CARGO_TARGET_DIR/doc/edgelock/index.html"
[ "${1:-}" = --rustdoc ] && exit 0

bash scripts/docs-npm-deps.sh
echo "== api-docs: TypeDoc of pkg-src/index.d.ts (warnings are errors)"
out="$CARGO_TARGET_DIR/api-docs/npm"
work=$(mktemp -d "${TMPDIR:-/tmp}/edgelock-api-docs.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp pkg-src/index.d.ts pkg-src/README.md "$work/"
cat >"$work/tsconfig.json" <<'JSON'
{ "compilerOptions": { "strict": true, "noEmit": true, "target": "es2022", "lib": ["es2022", "dom"],
    "module": "nodenext", "moduleResolution": "nodenext", "types": [], "skipLibCheck": false },
  "files": ["index.d.ts"] }
JSON
rm -rf "$out"
node tests/js/node_modules/typedoc/bin/typedoc --logLevel Warn --treatWarningsAsErrors --disableSources \
  --tsconfig "$work/tsconfig.json" --entryPoints "$work/index.d.ts" --readme "$work/README.md" \
  --name edgelock --out "$out"
echo "api-docs: $out/index.html"
