"""What bench/rados and bench/s3 measure of a durable tier, the same way
for both: a stagger-server draining to the tier, a step's drain time, a
save's durable time with the drain busy against idle, and a restore from
the tier alone by a new server on an empty --data.

Each driver measures its own ceiling (the store's own tools at the same
object size and parallelism) and prints its RESULT line.
"""
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "build", "python"))

BIN = os.environ.get("STAGGER_BIN_DIR", os.path.join(ROOT, "build", "bin"))


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
    """A stagger-server on `data` draining with `tier_args`."""

    def __init__(self, data, tier_args, env=None):
        self.log = open(data + ".log", "w")
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "stagger-server"), "--data", data,
             "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
             *tier_args],
            stdout=subprocess.PIPE, stderr=self.log, text=True,
            env=env)
        line = self.proc.stdout.readline()
        m = re.search(r"grpc=(\S+) .*metrics=(\S+)", line)
        if not m:
            raise RuntimeError(f"stagger-server did not start: {line} "
                               f"(log: {data}.log)")
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


def measure(tmp, tier_args, mib, reps, where, env=None):
    """Drain, durable (busy/idle) and restore figures for a step of `mib`
    MiB through a server with `tier_args`; `where` names the tier in what
    it prints. Durable times and restores (each by a new server on an
    empty --data) are medians of `reps`. Returns a dict of drain_MBps, durable_busy_s,
    durable_idle_s, restore_MBps."""
    import numpy as np
    import stagger

    servers = []
    try:
        a_dir = os.path.join(tmp, "a")
        srv = Server(a_dir, tier_args, env)
        servers.append(srv)
        ck = stagger.Checkpointer(servers=srv.grpc, job="bench",
                                  chunk_size=4 << 20, codec="raw")
        step = 0

        def save(seed):
            nonlocal step
            step += 1
            h = ck.save(state(mib, seed), step=step)
            h.wait()
            return h.stats()["durable_s"]

        # The drain alone: from a commit to the step stored in the tier.
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
        for rep in range(reps):
            srv.wait_drained(step)
            idle.append(save(10 + rep))       # the drain waits for it
            busy.append(save(20 + rep))       # while the last one drains
        srv.wait_drained(step)
        print(f"durable: {statistics.median(busy):.2f} s while draining the "
              f"step before, {statistics.median(idle):.2f} s with the drain "
              f"idle ({busy} / {idle})")

        last = step
        want = state(mib, 20 + reps - 1)
        del ck
        srv.stop()
        servers.remove(srv)
        shutil.rmtree(a_dir)
        restores = []
        for rep in range(reps):
            fresh = Server(os.path.join(tmp, f"fresh{rep}"), tier_args, env)
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
            restores.append(total / took / 1e6)
            print(f"restore from {where} alone: {total / 1e6:.0f} MB in "
                  f"{took:.2f} s = {restores[-1]:.0f} MB/s (bit-exact; page "
                  f"cache {'dropped' if cold else 'not dropped: not root'})")
            del ck
            fresh.stop()
            servers.remove(fresh)
        restore = statistics.median(restores)
        return {"drain_MBps": drain,
                "durable_busy_s": statistics.median(busy),
                "durable_idle_s": statistics.median(idle),
                "restore_MBps": restore}
    finally:
        for s in servers:
            s.stop()


def result(name, m, write, read):
    """The RESULT line of a durable-tier benchmark (ratio: drain_x_write)."""
    return (f"RESULT {name} drain_MBps={m['drain_MBps']:.4g} "
            f"write_MBps={write:.4g} "
            f"drain_x_write={m['drain_MBps'] / write:.4g} "
            f"durable_busy_s={m['durable_busy_s']:.4g} "
            f"durable_idle_s={m['durable_idle_s']:.4g} "
            f"durable_x_idle={m['durable_busy_s'] / m['durable_idle_s']:.4g} "
            f"restore_MBps={m['restore_MBps']:.4g} read_MBps={read:.4g} "
            f"restore_x_read={m['restore_MBps'] / read:.4g} "
            f"ratio={m['drain_MBps'] / write:.4g}")
