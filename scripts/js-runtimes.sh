#!/usr/bin/env bash
# Installs the pinned Deno and Bun (the JS runtimes the npm package is tested
# under besides Node) from their npm platform packages into a per-user cache,
# if they are not there yet, and prints the path of each binary:
#   scripts/js-runtimes.sh        -> two lines: deno's path, then bun's
#   scripts/js-runtimes.sh deno   -> deno's path (likewise bun)
# Idempotent. The platform packages (@deno/linux-x64-glibc, @oven/bun-linux-x64)
# carry the binaries themselves, so no install script runs and nothing is
# downloaded from outside the npm registry (the `deno` / `bun` wrapper
# packages would pull every platform's optional package through).
set -euo pipefail
DENO_VERSION=2.9.6
BUN_VERSION=1.4.4
cache="${EDGELOCK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/edgelock}"

case "$(uname -m)" in
  x86_64)
    deno_pkg=@deno/linux-x64-glibc
    # Bun's default x64 build needs AVX2; its "baseline" build does not.
    if grep -qw avx2 /proc/cpuinfo 2>/dev/null; then bun_pkg=@oven/bun-linux-x64; else bun_pkg=@oven/bun-linux-x64-baseline; fi ;;
  aarch64 | arm64)
    deno_pkg=@deno/linux-arm64-glibc
    bun_pkg=@oven/bun-linux-aarch64 ;;
  *) echo "js-runtimes: no Deno/Bun package for $(uname -m)" >&2; exit 1 ;;
esac

install() { # name version package binary-inside-package -> prints the binary's path
  local dir="$cache/$1-$2" bin
  bin="$dir/node_modules/$3/$4"
  if ! "$bin" --version 2>/dev/null | grep -q "$2"; then
    printf '\033[1m[setup]\033[0m %s\n' "npm install $3@$2 into $dir" >&2
    rm -rf "$dir"
    mkdir -p "$dir"
    npm install --prefix "$dir" --save-exact --ignore-scripts --no-audit --no-fund --loglevel=error "$3@$2" >&2
    "$bin" --version >/dev/null
  fi
  echo "$bin"
}

case "${1:-all}" in
  deno) install deno "$DENO_VERSION" "$deno_pkg" deno ;;
  bun) install bun "$BUN_VERSION" "$bun_pkg" bin/bun ;;
  all)
    install deno "$DENO_VERSION" "$deno_pkg" deno
    install bun "$BUN_VERSION" "$bun_pkg" bin/bun ;;
  *) echo "usage: $0 [deno|bun]" >&2; exit 2 ;;
esac
