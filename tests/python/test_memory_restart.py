"""A memory-level save outlives its trainer and a restart of every server.

Three stagger-server processes in three domains with a memory tier, two
copies of every chunk. A trainer process saves step 1 to disk and step 2
with durability "memory", and is SIGKILLed as soon as the save returns,
before its own promoter could make the step disk-level. The servers
confirm the chunks on their disks and make the step disk-level
themselves (server/promoter.h), or, stopped with SIGTERM first (which
writes held chunks behind) and started again, set the step aside and
bring it back once its chunks are confirmed on disk. A restart after
SIGKILL, before anything reached a disk, drops the step and step 1 is
the newest.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import numpy as np

import stagger
from conftest import bin_dir, listen_address

TRAINER = r"""
import os, signal, sys
import numpy as np
import stagger
servers, job = sys.argv[1], sys.argv[2]
ck = stagger.Checkpointer(servers=servers, job=job, replicas=2,
                          chunk_size=65536, durability="memory")
def state(seed):
    return {"w": np.random.default_rng(seed).standard_normal(200_000)
                  .astype(np.float32)}
ck.save(state(1), step=1, durability="disk").wait()
ck.save(state(2), step=2).wait()
print("saved", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def state(seed):
    return {"w": np.random.default_rng(seed).standard_normal(200_000)
            .astype(np.float32)}


class Servers:
    """Three servers, each in a domain of its own, restartable in place."""

    def __init__(self, root, delay_ms):
        self.root, self.delay_ms = root, delay_ms
        self.procs = [None] * 3
        self.addrs = [listen_address() for _ in range(3)]
        self.metrics = [None] * 3
        for i in range(3):
            self.start(i)

    def start(self, i):
        p = subprocess.Popen(
            [os.path.join(bin_dir(), "stagger-server"), "--data",
             str(self.root / f"n{i}"), "--listen", self.addrs[i],
             "--domain", f"n{i}", "--memory-bytes", "64M",
             "--write-behind-delay-ms", str(self.delay_ms),
             "--metrics-listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        assert line.startswith("stagger-server ready grpc="), (
            line + p.stderr.read())
        self.procs[i] = p
        fields = dict(f.split("=", 1) for f in line.split()[2:])
        self.addrs[i] = fields["grpc"]
        self.metrics[i] = fields["metrics"]

    def stop_all(self, sig):
        for p in self.procs:
            p.send_signal(sig)
        logs = []
        for p in self.procs:
            p.wait(timeout=90)
            logs.append(p.stderr.read())
        return logs

    def metric(self, name):
        """The sum of a metric over the servers' pages."""
        total = 0.0
        for m in self.metrics:
            page = urllib.request.urlopen(f"http://{m}/metrics").read()
            found = re.search(rf"^{name} (\S+)$", page.decode(), re.M)
            assert found, f"{name} not on {m}"
            total += float(found.group(1))
        return total

    @property
    def list(self):
        return ",".join(self.addrs)


def run_trainer(servers, job):
    t = subprocess.run([sys.executable, "-c", TRAINER, servers, job],
                       capture_output=True, text=True, timeout=120)
    assert t.stdout.strip() == "saved", t.stdout + t.stderr
    assert t.returncode == -signal.SIGKILL, t.returncode


def ls(servers, job):
    out = subprocess.run(
        [os.path.join(bin_dir(), "stagger"), "--server", servers, "ls",
         "--job", job, "--json"], capture_output=True, text=True).stdout
    return json.loads(out)["steps"]


def levels(servers, job):
    """{step: level} of the job's complete steps, as `stagger ls` says."""
    return {s["step"]: s["level"] for s in ls(servers, job)
            if s["state"] == "complete"}


def wait_for(what, check, timeout=45):
    """Polls `check()` until it returns a truthy value; fails naming `what`
    with the last value after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() >= deadline:
            break
        time.sleep(0.25)
    assert got, f"{what() if callable(what) else what}: still not so after " \
        f"{timeout} s"
    return got


def wait_levels(servers, job, want):
    last = {}

    def check():
        last["levels"] = levels(servers, job)
        return last["levels"] == want

    wait_for(lambda: f"job {job}: levels {last['levels']}, want {want}",
             check)


def expect_loads(servers, job, step):
    ck = stagger.Checkpointer(servers=servers, job=job, replicas=2,
                              chunk_size=65536)
    out = {"w": np.zeros(200_000, np.float32)}
    assert ck.load(out) == step
    np.testing.assert_array_equal(out["w"], state(step)["w"])
    del ck


def test_servers_promote_without_the_trainer(tmp_path):
    s = Servers(tmp_path, delay_ms=1500)
    try:
        run_trainer(s.list, "alone")
        # No client lives; the servers confirm the copies and promote.
        wait_levels(s.list, "alone", {1: "disk", 2: "disk"})
        assert s.metric("stagger_server_memory_shards_promoted_total") >= 1
        expect_loads(s.list, "alone", 2)
    finally:
        s.stop_all(signal.SIGTERM)


def test_graceful_restart_of_every_server_keeps_the_step(tmp_path):
    s = Servers(tmp_path, delay_ms=60_000)
    try:
        run_trainer(s.list, "restart")
        assert levels(s.list, "restart") == {1: "disk", 2: "memory"}
        # SIGTERM writes every held chunk behind before the server exits.
        for log in s.stop_all(signal.SIGTERM):
            assert "shutting down with chunks in memory only" not in log, log
        for i in range(3):
            s.start(i)
        wait_levels(s.list, "restart", {1: "disk", 2: "disk"})
        # Both coordinators bring their set-aside shard back.
        wait_for("two shards promoted", lambda: s.metric(
            "stagger_server_memory_shards_promoted_total") == 2)
        expect_loads(s.list, "restart", 2)
    finally:
        s.stop_all(signal.SIGTERM)


def test_killed_before_disk_the_step_is_dropped(tmp_path):
    s = Servers(tmp_path, delay_ms=60_000)
    try:
        run_trainer(s.list, "lost")
        s.stop_all(signal.SIGKILL)
        for i in range(3):
            s.start(i)
        # Never listed while its chunks are unconfirmed; then gone.
        assert levels(s.list, "lost") == {1: "disk"}
        expect_loads(s.list, "lost", 1)
        # Once every server said its chunks are on none of their disks,
        # not even a partial step is left.
        wait_for("step 2 gone",
                 lambda: [x["step"] for x in ls(s.list, "lost")] == [1])
        assert s.metric("stagger_server_memory_shards_dropped_total") == 2
    finally:
        s.stop_all(signal.SIGTERM)
