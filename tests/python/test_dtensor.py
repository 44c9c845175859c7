"""DTensor state dicts (torch >= 2.1): saved on one mesh, loaded on another.

Also FSDP2 and FSDP1 models resumed on another number of ranks, and DCP
checkpoints in and out. Skipped with Debian's torch 1.13 (no DTensor);
`make test` runs it with torch 2.x from PyPI where that venv exists.
"""
import json
import os
import re
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
                    "(make test runs this with torch 2.x where its venv "
                    "exists; make test-torch2 makes it)",
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


def run_fsdp(mode, world, server, job, tmp_path, flavour="fsdp2"):
    init = tmp_path / f"fsdp-init-{mode}-{world}"
    procs = []
    for rank in range(world):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        procs.append(subprocess.Popen(
            [sys.executable, FSDP_WORKER, mode, str(rank), str(world),
             str(init), server, job, "1", str(tmp_path), flavour],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True))
    logs = [p.communicate(timeout=180)[0] for p in procs]
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log


@pytest.mark.parametrize("flavour", ["fsdp2", "fsdp1"])
@pytest.mark.parametrize("load_world", [1, 3])
def test_fsdp_saved_on_2_ranks_resumes_on_another_number(server, tmp_path,
                                                         load_world, flavour):
    """An FSDP model and its AdamW state saved lazily on 2 ranks (stagger's
    hooks on the FSDP module and the optimizer), loaded on 1 and 3: every
    full parameter and moment bit-exact, as they were at the save though
    the next step ran during its copies, and the next step's loss the same
    as the saving run's. fsdp2: fully_shard, DTensor state dicts; fsdp1:
    FullyShardedDataParallel, SHARDED_STATE_DICT (ShardedTensors)."""
    fsdp = pytest.importorskip("torch.distributed.fsdp")
    if flavour == "fsdp2" and not hasattr(fsdp, "fully_shard"):
        pytest.skip(f"torch {torch.__version__} has no FSDP2 fully_shard")
    job = f"{flavour}-{load_world}"
    run_fsdp("save", 2, server, job, tmp_path, flavour)
    run_fsdp("load", load_world, server, job, tmp_path, flavour)
    for rank in range(load_world):
        r = json.loads((tmp_path / f"result-{rank}.json").read_text())
        sharded = {"fsdp2": "DTensor", "fsdp1": "ShardedTensor"}[flavour]
        assert r["saved_kinds"] == [sharded], r
        # On one rank FSDP1 gives plain tensors.
        assert r["kinds"] == [sharded if load_world > 1 or
                              flavour == "fsdp2" else "Tensor"], r
        assert r["differ"] == [], r
        assert r["loss"] == r["want_loss"], r
        # Two steps before the save: a forward and a backward marked each.
        assert r["marked"] == 4, r
        # Marked from autograd, not with full backward hooks: torch does
        # not warn that its inputs need no gradient.
        assert r["hook_warnings"] == [], r
        assert r["still_open"] == 0, r  # every backward's end marked
        assert r["steps_hooked"] == 3, r


SEVERAL_SHARDS = """
import sys, torch, torch.distributed as dist
from torch.distributed._shard.sharded_tensor import (
    Shard, ShardMetadata, init_from_local_shards)
import stagger.torch as st
dist.init_process_group("gloo", init_method="file://" + sys.argv[1],
                        rank=0, world_size=1)
shards = [Shard(torch.zeros(2, 4), ShardMetadata([r, 0], [2, 4], "rank:0/cpu"))
          for r in (0, 2)]
t = init_from_local_shards(shards, [4, 4])
ck = st.checkpointer(sys.argv[2], job="several", rank=0, world_size=1)
try:
    st.save_state_dict(ck, {"layer": {"w": t}}, 1)
except ValueError as e:
    print("refused:", e)
"""


def test_a_sharded_tensor_with_several_local_shards_is_refused(server,
                                                               tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", SEVERAL_SHARDS,
                          str(tmp_path / "init"), server], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert ("refused: 'layer.w' is a ShardedTensor with 2 shards on this "
            "rank; one per rank (FSDP1's layout) is supported") in out.stdout


def _bits_equal(a, b):
    return (a.dtype == b.dtype and a.shape == b.shape
            and torch.equal(a.view(-1).view(torch.uint8),
                            b.view(-1).view(torch.uint8)))


def test_a_dcp_checkpoint_imports_bit_exact(server, tmp_path):
    import stagger.torch as st
    import torch.distributed.checkpoint as dcp
    g = torch.Generator().manual_seed(3)
    sd = {"model": {"w": torch.randn(5, 7, generator=g),
                    "h": torch.randn(9, generator=g).half(),
                    "i": torch.arange(6, dtype=torch.int64)},
          "optim": {"state": {0: {"exp_avg": torch.randn(5, 7, generator=g),
                                  "step": torch.tensor(12.0)}},
                    "param_groups": [{"lr": 3e-4, "params": [0]}]},
          "epoch": 4}
    dcp.save(sd, checkpoint_id=str(tmp_path / "dcp"), no_dist=True)
    ck = st.checkpointer(server, job="imported", rank=0, world_size=1)
    st.import_dcp(ck, tmp_path / "dcp", 5).wait()
    dest = {"model": {k: torch.zeros_like(v) for k, v in sd["model"].items()},
            "optim": {"state": {}, "param_groups": []}, "epoch": 0}
    result = st.load_state_dict(ck, dest, step=5)
    assert result.step == 5
    for k, v in sd["model"].items():
        assert _bits_equal(dest["model"][k], v), k
    # DCP keeps dict keys as strings (its metadata: 'optim.state.0...'),
    # and so what it stored comes back keyed "0".
    got = dest["optim"]["state"]["0"]
    assert _bits_equal(got["exp_avg"], sd["optim"]["state"][0]["exp_avg"])
    assert _bits_equal(got["step"], sd["optim"]["state"][0]["step"])
    assert dest["optim"]["param_groups"] == sd["optim"]["param_groups"]
    assert dest["epoch"] == 4


def test_a_step_saved_by_dtensor_ranks_exports_to_dcp(server, tmp_path):
    """Saved sharded on 2 ranks; exported whole; dcp.load reads it."""
    import stagger.torch as st
    import torch.distributed.checkpoint as dcp
    sys.path.insert(0, os.path.dirname(__file__))
    from dtensor_worker import global_tensors
    run_ranks("save", 2, server, "dt-export", 1, tmp_path)
    ck = st.checkpointer(server, job="dt-export", rank=0, world_size=1)
    assert st.export_dcp(ck, "latest", tmp_path / "out") == 1
    full = global_tensors()
    dest = {"model": {k: torch.zeros_like(v) for k, v in full.items()}}
    dcp.load(dest, checkpoint_id=str(tmp_path / "out"), no_dist=True)
    for k, v in full.items():
        assert _bits_equal(dest["model"][k], v), k
    # The same from the command line (`stagger export-dcp`, which runs
    # this python's stagger.torch.dcp), and back in as another job.
    from conftest import bin_dir
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path),
               STAGGER_PYTHON=sys.executable)
    stagger_cli = [os.path.join(bin_dir(), "stagger"), "--server", server]
    out = subprocess.run(stagger_cli + ["export-dcp", "--dir",
                                        str(tmp_path / "cli"), "--job",
                                        "dt-export"],
                         env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "exported job 'dt-export' step 1" in out.stdout
    out = subprocess.run(stagger_cli + ["import-dcp", "--dir",
                                        str(tmp_path / "cli"), "--job",
                                        "back", "--step", "9"],
                         env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    cli = [sys.executable, "-m", "stagger.torch.dcp"]
    back = st.checkpointer(server, job="back", rank=0, world_size=1)
    dest = {"model": {k: torch.zeros_like(v) for k, v in full.items()}}
    assert st.load_state_dict(back, dest).step == 9
    for k, v in full.items():
        assert _bits_equal(dest["model"][k], v), k
    out = subprocess.run(cli + ["import", "--dir", str(tmp_path / "cli"),
                                "--servers", server, "--job", "x"],
                         env=env, capture_output=True, text=True)
    assert out.returncode == 2 and "import needs --step" in out.stderr


def test_the_fsdp_example_resumes_on_another_number_of_processes(server,
                                                                 tmp_path):
    """examples/fsdp_train.py as its docstring runs it: 2 processes to step
    4, then 3 processes from there to step 6. The resumed run holds the
    state the first one saved (its fingerprint), and saves on."""
    fsdp = pytest.importorskip("torch.distributed.fsdp")
    if not hasattr(fsdp, "fully_shard"):
        pytest.skip(f"torch {torch.__version__} has no FSDP2 fully_shard")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))

    def run(nproc, steps):
        out = subprocess.run(
            [sys.executable, os.path.join(repo, "examples", "launch.py"),
             "--nproc", str(nproc), os.path.join(repo, "examples",
                                                 "fsdp_train.py"),
             "--servers", server, "--steps", str(steps)],
            env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    first = run(2, 4)
    saved = re.search(r"step 4 loss \S+ saved on 2 ranks, state (\w+)",
                      first)
    assert saved, first
    second = run(3, 6)
    resumed = re.search(r"resumed from step 4 on 3 ranks, state (\w+)",
                        second)
    assert resumed, second
    assert resumed.group(1) == saved.group(1), (first, second)
    assert "step 6 loss" in second and "saved on 3 ranks" in second, second
    assert "done at step 6" in second, second
