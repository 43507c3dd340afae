#!/usr/bin/env bash
# TypeScript and TypeDoc for scripts/check-docs.sh and scripts/api-docs.sh:
# tests/js's devDependencies, installed from its lock file (npm registry
# only) unless the pinned versions are there already (idempotent, and it
# leaves alone what test-js.sh installed beside them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../tests/js"
if ! node -e '
  const fs = require("fs");
  const want = JSON.parse(fs.readFileSync("package.json", "utf8")).devDependencies;
  for (const name of ["typescript", "typedoc"]) {
    const have = JSON.parse(fs.readFileSync(`node_modules/${name}/package.json`, "utf8")).version;
    if (have !== want[name]) process.exit(1);
  }' 2>/dev/null; then
  echo "== docs: npm ci in tests/js (typescript, typedoc)"
  npm ci --no-audit --no-fund --loglevel=error
fi
