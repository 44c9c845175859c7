"""DTensor state dicts (torch >= 2.1): saved on one mesh, loaded on another.

Skipped with Debian's torch 1.13 (no DTensor); `make test-torch2` runs it
with torch 2.x from PyPI.
"""
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
try:
    from torch.distributed.tensor import DTensor  # noqa: F401 (torch >= 2.4)
except ImportError:
    try:
        from torch.distributed._tensor import DTensor  # noqa: F401
    except ImportError:
        pytest.skip(f"torch {torch.__version__} has no DTensor "
                    "(make test-torch2 runs this with torch 2.x)",
                    allow_module_level=True)

WORKER = os.path.join(os.path.dirname(__file__), "dtensor_worker.py")


def run_ranks(mode, world, server, job, step, tmp_path):
    init = tmp_path / f"init-{mode}-{world}"
    procs, outs = [], []
    for rank in range(world):
        out = tmp_path / f"{mode}-{world}-{rank}.json"
        outs.append(out)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        procs.append(subprocess.Popen(
            [sys.executable, WORKER, mode, str(rank), str(world), str(init),
             server, job, str(step), str(out)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True))
    logs = [p.communicate(timeout=120)[0] for p in procs]
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log
    results = [json.loads(o.read_text()) for o in outs]
    for r in results:
        assert r["ok"], r["detail"]


@pytest.mark.parametrize("save_world,load_world", [(2, 1), (2, 3), (3, 2)])
def test_dtensors_saved_on_one_mesh_load_on_another(server, tmp_path,
                                                     save_world, load_world):
    job = f"dt-{save_world}-{load_world}"
    run_ranks("save", save_world, server, job, 1, tmp_path)
    run_ranks("load-dim1", load_world, server, job, 1, tmp_path)


def test_dtensors_load_into_whole_plain_tensors(server, tmp_path):
    run_ranks("save", 2, server, "dt-plain", 1, tmp_path)
    run_ranks("load-plain", 1, server, "dt-plain", 1, tmp_path)


FSDP_WORKER = os.path.join(os.path.dirname(__file__), "fsdp_worker.py")


def run_fsdp(mode, world, server, job, tmp_path):
    init = tmp_path / f"fsdp-init-{mode}-{world}"
    procs = []
    for rank in range(world):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        procs.append(subprocess.Popen(
            [sys.executable, FSDP_WORKER, mode, str(rank), str(world),
             str(init), server, job, "1", str(tmp_path)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True))
    logs = [p.communicate(timeout=180)[0] for p in procs]
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log


@pytest.mark.parametrize("load_world", [1, 3])
def test_fsdp2_saved_on_2_ranks_resumes_on_another_number(server, tmp_path,
                                                          load_world):
    """FSDP2 model and AdamW state saved on 2 ranks, loaded on 1 and 3:
    every full parameter and moment bit-exact, and the next step's loss
    the same as the saving run's."""
    if not hasattr(pytest.importorskip("torch.distributed.fsdp"),
                   "fully_shard"):
        pytest.skip(f"torch {torch.__version__} has no FSDP2 fully_shard")
    run_fsdp("save", 2, server, f"fsdp-{load_world}", tmp_path)
    run_fsdp("load", load_world, server, f"fsdp-{load_world}", tmp_path)
    for rank in range(load_world):
        r = json.loads((tmp_path / f"result-{rank}.json").read_text())
        assert r["differ"] == [], r
        assert r["loss"] == r["want_loss"], r
