"""Which path a chunk's bytes take between a client and its server.

On one host (same IPC and PID namespaces) payloads move by cross-memory
attach (UCX's cma); a client that looks like another host (its own network
and IPC namespaces, reaching the server over a veth pair) uses TCP. Both
are bit-exact (transport/README.md, "Same host: cma")."""
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import stagger
from conftest import bin_dir, start_server

# Three chunks and a tail: rendezvous payloads, not eager messages.
N = (13 << 20) // 8 + 1234


def state(seed):
    return np.random.default_rng(seed).random(N)


def round_trip(servers, job, seed):
    """Saves a state of three chunks and a tail and loads it into fresh,
    never-touched memory (np.zeros of this size is mapped, not written);
    the Checkpointer, once the load was bit-exact."""
    ck = stagger.Checkpointer(servers=servers, job=job, rank=0, world_size=1)
    a = state(seed)
    ck.save({"a": a}, step=1).wait()
    out = np.zeros_like(a)
    ck.load({"a": out}, step=1)
    assert np.array_equal(out, a)
    return ck


def test_same_host_payloads_move_by_cross_memory(server, capfd):
    ck = round_trip(server, "samehost", 1)
    assert ck.metrics()["servers_cross_memory"] == 1
    err = capfd.readouterr().err
    assert f"data plane of server {server}: payloads by cma/memory" in err


def test_server_without_cross_memory_still_serves(tmp_path):
    proc, grpc = start_server(tmp_path / "data", "--no-cross-memory")
    try:
        ck = round_trip(grpc, "nocma", 2)
        del ck
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) == 0


CLIENT = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[2])
    from test_data_path import round_trip
    ck = round_trip(sys.argv[1], "otherhost", 3)
    print("bit-exact True")
    print("cross_memory", ck.metrics()["servers_cross_memory"])
""")


def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


@pytest.fixture
def other_host():
    """A network namespace joined to this one by a veth pair: (name, the
    address of this side)."""
    if os.geteuid() != 0 or shutil.which("ip") is None or \
            shutil.which("unshare") is None:
        pytest.skip("needs root, ip and unshare for a network namespace")
    ns = f"stg-dp-{os.getpid()}"
    host_if, ns_if = f"stgh{os.getpid() % 100000}", f"stgn{os.getpid() % 100000}"
    if run("ip", "netns", "add", ns).returncode != 0:
        pytest.skip("cannot create a network namespace (ip netns add)")
    try:
        for cmd in (["ip", "link", "add", host_if, "type", "veth", "peer",
                     "name", ns_if, "netns", ns],
                    ["ip", "addr", "add", "10.213.7.1/30", "dev", host_if],
                    ["ip", "link", "set", host_if, "up"],
                    ["ip", "-n", ns, "addr", "add", "10.213.7.2/30", "dev",
                     ns_if],
                    ["ip", "-n", ns, "link", "set", ns_if, "up"],
                    ["ip", "-n", ns, "link", "set", "lo", "up"]):
            r = run(*cmd)
            if r.returncode != 0:
                pytest.skip(f"cannot join a network namespace by veth "
                            f"({' '.join(cmd)}: {r.stderr.strip()})")
        yield ns, "10.213.7.1"
    finally:
        run("ip", "link", "del", host_if)
        run("ip", "netns", "del", ns)


def test_client_on_another_host_uses_tcp(tmp_path, other_host):
    ns, host_ip = other_host
    proc = subprocess.Popen(
        [os.path.join(bin_dir(), "stagger-server"), "--data", str(tmp_path / "data"), "--listen", f"{host_ip}:0",
         "--insecure"],
        stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("stagger-server ready grpc="), line
        grpc = line.split()[2].split("=", 1)[1]
        here = os.path.dirname(os.path.abspath(__file__))
        r = subprocess.run(
            ["ip", "netns", "exec", ns, "unshare", "--ipc", sys.executable,
             "-c", CLIENT, grpc, here],
            capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "bit-exact True" in r.stdout, r.stdout
        assert "cross_memory 0" in r.stdout, r.stdout
        assert f"data plane of server {grpc}: payloads by tcp/" in r.stderr, \
            r.stderr
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) == 0
