#!/usr/bin/env bash
# A one-node Ceph cluster for tests and benchmarks: one monitor, one manager
# and one OSD on a BlueStore file, on loopback, authentication off, pools of
# one copy. Everything lives in DIR; nothing outside it is touched.
#
#   scripts/ceph-cluster.sh start DIR [POOL] [OSD_GIB]
#       starts the cluster and creates POOL (default "stagger"); prints
#       CEPH_CONF=DIR/ceph.conf on its last line. OSD_GIB (default 4) sizes
#       the BlueStore file: BlueStore aborts the OSD when its device fills,
#       so size it for the test and keep the full ratios.
#   scripts/ceph-cluster.sh stop DIR
#       stops every daemon started in DIR (SIGTERM, then SIGKILL after 10 s).
#   scripts/ceph-cluster.sh restart DIR [POOL]
#       starts the daemons of a stopped cluster again (its data kept) and
#       waits until POOL takes writes.
#   scripts/ceph-cluster.sh status DIR
#       exits 0 when the cluster answers.
#   scripts/ceph-cluster.sh rgw DIR
#       starts a radosgw (an S3 endpoint) on the running cluster in DIR, on
#       a free port of 127.0.0.1, with a user whose keys are made for this
#       run, and prints S3_ENDPOINT=, AWS_ACCESS_KEY_ID= and
#       AWS_SECRET_ACCESS_KEY= on its last three lines (also kept in
#       DIR/rgw.env). Exits 5 when radosgw is not installed
#       (scripts/install-deps.sh --test installs it). stop stops it too. Run again
#       after rgw-stop, it starts radosgw on the same port with the same
#       user.
#   scripts/ceph-cluster.sh rgw-stop DIR
#       stops the radosgw alone (SIGKILL: an endpoint that vanishes).
#
# With CEPH_CLUSTER_OWNER_PID set, start leaves a watcher behind (its own
# session): when that process ends, however it ends (Ctrl-C, SIGKILL),
# the watcher stops the cluster and removes DIR; it leaves quietly once
# DIR/run is gone (the owner cleaned up itself). The test binaries set it;
# a value that is not a process id is refused (exit 2).
#
# start exits 3 (and stops what it started, unless $CEPH_CLUSTER_KEEP is
# set, to look at it) when the cluster cannot start,
# 4 when the Ceph packages are missing (scripts/install-deps.sh --test installs
# them): callers skip their RADOS tests then, printing the reason, which
# start writes to stderr with the tail of the daemon's log.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: $0 start|stop|restart|status|rgw|rgw-stop DIR [POOL] [OSD_GIB]" >&2
  exit 2
fi

conf=$dir/ceph.conf

# Stops the daemons whose pid files match the patterns given (SIGTERM, then
# SIGKILL to what is left after 10 s).
stop_daemons() {
  local pids=() f pid pattern
  for pattern in "$@"; do
    for f in "$dir"/run/$pattern.pid; do
      [ -e "$f" ] || continue
      pid=$(cat "$f" 2>/dev/null || true)
      if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        pids+=("$pid")
        kill -TERM "$pid" 2>/dev/null || true
      fi
    done
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  for _ in $(seq 100); do
    local alive=0
    for pid in "${pids[@]}"; do
      kill -0 "$pid" 2>/dev/null && alive=1
    done
    [ $alive -eq 0 ] && return 0
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
}

# The monitor's clients first: an OSD or a radosgw whose monitor has gone
# waits for it until killed (10 s), and stops in 2 s while it is there.
stop_cluster() {
  stop_daemons 'rgw' 'osd.*'
  stop_daemons '*'
}

fail() {
  echo "ceph-cluster: $1" >&2
  if [ -n "${2:-}" ] && [ -f "$2" ]; then
    tail -n 15 "$2" | sed 's/^/  /' >&2
  fi
  [ -n "${CEPH_CLUSTER_KEEP:-}" ] || stop_cluster
  exit 3
}

# Waits up to $2 seconds (in tenths) for command "$1" to succeed.
wait_for() {
  local i
  for i in $(seq $(($2 * 10))); do
    if eval "$1" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  return 1
}

# A free port below the kernel's ephemeral range, so that no outgoing
# connection holds it when a daemon is started on it again.
free_port() {
  python3 -c 'import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(64):
    port = random.randrange(10000, low) if low > 11000 else 0
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    print(s.getsockname()[1])
    break'
}

start_cluster() {
  local pool=${3:-stagger} gib=${4:-4}
  for b in ceph-mon ceph-mgr ceph-osd ceph monmaptool; do
    if ! command -v "$b" >/dev/null; then
      echo "ceph-cluster: $b not found (scripts/install-deps.sh --test installs" \
        "ceph-mon, ceph-mgr and ceph-osd)" >&2
      exit 4
    fi
  done
  owner_pid_or_exit "${CEPH_CLUSTER_OWNER_PID:-}"
  mkdir -p "$dir"/run "$dir"/log "$dir"/mon.a "$dir"/mgr.x "$dir"/osd.0
  if [ -n "${CEPH_CLUSTER_OWNER_PID:-}" ]; then
    setsid bash "$0" watch "$dir" "$CEPH_CLUSTER_OWNER_PID" \
      </dev/null >/dev/null 2>&1 &
  fi
  local fsid port
  fsid=$(cat /proc/sys/kernel/random/uuid)
  port=$(free_port)
  cat >"$conf" <<EOF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$port
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = false
osd pool default size = 1
osd pool default min size = 1
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 2
mon data avail crit = 1
run dir = $dir/run
admin socket = $dir/run/\$name.asok
log file = $dir/log/\$name.log
pid file = $dir/run/\$name.pid
ms bind ipv4 = true
ms bind ipv6 = false
public addr = 127.0.0.1
keyring = /dev/null
[client]
# Clients (stagger-server, rados) need no admin socket; several at once
# would fight over one path. Short timeouts: a test that stops the cluster
# sees its clients give up in seconds.
admin socket =
log file = $dir/log/client.log
client mount timeout = 5
rados mon op timeout = 5
rados osd op timeout = 5
[mon.a]
mon data = $dir/mon.a
[mgr.x]
mgr data = $dir/mgr.x
[osd.0]
osd data = $dir/osd.0
osd objectstore = bluestore
bluestore block create = true
bluestore block size = $((gib << 30))
bluestore fsck on mkfs = false
osd memory target = 939524096
EOF
  monmaptool --create --clobber --fsid "$fsid" \
    --addv a "[v2:127.0.0.1:$port]" "$dir/monmap" >/dev/null ||
    fail "monmaptool failed"
  ceph-mon --mkfs -i a -c "$conf" --monmap "$dir/monmap" \
    >"$dir/log/mkfs-mon.log" 2>&1 ||
    fail "ceph-mon --mkfs failed" "$dir/log/mkfs-mon.log"
  ceph-mon -i a -c "$conf" 2>>"$dir/log/mon.a.stderr" || fail "ceph-mon did not start" "$dir/log/mon.a.log"
  wait_for "timeout 5 ceph -c '$conf' mon stat" 30 ||
    fail "the monitor does not answer" "$dir/log/mon.a.log"
  local osd_uuid
  osd_uuid=$(cat /proc/sys/kernel/random/uuid)
  timeout 30 ceph -c "$conf" osd new "$osd_uuid" >/dev/null ||
    fail "ceph osd new failed" "$dir/log/mon.a.log"
  ceph-osd -i 0 -c "$conf" --mkfs --osd-uuid "$osd_uuid" \
    >"$dir/log/mkfs-osd.log" 2>&1 ||
    fail "ceph-osd --mkfs failed" "$dir/log/mkfs-osd.log"
  start_osd_mgr
  timeout 30 ceph -c "$conf" osd pool create "$pool" 8 8 >/dev/null 2>&1 ||
    fail "cannot create pool $pool" "$dir/log/mon.a.log"
  timeout 30 ceph -c "$conf" osd pool set "$pool" size 1 \
    --yes-i-really-mean-it >/dev/null 2>&1 || true
  timeout 30 ceph -c "$conf" osd pool application enable "$pool" stagger \
    >/dev/null 2>&1 || true
  wait_writable "$pool"
  echo "CEPH_CONF=$conf"
}

start_osd_mgr() {
  ceph-osd -i 0 -c "$conf" 2>>"$dir/log/osd.0.stderr" ||
    fail "ceph-osd did not start" "$dir/log/osd.0.log"
  ceph-mgr -i x -c "$conf" 2>>"$dir/log/mgr.x.stderr" ||
    fail "ceph-mgr did not start" "$dir/log/mgr.x.log"
  wait_for "timeout 5 ceph -c '$conf' osd stat | grep -q '1 up'" 60 ||
    fail "the OSD did not come up" "$dir/log/osd.0.log"
}

wait_writable() {
  wait_for "timeout 10 rados -c '$conf' -p '$1' put cluster-probe '$conf' && timeout 10 rados -c '$conf' -p '$1' rm cluster-probe" 60 ||
    fail "pool $1 does not take requests" "$dir/log/osd.0.log"
}

restart_cluster() {
  [ -f "$conf" ] || { echo "ceph-cluster: no cluster in $dir" >&2; exit 2; }
  ceph-mon -i a -c "$conf" 2>>"$dir/log/mon.a.stderr" ||
    fail "ceph-mon did not start" "$dir/log/mon.a.log"
  wait_for "timeout 5 ceph -c '$conf' mon stat" 30 ||
    fail "the monitor does not answer" "$dir/log/mon.a.log"
  start_osd_mgr
  wait_writable "${3:-stagger}"
}

# Exits 2 unless $1 is empty or a process id: a watcher of anything else
# would find its owner gone at once and remove the cluster it started.
owner_pid_or_exit() {
  case "$1" in
    '') ;;
    0*|*[!0-9]*)
      echo "ceph-cluster: CEPH_CLUSTER_OWNER_PID='$1' is not a process id" >&2
      exit 2 ;;
  esac
}

# Until process $1 ends, or DIR's run directory is removed (its owner
# cleaned up), waits; then stops every daemon of DIR and removes DIR.
watch_owner() {
  local owner=$1
  while kill -0 "$owner" 2>/dev/null; do
    [ -d "$dir/run" ] || exit 0
    sleep 1
  done
  [ -d "$dir/run" ] || exit 0
  stop_cluster
  rm -rf "$dir"
}

start_rgw() {
  [ -f "$conf" ] || { echo "ceph-cluster: no cluster in $dir" >&2; exit 2; }
  for b in radosgw radosgw-admin; do
    if ! command -v "$b" >/dev/null; then
      echo "ceph-cluster: $b not found (scripts/install-deps.sh --test installs" \
        "radosgw)" >&2
      exit 5
    fi
  done
  local port key secret again=0
  if [ -f "$dir/rgw.env" ]; then
    again=1
    port=$(sed -n 's|^S3_ENDPOINT=http://127.0.0.1:||p' "$dir/rgw.env")
  else
    port=$(free_port)
  fi
  mkdir -p "$dir"/rgw
  # Authentication is off in this cluster: the monitor connection must not
  # ask for the "secure" mode (radosgw's default), which needs cephx.
  local args=(-c "$conf" -n client.admin --no-mon-config
    --ms-mon-client-mode crc)
  radosgw "${args[@]}" --rgw-frontends "beast endpoint=127.0.0.1:$port" \
    --rgw-data "$dir/rgw" --log-file "$dir/log/rgw.log" \
    --admin-socket "$dir/run/rgw.asok" --pid-file "$dir/run/rgw.pid" \
    2>>"$dir/log/rgw.stderr" || fail "radosgw did not start" "$dir/log/rgw.log"
  wait_for "python3 -c 'import urllib.request as u; u.urlopen(\"http://127.0.0.1:$port/\", timeout=2)'" 90 ||
    fail "radosgw does not answer on port $port" "$dir/log/rgw.log"
  if [ $again -eq 1 ]; then
    cat "$dir/rgw.env"
    return 0
  fi
  key=$(python3 -c 'import secrets, string
print("STG" + "".join(secrets.choice(string.ascii_uppercase + string.digits)
                      for _ in range(17)))')
  secret=$(python3 -c 'import secrets; print(secrets.token_hex(20))')
  timeout 60 radosgw-admin "${args[@]}" user create --uid stagger \
    --display-name stagger --access-key "$key" --secret "$secret" \
    >"$dir/log/rgw-user.log" 2>&1 ||
    fail "radosgw-admin user create failed" "$dir/log/rgw-user.log"
  printf 'S3_ENDPOINT=http://127.0.0.1:%s\nAWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\n' \
    "$port" "$key" "$secret" | tee "$dir/rgw.env"
}

case "$cmd" in
  start) start_cluster "$@" ;;
  rgw) start_rgw ;;
  rgw-stop)
    if [ -f "$dir/run/rgw.pid" ]; then
      pid=$(cat "$dir/run/rgw.pid")
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      rm -f "$dir/run/rgw.pid"
    fi
    ;;
  stop) stop_cluster ;;
  watch)
    owner_pid_or_exit "${3:?usage: $0 watch DIR PID}"
    watch_owner "$3" ;;
  restart) restart_cluster "$@" ;;
  status) timeout 5 ceph -c "$conf" health >/dev/null 2>&1 ;;
  *)
    echo "usage: $0 start|stop|restart|status|rgw|rgw-stop DIR [POOL] [OSD_GIB]" >&2
    exit 2
    ;;
esac
