#!/usr/bin/env bash
# Runs what bench/gpu/bundle.sh packed, with the libraries packed beside it,
# from the repository root (it reads bench/gpu/torch_async_save.py): the
# CUDA tests, bench_gpu (1, 4 and 16 GiB), then, where packed, the host
# benchmarks on this machine's cores (bench_throughput with every codec,
# bench_stall, bench_recovery, bench_restore, each at its default size),
# then the torch async_save peer. Logs go to $OUT (default /tmp/out), one
# per step, and every step's tail to $OUT/summary.log.
#
# Each step runs under `timeout`; a step that would not fit in what is left
# of STAGGER_GPU_BUDGET_S (default 450 s) is skipped, saying so.
set -u
B=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}
BUDGET=${STAGGER_GPU_BUDGET_S:-450}
mkdir -p "$O"
export LD_LIBRARY_PATH="$B/lib" UCX_TLS=sm,tcp UCX_WARN_UNUSED_ENV_VARS=n
S="$O/summary.log"
{ nvidia-smi -L; uname -r; echo "cores: $(nproc)"; free -g | head -2
  df -h /tmp | tail -1; ldd "$B/bin/bench_gpu" | grep "not found"; } 2>&1 |
  tee "$S"

# step NAME LIMIT_S TAIL_LINES CMD...: runs CMD under `timeout` (at most what
# is left of the budget) into $O/NAME.log; appends rc and the log's tail to
# the summary.
step() {
  local name=$1 limit=$2 lines=$3
  shift 3
  local left=$(( BUDGET - SECONDS ))
  if [ "$left" -lt "$limit" ]; then
    echo "== $name: skipped, ${left}s left of the ${BUDGET}s budget" | tee -a "$S"
    return
  fi
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" > "$O/$name.log" 2>&1
  local rc=$?
  { echo "== $name: rc=$rc in $(( SECONDS - t0 ))s"
    tail -n "$lines" "$O/$name.log"; } | tee -a "$S"
}

step cuda_test 90 4 "$B/bin/cuda_test"
step cuda_save_test 90 6 "$B/bin/cuda_save_test"
step bench_gpu 200 30 "$B/bin/bench_gpu" --sizes-gib 1,4,16 --staging-gib 17 \
  --json "$O/bench_gpu.json" --dir /tmp
for b in throughput stall recovery restore; do
  [ -x "$B/bin/bench_$b" ] || continue
  case $b in
    throughput) step bench_throughput 120 12 "$B/bin/bench_throughput" \
                  --iterations 3 --data /tmp ;;
    *) step "bench_$b" 90 12 "$B/bin/bench_$b" --data /tmp ;;
  esac
done
step torch_async_save 120 12 env PYTHONUNBUFFERED=1 python3 \
  bench/gpu/torch_async_save.py --sizes-gib 1,4,16 --dir /tmp \
  --stagger-json "$O/bench_gpu.json"
