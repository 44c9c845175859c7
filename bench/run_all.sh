#!/usr/bin/env bash
# Runs every benchmark driver and prints their RESULT lines.
#
#   bench/run_all.sh [--smoke] [--size SIZE] [--data DIR] [--json-dir DIR]
#
# --smoke      tiny sizes (32MiB), the whole run in well under 30 s; CI runs
#              this once. Timings are printed, never asserted.
# --size SIZE  state size for every driver (default: each driver's own).
# --data DIR   parent of the drivers' temporary data directories (/tmp).
# --json-dir   write each driver's figures to DIR/<driver>.json.
#
# Binaries come from $STAGGER_BIN_DIR, else build/bin under the repository.
# Exit status: 0 when every driver exited 0 and printed a RESULT line as its
# last line; 1 otherwise (a crash, a timeout, an error, no RESULT line).
set -u -o pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin_dir="${STAGGER_BIN_DIR:-$here/../build/bin}"
drivers=(stall throughput incremental restore recovery scale ranks)

smoke=0
size=""
data=""
json_dir=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --smoke) smoke=1 ;;
    --size) size="${2:?--size needs a value}"; shift ;;
    --data) data="${2:?--data needs a value}"; shift ;;
    --json-dir) json_dir="${2:?--json-dir needs a value}"; shift ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run_all.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if [[ ! -d "$bin_dir" ]]; then
  echo "run_all.sh: no binary directory $bin_dir (build first, or set" \
       "STAGGER_BIN_DIR)" >&2
  exit 1
fi
bin_dir="$(cd "$bin_dir" && pwd)"
# The throughput and restore drivers start stagger-server from here too.
export STAGGER_BIN_DIR="$bin_dir"
export UCX_TLS="${UCX_TLS:-sm,tcp}"

common_args=()
limit_s=3600
if [[ $smoke -eq 1 ]]; then
  common_args+=(--size "${size:-32MiB}")
  limit_s=120
elif [[ -n "$size" ]]; then
  common_args+=(--size "$size")
fi
[[ -n "$data" ]] && common_args+=(--data "$data")
[[ -n "$json_dir" ]] && mkdir -p "$json_dir"

run_with_limit=()
command -v timeout >/dev/null && run_with_limit=(timeout -k 10 "$limit_s")

out="$(mktemp -d "${TMPDIR:-/tmp}/stagger-run-all-XXXXXX")"
trap 'rm -rf "$out"' EXIT

failed=0
results=()
for name in "${drivers[@]}"; do
  exe="$bin_dir/bench_$name"
  args=("${common_args[@]}")
  if [[ $name == scale && $smoke -eq 1 ]]; then
    # --size is per rank there: 8 ranks of 1 MiB, not 256 of 4 MiB.
    args=(--ranks 8 --procs 4 --size 1MiB --steps 1)
    [[ -n "$data" ]] && args+=(--data "$data")
  fi
  if [[ $name == incremental && $smoke -eq 1 ]]; then
    args+=(--interval-s 0)  # the smoke run checks it runs, not the peak
  fi
  if [[ $name == ranks ]]; then
    # No state size there: ranks of one row each.
    args=()
    [[ $smoke -eq 1 ]] && args=(--ranks 16,64 --procs 2)
    [[ -n "$data" ]] && args+=(--data "$data")
  fi
  [[ -n "$json_dir" ]] && args+=(--json "$json_dir/$name.json")
  echo "=== bench_$name ${args[*]}"
  if [[ ! -x "$exe" ]]; then
    echo "run_all.sh: $exe missing (build target bench_$name)" >&2
    failed=1
    results+=("FAILED $name: binary missing")
    continue
  fi
  start=$SECONDS
  "${run_with_limit[@]}" "$exe" "${args[@]}" 2>&1 | tee "$out/$name.log"
  rc=${PIPESTATUS[0]}
  last="$(tail -n 1 "$out/$name.log")"
  if [[ $rc -ne 0 ]]; then
    why="exit status $rc"
    [[ $rc -eq 124 || $rc -eq 137 ]] && why="timed out after ${limit_s}s"
    echo "run_all.sh: bench_$name failed ($why)" >&2
    failed=1
    results+=("FAILED $name: $why")
  elif [[ ! "$last" =~ ^RESULT\ $name\ .*ratio=[^\ ]+$ ]]; then
    echo "run_all.sh: bench_$name printed no RESULT line last" >&2
    failed=1
    results+=("FAILED $name: no RESULT line")
  else
    results+=("$last")
  fi
  echo "=== bench_$name: $((SECONDS - start)) s"
done

echo
echo "=== results"
printf '%s\n' "${results[@]}"
exit $failed
