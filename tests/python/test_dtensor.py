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
