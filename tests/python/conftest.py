import os
import random
import socket
import subprocess

import pytest


def bin_dir():
    return os.environ.get(
        "STAGGER_BIN_DIR",
        os.path.join(os.path.dirname(__file__), "..", "..", "build", "bin"))


def listen_address():
    """A free 127.0.0.1 port below the kernel's ephemeral range, where no
    outgoing connection takes it while a server that listened there is
    restarted ("127.0.0.1:0" where that range leaves no room)."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    if low - 10000 < 1000:
        return "127.0.0.1:0"
    for _ in range(64):
        port = random.randrange(10000, low)
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return f"127.0.0.1:{port}"
    return "127.0.0.1:0"


def start_server(data_dir, *extra):
    """Starts stagger-server on an ephemeral port: (process, grpc address)."""
    proc = subprocess.Popen(
        [os.path.join(bin_dir(), "stagger-server"), "--data", str(data_dir),
         "--listen", "127.0.0.1:0", *extra],
        stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("stagger-server ready grpc="), line
    return proc, line.split()[2].split("=", 1)[1]


@pytest.fixture
def server(tmp_path):
    """A real stagger-server process on an ephemeral port."""
    proc, grpc = start_server(tmp_path / "data")
    yield grpc
    proc.terminate()
    assert proc.wait(timeout=60) == 0
