#!/usr/bin/env python3
"""The durable tier against its ceiling: a one-node Ceph cluster's own
`rados bench`, in the same run (docs/benchmarks.md, bench/rados).

    bench/rados/run.py [--mib 1024] [--bench-s 8] [--reps 2] [--smoke]

Starts a cluster (scripts/ceph-cluster.sh) in a temporary directory, then:

  ceilings   `rados bench` write (4 MiB objects, 16 in flight) and
             sequential read of what it wrote, then its objects removed;
  drain      a stagger-server with --rados-pool; a step of MIB MiB of
             incompressible bytes (raw chunks of 4 MiB) saved, and the
             time from its commit to the drain having stored it (nothing
             else running): drained bytes / that time;
  durable    the durable time of a save while the drain copies the step
             before it, against the same save with the drain idle
             (alternating, --reps pairs, medians);
  restore    the server stopped and its --data deleted; a new server on an
             empty directory, the page cache dropped, and a load of the
             last step (all of it from the pool) into fresh arrays
             (median of --reps, a new server each).

Prints the figures and

  RESULT rados drain_MBps=... write_MBps=... drain_x_write=...
         durable_busy_s=... durable_idle_s=... durable_x_idle=...
         restore_MBps=... read_MBps=... restore_x_read=... ratio=...

(ratio = drain_x_write). Targets: drain_x_write >= 0.8, durable_x_idle <=
1.2, restore_x_read >= 0.8. Exits 2 when the cluster cannot start.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
from cold_tier_bench import ROOT, drop_caches, measure, result  # noqa: E402

POOL = "stagger"


def sh(*argv, check=True):
    r = subprocess.run(argv, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}\n"
                           f"{r.stdout}{r.stderr}")
    return r.stdout + r.stderr


def bandwidth(out):
    m = re.search(r"Bandwidth \(MB/sec\):\s+([0-9.]+)", out)
    if not m:
        raise RuntimeError("no bandwidth in rados bench output:\n" + out)
    return float(m.group(1)) * (1 << 20) / 1e6  # rados bench: MiB/s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--bench-s", type=int, default=8)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--smoke", action="store_true",
                    help="64 MiB, 2 s benches, 1 pair")
    a = ap.parse_args()
    if a.smoke:
        a.mib, a.bench_s, a.reps = 64, 2, 1
    tmp = tempfile.mkdtemp(prefix="stagger-bench-rados-")
    cluster = os.path.join(tmp, "ceph")
    osd_gib = max(6, (a.mib * (2 * a.reps + 3)) // 1024 + 4)
    r = subprocess.run([os.path.join(ROOT, "scripts", "ceph-cluster.sh"),
                        "start", cluster, POOL, str(osd_gib)],
                       capture_output=True, text=True,
                       # stopped by the script's watcher if this one dies
                       env=dict(os.environ,
                                CEPH_CLUSTER_OWNER_PID=str(os.getpid())))
    if r.returncode != 0:
        print(f"bench/rados: the cluster did not start: {r.stderr}",
              file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)
        sys.exit(2)
    conf = os.path.join(cluster, "ceph.conf")
    try:
        rados = ["rados", "-c", conf, "-p", POOL]
        write = bandwidth(sh(*rados, "bench", str(a.bench_s), "write",
                             "-b", str(4 << 20), "-t", "16",
                             "--no-cleanup"))
        drop_caches()
        read = bandwidth(sh(*rados, "bench", str(a.bench_s), "seq",
                            "-t", "16"))
        sh(*rados, "cleanup")
        print(f"rados bench: write {write:.0f} MB/s, seq read {read:.0f} "
              "MB/s (4 MiB objects, 16 in flight)")

        m = measure(tmp, ["--rados-pool", POOL, "--ceph-conf", conf],
                    a.mib, a.reps, "the pool")
        print(result("rados", m, write, read))
    finally:
        subprocess.run([os.path.join(ROOT, "scripts", "ceph-cluster.sh"),
                        "stop", cluster], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
