#!/bin/bash
# Installs the build into a temporary prefix (cmake --install), then builds
# examples/cpp_client outside the tree twice, with find_package(stagger)
# and with pkg-config, and runs both against the installed stagger-server.
# Usage: scripts/test-install.sh [BUILD_DIR]
set -euo pipefail
build="${1:-build}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d /tmp/stagger-install-XXXXXX)"
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "== cmake --install $build --prefix $work/prefix"
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
echo "== examples/cpp_client with find_package(stagger)"
cmake -S "$root/examples/cpp_client" -B "$work/example" \
  -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/example.log" 2>&1 \
  || { cat "$work/example.log"; exit 1; }
cmake --build "$work/example" > "$work/example-build.log" 2>&1 \
  || { cat "$work/example-build.log"; exit 1; }
echo "== examples/cpp_client with pkg-config"
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
# shellcheck disable=SC2046
g++ -std=c++17 -O1 -o "$work/cpp_client_pc" "$root/examples/cpp_client/main.cc" \
  $(pkg-config --cflags --libs stagger)

echo "== against the installed stagger-server"
"$work/prefix/bin/stagger-server" --data "$work/data" --listen 127.0.0.1:0 \
  > "$work/server.out" 2> "$work/server.log" &
server_pid=$!
for _ in $(seq 1 300); do
  grep -q '^stagger-server ready' "$work/server.out" && break
  sleep 0.1
done
grpc="$(sed -n 's/^stagger-server ready grpc=\([^ ]*\).*/\1/p' "$work/server.out")"
if [[ -z "$grpc" ]]; then
  echo "test-install: the installed stagger-server did not start:" >&2
  cat "$work/server.log" >&2
  exit 1
fi
"$work/example/cpp_client" "$grpc" installed-cmake
"$work/cpp_client_pc" "$grpc" installed-pkgconfig
"$work/prefix/bin/stagger" --server "$grpc" ls --job installed-cmake
echo "test-install: OK"
