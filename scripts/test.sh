#!/usr/bin/env bash
# The whole test suite (the README's test command). Installs what is missing,
# then runs every layer: core build checks, simulation, real-server tests,
# the npm package in Node and headless Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
step() { printf '\n\033[1m== %s\033[0m\n' "$*" >&2; }

step "core builds for wasm32 with no I/O dependency"
cargo build --quiet --lib --no-default-features --target wasm32-unknown-unknown

step "no tokio in any feature combination"
for features in "" "--features native" "--features js" "--all-features"; do
  # shellcheck disable=SC2086
  if cargo tree -e normal,build --prefix none $features --target all 2>/dev/null | grep -q '^tokio '; then
    echo "tokio found in the dependency tree with '$features'" >&2; exit 1
  fi
done

step "Rust tests: unit, property, simulation, real etcd/redis/webdis/gateway, CLI"
cargo test --workspace --features native

if [ -x scripts/test-js.sh ]; then
  step "npm package: build, Node tests, types, wasm-pack tests in Node and headless Chromium"
  bash scripts/test-js.sh
fi
step "all green"
