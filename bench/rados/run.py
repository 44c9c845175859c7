#!/usr/bin/env python3
"""The durable tier against its ceiling: a one-node Ceph cluster's own
`rados bench`, in the same run (BENCHMARKS.md, bench/rados).

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
             last step (all of it from the pool) into fresh arrays.

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
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "build", "python"))

BIN = os.environ.get("STAGGER_BIN_DIR", os.path.join(ROOT, "build", "bin"))
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


def drop_caches():
    """Syncs and drops the page cache; False when not root."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


class Server:
    def __init__(self, data, conf):
        self.log = open(data + ".log", "w")
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "stagger-server"), "--data", data,
             "--listen", "127.0.0.1:0", "--rados-pool", POOL,
             "--ceph-conf", conf, "--metrics-listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"grpc=(\S+) .*metrics=(\S+)", line)
        if not m:
            raise RuntimeError(f"stagger-server did not start: {line}")
        self.grpc, self.metrics = m.group(1), m.group(2)

    def sample(self, name):
        page = urllib.request.urlopen(f"http://{self.metrics}/metrics",
                                      timeout=10).read().decode()
        m = re.search(rf"^{name} (\S+)$", page, re.M)
        return float(m.group(1)) if m else -1.0

    def wait_drained(self, steps, timeout=600):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if (self.sample("stagger_server_drain_steps_total") >= steps and
                    self.sample("stagger_server_drain_steps_behind") == 0):
                return time.monotonic()
            time.sleep(0.025)  # its own CPU competes with the drain
        raise RuntimeError(f"not drained within {timeout} s")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.log.close()


def state(mib, seed):
    import numpy as np
    rng = np.random.default_rng(seed)
    # Incompressible bytes in a few tensors, a whole number of 4 MiB chunks.
    per = (mib << 20) // 4
    return {f"t{i}": rng.integers(0, 256, per, dtype=np.uint8)
            for i in range(4)}


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
    import numpy as np
    import stagger

    tmp = tempfile.mkdtemp(prefix="stagger-bench-rados-")
    cluster = os.path.join(tmp, "ceph")
    osd_gib = max(6, (a.mib * (2 * a.reps + 3)) // 1024 + 4)
    r = subprocess.run([os.path.join(ROOT, "scripts", "ceph-cluster.sh"),
                        "start", cluster, POOL, str(osd_gib)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"bench/rados: the cluster did not start: {r.stderr}",
              file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)
        sys.exit(2)
    conf = os.path.join(cluster, "ceph.conf")
    servers = []
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

        a_dir = os.path.join(tmp, "a")
        srv = Server(a_dir, conf)
        servers.append(srv)
        ck = stagger.Checkpointer(servers=srv.grpc, job="bench",
                                  chunk_size=4 << 20, codec="raw")
        step = 0

        def save(seed):
            nonlocal step
            step += 1
            h = ck.save(state(a.mib, seed), step=step)
            h.wait()
            return h.stats()["durable_s"]

        # The drain alone: from a commit to the step stored in the pool.
        save(1)
        srv.wait_drained(step)
        bytes0 = srv.sample("stagger_server_drain_bytes_total")
        save(2)
        t0 = time.monotonic()
        t1 = srv.wait_drained(step)
        drained = srv.sample("stagger_server_drain_bytes_total") - bytes0
        drain = drained / (t1 - t0) / 1e6
        print(f"drain: {drained / 1e6:.0f} MB in {t1 - t0:.2f} s = "
              f"{drain:.0f} MB/s")

        busy, idle = [], []
        for rep in range(a.reps):
            srv.wait_drained(step)
            idle.append(save(10 + rep))       # the drain waits for it
            busy.append(save(20 + rep))       # while the last one drains
        srv.wait_drained(step)
        durable_busy = statistics.median(busy)
        durable_idle = statistics.median(idle)
        print(f"durable: {durable_busy:.2f} s while draining the step "
              f"before, {durable_idle:.2f} s with the drain idle "
              f"({busy} / {idle})")

        last = step
        want = state(a.mib, 20 + a.reps - 1)
        del ck
        srv.stop()
        servers.remove(srv)
        shutil.rmtree(a_dir)
        fresh = Server(os.path.join(tmp, "fresh"), conf)
        servers.append(fresh)
        cold = drop_caches()
        ck = stagger.Checkpointer(servers=fresh.grpc, job="bench",
                                  chunk_size=4 << 20)
        out = {k: np.zeros_like(v) for k, v in want.items()}
        t0 = time.monotonic()
        got = ck.load(out, step=last)
        took = time.monotonic() - t0
        assert got == last
        for k in want:
            if not np.array_equal(out[k], want[k]):
                raise RuntimeError(f"restored {k} differs")
        total = sum(v.nbytes for v in want.values())
        restore = total / took / 1e6
        print(f"restore from the pool alone: {total / 1e6:.0f} MB in "
              f"{took:.2f} s = {restore:.0f} MB/s (bit-exact; page cache "
              f"{'dropped' if cold else 'not dropped: not root'})")
        print(f"RESULT rados drain_MBps={drain:.4g} write_MBps={write:.4g} "
              f"drain_x_write={drain / write:.4g} "
              f"durable_busy_s={durable_busy:.4g} "
              f"durable_idle_s={durable_idle:.4g} "
              f"durable_x_idle={durable_busy / durable_idle:.4g} "
              f"restore_MBps={restore:.4g} read_MBps={read:.4g} "
              f"restore_x_read={restore / read:.4g} "
              f"ratio={drain / write:.4g}")
    finally:
        for s in servers:
            s.stop()
        subprocess.run([os.path.join(ROOT, "scripts", "ceph-cluster.sh"),
                        "stop", cluster], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
