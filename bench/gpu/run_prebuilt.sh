#!/usr/bin/env bash
# Runs the CUDA tests and bench_gpu packed by bench/gpu/bundle.sh, with the
# libraries packed beside them, then the torch async_save peer, then
# bench_throughput (raw) where it was packed. Run from the repository root;
# logs go to $OUT (default /tmp/out).
set -u
B=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}
mkdir -p "$O"
export LD_LIBRARY_PATH="$B/lib" UCX_TLS=sm,tcp UCX_WARN_UNUSED_ENV_VARS=n
{ nvidia-smi -L; uname -r; nproc; free -g | head -2; ldd "$B/bin/bench_gpu" | grep "not found"; } 2>&1 | tee "$O/env.log"
echo "== cuda_test"; timeout 120 "$B/bin/cuda_test" > "$O/cuda_test.log" 2>&1; echo "rc=$?"; grep -E "PASSED|FAILED|SKIPPED|tests ran" "$O/cuda_test.log" | tail -6
echo "== cuda_save_test"; timeout 120 "$B/bin/cuda_save_test" > "$O/cuda_save_test.log" 2>&1; echo "rc=$?"; grep -E "PASSED|FAILED|SKIPPED|tests ran|Failure" "$O/cuda_save_test.log" | tail -8
echo "== bench_gpu"; timeout 260 "$B/bin/bench_gpu" --sizes-gib 1,4,16 --staging-gib 17 --json "$O/bench_gpu.json" --dir /tmp > "$O/bench_gpu.log" 2>&1; echo "rc=$?"; tail -30 "$O/bench_gpu.log"
echo "== torch async_save"; PYTHONUNBUFFERED=1 timeout 150 python3 bench/gpu/torch_async_save.py --sizes-gib 1,4,16 --dir /tmp --stagger-json "$O/bench_gpu.json" > "$O/torch.log" 2>&1; echo "rc=$?"; tail -12 "$O/torch.log"
if [ -x "$B/bin/bench_throughput" ]; then
  echo "== bench_throughput"; timeout 120 "$B/bin/bench_throughput" --codecs raw --iterations 3 --data /tmp --json "$O/bench_throughput.json" > "$O/bench_throughput.log" 2>&1; echo "rc=$?"; tail -8 "$O/bench_throughput.log"
fi
