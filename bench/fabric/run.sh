#!/usr/bin/env bash
# bench/fabric: does checkpoint traffic slow the training collectives?
#
#   bench/fabric/run.sh [--quick] [--out FILE] [--json FILE] [options]
#
# Builds a fabric of network namespaces (trainer nodes n0..nN-1 and a storage
# node s0, each with one veth NIC capped by tc in both directions, joined by a
# bridge in its own namespace; addresses from 198.18.0.0/15 only), starts
# stagger-server on s0 and one collective simulator (trainer.py) per trainer
# node, and runs the modes baseline (no checkpoint), naive (checkpoint, QoS
# off) and qos (QoS on). Prints a table whose last line is the RESULT line.
#
# --quick               2 nodes, 16 MiB all-reduce + 150 ms compute, 100
#                       iterations, 128 MiB/node every 12: under 3 minutes
# --out FILE            every iteration and checkpoint record, JSON lines
# --json FILE           the summary figures, JSON
# --nodes N             trainer nodes (default 2)
# --rate-mbit R         cap of each trainer NIC, both directions (1000)
# --storage-rate-mbit R cap of s0's NIC (default nodes x rate: the trainer
#                       NICs, not the storage NIC, are the bottleneck)
# --queue-ms Q          tbf queue of each NIC, in ms at its rate (20)
# --allreduce-mib M     all-reduce size per iteration (16)
# --compute-ms C        compute phase per iteration, a sleep (150)
# --iters K             iterations per mode (quick 100, full 240)
# --every J             checkpoint interval in iterations (quick 12, full 34)
# --ckpt-mib S          checkpoint size per node (quick 128, full 400)
# --chunk-kib K         chunk size of the checkpoints, naive and qos (1024)
# --save-mode lazy|eager  save(lazy=True) + before_update(), or eager (lazy)
# --warmup W            leading iterations left out of the figures (5 / 10)
# --modes LIST          comma-separated subset of baseline,naive,qos
# --qos-yield Y         off | pause | learn (learn)
# --qos-stagger F       share of the deadline over which the nodes' start
#                       offsets are spread (0.1: the storage link is nodes x
#                       rate here, so there is no incast to avoid, and a
#                       later start only shortens a node's sending window)
# --qos-rate-limit-Bps B  per-node cap in qos mode, 0 for none (0)
# --deadline-s D        qos deadline (default: 0.8 x J x baseline p50
#                       iteration)
# --defaults            the Checkpointer with default options (qos: the
#                       deadline alone; naive: QoS off), not the raw codec,
#                       1 MiB chunks and whole-state staging of the others;
#                       implies --update dense unless --update is given
# --update sparse|dense the state's change between saves: a few elements of
#                       every 256 KiB (sparse), or every element (dense)
# --cpu-load            other work on every trainer node in every mode, the
#                       baseline too: a process busy half of every 20 ms
# --ck-opt KEY=VALUE    one more Checkpointer keyword for naive and qos
#                       (repeatable), e.g. --ck-opt background_cpu=normal
# --server-idle         run stagger-server at SCHED_IDLE (chrt --idle): a
#                       diagnostic for this one-host fabric, where s0 shares
#                       the trainers' cores, to tell the server's CPU from
#                       the client's in the figures; not a production mode
# --runs N              the whole run N times (a new fabric each); prints
#                       each run's table, then the medians and the worst
#                       run of the figures (RESULT fabric_runs)
# --data DIR            parent of the temporary directory (/tmp)
# --server-arg ARG      one more stagger-server flag (repeatable), e.g.
#                       --server-arg=--ingest-budget-mib=64
#
# Needs root, iproute2 (ip netns, tc), build/bin/stagger-server (or
# $STAGGER_BIN_DIR) and the binding in build/python (or $STAGGER_PYTHONPATH).
# Without root or network namespaces it says why and exits 0 without running.
# Every namespace it made is removed on exit, also on failure or Ctrl-C.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin_dir="${STAGGER_BIN_DIR:-$repo/build/bin}"
py_path="${STAGGER_PYTHONPATH:-$repo/build/python}"
python="${PYTHON:-/usr/bin/python3}"

quick=0
out=""
json_out=""
nodes=2
rate_mbit=1000
storage_rate_mbit=""
queue_ms=20
allreduce_mib=16
compute_ms=150
iters=""
every=""
ckpt_mib=""
chunk_kib=1024
warmup=""
modes="baseline,naive,qos"
qos_yield="learn"
qos_stagger="0.1"
save_mode="lazy"
qos_rate_limit=0
deadline_s=""
data="${TMPDIR:-/tmp}"
server_args=()
defaults=0
update=""
cpu_load=0
server_idle=0
ck_opts=()
runs=1
all_args=("$@")

need() {
  [[ $# -ge 2 && -n "$2" ]] && return 0
  echo "run.sh: $1 needs a value" >&2
  exit 2
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1 ;;
    --out) need "$@"; out="$2"; shift ;;
    --json) need "$@"; json_out="$2"; shift ;;
    --nodes) need "$@"; nodes="$2"; shift ;;
    --rate-mbit) need "$@"; rate_mbit="$2"; shift ;;
    --storage-rate-mbit) need "$@"; storage_rate_mbit="$2"; shift ;;
    --queue-ms) need "$@"; queue_ms="$2"; shift ;;
    --allreduce-mib) need "$@"; allreduce_mib="$2"; shift ;;
    --compute-ms) need "$@"; compute_ms="$2"; shift ;;
    --iters) need "$@"; iters="$2"; shift ;;
    --every) need "$@"; every="$2"; shift ;;
    --ckpt-mib) need "$@"; ckpt_mib="$2"; shift ;;
    --chunk-kib) need "$@"; chunk_kib="$2"; shift ;;
    --warmup) need "$@"; warmup="$2"; shift ;;
    --modes) need "$@"; modes="$2"; shift ;;
    --qos-yield) need "$@"; qos_yield="$2"; shift ;;
    --qos-stagger) need "$@"; qos_stagger="$2"; shift ;;
    --save-mode) need "$@"; save_mode="$2"; shift ;;
    --qos-rate-limit-Bps) need "$@"; qos_rate_limit="$2"; shift ;;
    --deadline-s) need "$@"; deadline_s="$2"; shift ;;
    --data) need "$@"; data="$2"; shift ;;
    --defaults) defaults=1 ;;
    --update) need "$@"; update="$2"; shift ;;
    --cpu-load) cpu_load=1 ;;
    --server-idle) server_idle=1 ;;
    --ck-opt) need "$@"; ck_opts+=(--ck-opt "$2"); shift ;;
    --runs) need "$@"; runs="$2"; shift ;;
    --server-arg) need "$@"; server_args+=("$2"); shift ;;
    --server-arg=*) server_args+=("${1#--server-arg=}") ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next }
                    NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if [[ $quick -eq 1 ]]; then
  : "${iters:=100}" "${every:=12}" "${ckpt_mib:=128}" "${warmup:=5}"
else
  : "${iters:=240}" "${every:=34}" "${ckpt_mib:=400}" "${warmup:=10}"
fi
: "${storage_rate_mbit:=$((nodes * rate_mbit))}"
for v in nodes rate_mbit storage_rate_mbit queue_ms allreduce_mib \
         compute_ms iters every ckpt_mib chunk_kib warmup; do
  if [[ ! "${!v}" =~ ^[0-9]+$ ]]; then
    echo "run.sh: --${v//_/-} wants a whole number, got '${!v}'" >&2
    exit 2
  fi
done
if (( chunk_kib < 64 )); then
  echo "run.sh: --chunk-kib must be at least 64" >&2
  exit 2
fi
if (( nodes < 2 || nodes > 64 )); then
  echo "run.sh: --nodes must be 2..64" >&2
  exit 2
fi
if (( warmup >= iters )); then
  echo "run.sh: --warmup must be below --iters" >&2
  exit 2
fi
if (( iters < 2 * every )); then
  echo "run.sh: note: fewer than 2 x --every iterations, so no checkpoint" \
       "is taken (a save needs --every iterations after it)" >&2
fi
IFS=',' read -r -a mode_list <<< "$modes"
for m in "${mode_list[@]}"; do
  case "$m" in
    baseline|naive|qos) ;;
    *) echo "run.sh: unknown mode '$m'" >&2; exit 2 ;;
  esac
done
case "$qos_yield" in off|pause|learn) ;; *)
  echo "run.sh: --qos-yield must be off, pause or learn" >&2; exit 2 ;;
esac
[[ -z "$update" ]] && { [[ $defaults -eq 1 ]] && update=dense || update=sparse; }
case "$update" in sparse|dense) ;; *)
  echo "run.sh: --update must be sparse or dense" >&2; exit 2 ;;
esac
if [[ ! "$runs" =~ ^[0-9]+$ ]] || (( runs < 1 )); then
  echo "run.sh: --runs wants a whole number >= 1, got '$runs'" >&2
  exit 2
fi
if (( runs > 1 )); then
  # Each run is this script once more, on a fresh fabric; their summaries
  # are combined at the end.
  runs_dir="$(mktemp -d "${data}/stagger-fabric-runs.XXXXXX")"
  trap 'rm -rf "$runs_dir"' EXIT
  once=()
  skip_next=0
  for arg in "${all_args[@]}"; do
    if [[ $skip_next -eq 1 ]]; then skip_next=0; continue; fi
    case "$arg" in
      --runs) skip_next=1; continue ;;
      --json) skip_next=1; continue ;;
    esac
    once+=("$arg")
  done
  for ((i = 1; i <= runs; i++)); do
    echo "##### run $i of $runs"
    "$0" "${once[@]}" --json "$runs_dir/run$i.json"
  done
  combine=(runs "$runs_dir"/run*.json)
  [[ -n "$json_out" ]] && combine+=(--json "$json_out")
  "$python" "$here/report.py" "${combine[@]}"
  exit 0
fi
case "$save_mode" in lazy|eager) ;; *)
  echo "run.sh: --save-mode must be lazy or eager" >&2; exit 2 ;;
esac

# --- can this machine run it at all? (else: say why, exit 0)
skip() { echo "bench/fabric: skipped: $*"; exit 0; }
[[ $EUID -eq 0 ]] || skip "needs root (network namespaces and tc)"
command -v ip >/dev/null || skip "ip (iproute2) not found"
command -v tc >/dev/null || skip "tc (iproute2) not found"

server_bin="$bin_dir/stagger-server"
if [[ ! -x "$server_bin" ]]; then
  echo "run.sh: $server_bin missing (build target stagger-server, or set" \
       "STAGGER_BIN_DIR)" >&2
  exit 1
fi
if ! PYTHONPATH="$py_path" "$python" -c 'import numpy, stagger' 2>/dev/null
then
  echo "run.sh: '$python' cannot import numpy and stagger with" \
       "PYTHONPATH=$py_path (build the binding, or set STAGGER_PYTHONPATH)" >&2
  exit 1
fi

prefix="stgf-$$-"
created_ns=()
work=""

# Kills what runs inside the namespaces this script made (every process
# there was started by this script), then removes the namespaces.
cleanup() {
  local rc=$? ns pid ns_pids=()
  trap - EXIT INT TERM
  set +e
  for ns in "${created_ns[@]}"; do
    mapfile -t ns_pids < <(ip netns pids "$ns" 2>/dev/null)
    for pid in "${ns_pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  done
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    ns_pids=()
    for ns in "${created_ns[@]}"; do
      mapfile -t -O "${#ns_pids[@]}" ns_pids \
        < <(ip netns pids "$ns" 2>/dev/null)
    done
    [[ ${#ns_pids[@]} -eq 0 ]] && break
    sleep 0.5
  done
  for pid in "${ns_pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  wait 2>/dev/null
  for ns in "${created_ns[@]}"; do
    ip netns del "$ns" 2>/dev/null \
      || echo "run.sh: could not delete netns $ns" >&2
  done
  [[ -n "$work" ]] && rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

add_ns() {
  ip netns add "$1"
  created_ns+=("$1")
  ip -n "$1" link set lo up
  ip netns exec "$1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
    net.ipv6.conf.default.disable_ipv6=1 2>/dev/null || true
}

# tbf on DEV in NS at RATE Mbit/s: burst of 1 ms at the rate (at least 96
# KiB, above one GSO segment), queue of queue_ms at the rate.
shape() {
  local ns="$1" dev="$2" rate="$3"
  local burst=$((rate * 125))
  (( burst < 98304 )) && burst=98304
  tc -n "$ns" qdisc add dev "$dev" root tbf rate "${rate}mbit" \
    burst "$burst" latency "${queue_ms}ms"
}

# The probe namespace: can we make namespaces, veths and tbf here?
probe_ns="${prefix}probe"
ip netns add "$probe_ns" 2>/dev/null \
  || skip "cannot create network namespaces (ip netns add failed)"
created_ns+=("$probe_ns")
ip -n "$probe_ns" link add eth0 type veth peer name eth1 2>/dev/null \
  || skip "cannot create veth pairs in a namespace"
tc -n "$probe_ns" qdisc add dev eth0 root tbf rate 1000mbit burst 125000 \
  latency 20ms 2>/dev/null || skip "tc tbf unavailable (sch_tbf)"
ip netns del "$probe_ns"
created_ns=()

work="$(mktemp -d "$data/stagger-fabric-XXXXXX")"
echo "=== bench/fabric: namespaces ${prefix}*, work dir $work"

# --- the fabric: 198.18.0.100 is s0, 198.18.0.(10+i) is n<i>.
ns_br="${prefix}br"
ns_s0="${prefix}s0"
s0_ip="198.18.0.100"
add_ns "$ns_br"
ip -n "$ns_br" link add br0 type bridge
ip -n "$ns_br" link set br0 up
attach() {  # NS NAME IP RATE
  local ns="$1" name="$2" addr="$3" rate="$4"
  add_ns "$ns"
  ip -n "$ns" link add eth0 type veth peer name "v-$name" netns "$ns_br"
  ip -n "$ns_br" link set "v-$name" master br0 up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  shape "$ns" eth0 "$rate"           # node -> fabric
  shape "$ns_br" "v-$name" "$rate"   # fabric -> node
}
attach "$ns_s0" s0 "$s0_ip" "$storage_rate_mbit"
addrs=()
for ((i = 0; i < nodes; i++)); do
  attach "${prefix}n$i" "n$i" "198.18.0.$((10 + i))" "$rate_mbit"
  addrs+=("198.18.0.$((10 + i))")
done
addr_csv="$(IFS=,; echo "${addrs[*]}")"

# UCX over tcp on eth0 only: shared memory between namespaces would bypass
# the capped links. Each node's processes also get an IPC namespace of
# their own (unshare --ipc), which is what tells UCX they are on another
# host (transport/README.md, "Same host: cma").
ns_env=(env "PYTHONPATH=$py_path" UCX_TLS=tcp UCX_NET_DEVICES=eth0
        UCX_WARN_UNUSED_ENV_VARS=n)

printf '{"nodes": %d, "rate_mbit": %d, "storage_rate_mbit": %d,
 "queue_ms": %d, "allreduce_mib": %d, "compute_ms": %d, "iters": %d,
 "every": %d, "ckpt_mib": %d, "chunk_kib": %d, "warmup": %d,
 "qos_yield": "%s", "save_mode": "%s", "defaults": %d, "update": "%s",
 "cpu_load": %d, "server_idle": %d}\n' \
  "$nodes" "$rate_mbit" "$storage_rate_mbit" "$queue_ms" "$allreduce_mib" \
  "$compute_ms" "$iters" "$every" "$ckpt_mib" "$chunk_kib" "$warmup" \
  "$qos_yield" "$save_mode" "$defaults" "$update" "$cpu_load" "$server_idle" \
  > "$work/config.json"

# --- the ceiling: TCP goodput n0 -> s0 through the caps.
echo "=== link probe: n0 -> s0, 3 s"
ip netns exec "$ns_s0" "$python" "$here/probe.py" sink "$s0_ip:7800" \
  > "$work/probe.json" &
sink_pid=$!
ip netns exec "${prefix}n0" "$python" "$here/probe.py" send "$s0_ip:7800" 3
wait "$sink_pid"
cat "$work/probe.json"

server_pid=""
start_server() {  # MODE
  local mode="$1"
  mkdir -p "$work/data-$mode"
  local prio=()
  [[ $server_idle -eq 1 ]] && prio=(chrt --idle 0)
  ip netns exec "$ns_s0" unshare --ipc "${ns_env[@]}" "${prio[@]}" \
    "$server_bin" \
    --data "$work/data-$mode" --listen "$s0_ip:7700" --insecure \
    "${server_args[@]}" \
    > "$work/server-$mode.out" 2> "$work/server-$mode.log" &
  server_pid=$!
  for _ in $(seq 1 300); do
    grep -q '^stagger-server ready' "$work/server-$mode.out" && return 0
    if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
    sleep 0.1
  done
  echo "run.sh: stagger-server did not start; its log:" >&2
  tail -n 20 "$work/server-$mode.log" >&2
  exit 1
}
stop_server() {
  kill -TERM "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
  rm -rf "$work/data-${1}"
}

s0_rx_bytes() {
  tc -n "$ns_br" -s qdisc show dev v-s0 | awk '/Sent/ {print $2; exit}'
}

# A generous limit per mode: 4x the time the iterations should take on the
# capped links, plus start-up.
iter_ms=$(( compute_ms + 2 * (nodes - 1) * allreduce_mib * 8389 / nodes \
            / rate_mbit ))
limit_s=$(( iters * iter_ms * 4 / 1000 + 120 ))

run_mode() {  # MODE [trainer args...]
  local mode="$1" r rc failed=0 before after dl=null
  shift
  [[ "$mode" == qos ]] && dl="$deadline_s"
  local pids=()
  echo "=== mode $mode: $iters iterations on $nodes nodes"
  if [[ "$mode" != baseline ]]; then start_server "$mode"; fi
  local loads=()
  if [[ $cpu_load -eq 1 ]]; then
    for ((r = 0; r < nodes; r++)); do
      ip netns exec "${prefix}n$r" timeout -k 5 "$limit_s" \
        "$python" "$here/load.py" > /dev/null 2>&1 &
      loads+=("$!")
    done
  fi
  local extra=(--update "$update")
  [[ $defaults -eq 1 ]] && extra+=(--defaults)
  extra+=("${ck_opts[@]}")
  before="$(s0_rx_bytes)"
  for ((r = 0; r < nodes; r++)); do
    ip netns exec "${prefix}n$r" unshare --ipc "${ns_env[@]}" \
      timeout -k 10 "$limit_s" "$python" "$here/trainer.py" \
      --mode "$mode" --rank "$r" --addrs "$addr_csv" \
      --server "$s0_ip:7700" --job "fabric-$mode-$$" \
      --allreduce-mib "$allreduce_mib" --compute-ms "$compute_ms" \
      --iters "$iters" --every "$every" --ckpt-mib "$ckpt_mib" \
      --chunk-kib "$chunk_kib" --save-mode "$save_mode" \
      --out "$work/$mode.r$r.jsonl" "${extra[@]}" "$@" \
      > "$work/$mode.r$r.log" 2>&1 &
    pids+=("$!")
  done
  for ((r = 0; r < nodes; r++)); do
    rc=0
    wait "${pids[$r]}" || rc=$?
    if [[ $rc -ne 0 ]]; then
      failed=1
      echo "run.sh: trainer n$r ($mode) exited $rc; its log:" >&2
      tail -n 20 "$work/$mode.r$r.log" >&2
    fi
  done
  for pid in "${loads[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  after="$(s0_rx_bytes)"
  printf '{"s0_rx_bytes": %d, "deadline_s": %s}\n' $((after - before)) \
    "$dl" > "$work/$mode.meta.json"
  if [[ "$mode" != baseline ]]; then stop_server "$mode"; fi
  if [[ $failed -ne 0 ]]; then
    if [[ "$mode" != baseline ]]; then
      echo "run.sh: stagger-server log ($mode):" >&2
      tail -n 10 "$work/server-$mode.log" >&2
    fi
    exit 1
  fi
}

has_mode() { [[ ",$modes," == *",$1,"* ]]; }

has_mode baseline && run_mode baseline
has_mode naive && run_mode naive
if has_mode qos; then
  why=""
  why="$(PYTHONPATH="$py_path" "$python" "$here/trainer.py" --check-qos)" \
    || true
  if [[ -n "$why" ]]; then
    echo "$why"
    echo "${why#qos mode unavailable: }" > "$work/qos.skipped"
  else
    if [[ -z "$deadline_s" ]]; then
      if ! has_mode baseline; then
        echo "run.sh: qos without baseline needs --deadline-s" >&2
        exit 2
      fi
      deadline_s="$("$python" "$here/report.py" deadline "$work" "$every")"
    fi
    echo "=== qos deadline ${deadline_s} s ($every iterations of baseline)"
    run_mode qos --deadline-s "$deadline_s" --qos-yield "$qos_yield" \
      --qos-stagger "$qos_stagger" --rate-limit-Bps "$qos_rate_limit"
  fi
fi

if [[ -n "$out" ]]; then
  {
    printf '{"type": "config", "config": %s}\n' \
      "$(tr -d '\n' < "$work/config.json")"
    for m in "${mode_list[@]}"; do
      for ((r = 0; r < nodes; r++)); do
        if [[ -f "$work/$m.r$r.jsonl" ]]; then cat "$work/$m.r$r.jsonl"; fi
      done
    done
  } > "$out"
fi
echo
summary_args=(summary "$work")
[[ -n "$json_out" ]] && summary_args+=(--json "$json_out")
"$python" "$here/report.py" "${summary_args[@]}"
