import os
import subprocess

import pytest


def bin_dir():
    return os.environ.get(
        "STAGGER_BIN_DIR",
        os.path.join(os.path.dirname(__file__), "..", "..", "build", "bin"))


@pytest.fixture
def server(tmp_path):
    """A real stagger-server process on an ephemeral port."""
    proc = subprocess.Popen(
        [os.path.join(bin_dir(), "stagger-server"), "--data",
         str(tmp_path / "data"), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("stagger-server ready grpc="), line
    grpc = line.split()[2].split("=", 1)[1]
    yield grpc
    proc.terminate()
    assert proc.wait(timeout=60) == 0
