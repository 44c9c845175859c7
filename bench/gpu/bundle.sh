#!/usr/bin/env bash
# bench/gpu/bundle.sh DIR [BUILD_DIR]: packs the CUDA tests and bench_gpu,
# already built here with CUDA, together with the shared libraries they need
# beyond the C runtime, into DIR, for a GPU machine that cannot install
# stagger's build dependencies. stagger-server and the host benchmarks
# (bench_throughput, bench_stall, bench_recovery, bench_restore) go in too
# where they are built in BUILD_DIR: figures on the GPU machine's cores.
# There: `bash DIR/run_prebuilt.sh` from the repository root (it reads
# bench/gpu/torch_async_save.py), OUT=dir for logs.
set -euo pipefail
DIR=${1:?usage: bundle.sh DIR [BUILD_DIR]}
BUILD=${2:-build}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
BINS=("$BUILD/bin/bench_gpu" "$BUILD/tests/cuda_test" "$BUILD/tests/cuda_save_test")
for b in "${BINS[@]}"; do
  [ -x "$b" ] || { echo "bundle: $b missing (build with CUDA first)" >&2; exit 1; }
done
if [ -x "$BUILD/bin/stagger-server" ]; then
  BINS+=("$BUILD/bin/stagger-server")
  for b in throughput stall recovery restore; do
    if [ -x "$BUILD/bin/bench_$b" ]; then
      BINS+=("$BUILD/bin/bench_$b")
    else
      echo "bundle: no bench_$b in $BUILD/bin; left out" >&2
    fi
  done
else
  echo "bundle: no stagger-server in $BUILD/bin; the host benchmarks are left out" >&2
fi
rm -rf "$DIR"
mkdir -p "$DIR/bin" "$DIR/lib"
for b in "${BINS[@]}"; do strip -o "$DIR/bin/$(basename "$b")" "$b"; done
ldd "${BINS[@]}" | awk '$3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread*|libdl.so*|librt.so*|libgcc_s*|libstdc++*) ;;
    *) cp -L "$lib" "$DIR/lib/" ;;
  esac
done
cp bench/gpu/run_prebuilt.sh "$DIR/run_prebuilt.sh"
du -sh "$DIR"
