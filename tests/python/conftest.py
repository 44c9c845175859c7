import os
import subprocess

import pytest


def bin_dir():
    return os.environ.get(
        "STAGGER_BIN_DIR",
        os.path.join(os.path.dirname(__file__), "..", "..", "build", "bin"))


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
