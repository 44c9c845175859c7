"""stagger.torch across processes: the DDP comm hook on two ranks, the rank
layout from torchrun's variables and from an initialized process group,
and the example job killed and resumed.

Skipped as a whole where torch is missing (CI installs python3-torch).
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed (Debian: apt-get install "
    "--no-install-recommends python3-torch)")

import stagger  # noqa: E402
import stagger.torch as st  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def test_ddp_comm_hook_marks_allreduces_two_processes(server, tmp_path):
    procs, outs = [], []
    for r in range(2):
        out = tmp_path / f"rank{r}.json"
        outs.append(out)
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(HERE, "torch_ddp_worker.py"),
             str(r), "2", str(tmp_path / "init"), server, "ddp", str(out)]))
    for p in procs:
        assert p.wait(timeout=120) == 0
    results = [json.loads(o.read_text()) for o in outs]
    for res in results:
        # 4 steps, at least one bucket each.
        assert res["collectives"] >= 4, res
        assert res["steps"] == 4
        # Held back at most for as long as the save took.
        assert 0 <= res["yield_s"] <= res["durable_s"], res
        assert res["equal"] is True
    # Replicated state is stored by rank 0 only.
    assert results[0]["bytes_raw"] > 4 * results[1]["bytes_raw"]
    assert results[0]["digest"] == results[1]["digest"]


def test_checkpointer_reads_the_torchrun_environment(tmp_path, monkeypatch):
    for k, v in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1",
                 "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(k, v)
    assert st.dist_env() == st.DistEnv(1, 2, 1, 2)
    ck = st.checkpointer(f"embedded:{tmp_path}", "env")
    st.save_state_dict(ck, {"x": torch.ones(3)}, 1).wait()
    assert ck.steps() == []  # world size 2: rank 0 has not committed
    assert ck.steps(include_partial=True) == [1]
    ck0 = st.checkpointer(f"embedded:{tmp_path}", "env", rank=0)
    st.save_state_dict(ck0, {"x": torch.ones(3)}, 1).wait()
    assert ck.steps() == [1]
    monkeypatch.setenv("RANK", "one")
    with pytest.raises(ValueError, match="RANK='one'"):
        st.dist_env()
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(k)
    assert st.dist_env() == st.DistEnv(0, 1, 0, 1)


_SPAWNED_RANK = """
import json, os, sys
import torch
import torch.distributed as dist
import stagger.torch as st
rank, world, init, servers, out = (int(sys.argv[1]), int(sys.argv[2]),
                                   sys.argv[3], sys.argv[4], sys.argv[5])
dist.init_process_group("gloo", init_method="file://" + init, rank=rank,
                        world_size=world)
env = st.dist_env()
ck = st.checkpointer(servers, "spawned")
st.save_state_dict(ck, {"x": torch.full((4,), float(rank))}, 1).wait()
dist.barrier()
steps = ck.steps()
os.environ["RANK"] = str(world - 1 - rank)
try:
    st.dist_env()
    error = ""
except ValueError as e:
    error = str(e)
json.dump({"env": list(env), "steps": steps, "error": error},
          open(out, "w"))
dist.destroy_process_group()
"""


def test_rank_and_world_size_come_from_the_process_group(server, tmp_path):
    """Processes started without RANK/WORLD_SIZE (as mp.spawn starts them)
    take their rank from the initialized process group, and a variable
    that disagrees with the group is refused."""
    script = tmp_path / "rank.py"
    script.write_text(_SPAWNED_RANK)
    child_env = {k: v for k, v in os.environ.items()
                 if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                              "LOCAL_WORLD_SIZE")}
    procs, outs = [], []
    for r in range(2):
        outs.append(tmp_path / f"rank{r}.json")
        procs.append(subprocess.Popen(
            [sys.executable, str(script), str(r), "2", str(tmp_path / "init"),
             server, str(outs[-1])], env=child_env))
    for p in procs:
        assert p.wait(timeout=120) == 0
    for r, out in enumerate(outs):
        res = json.loads(out.read_text())
        assert res["env"] == [r, 2, r, 2]
        assert res["steps"] == [1]  # both ranks committed step 1
        assert f"RANK={1 - r} disagrees" in res["error"], res["error"]


def _launch(server, steps, log, job="example"):
    """The example on 2 processes, in a session of its own (to kill it)."""
    cmd = [sys.executable, os.path.join(REPO, "examples", "launch.py"),
           "--nproc", "2",
           os.path.join(REPO, "examples", "torch_ddp_train.py"),
           "--servers", server, "--job", job, "--steps", str(steps),
           "--every", "3", "--step-time", "0.02", "--print-losses"]
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _losses(log):
    """{(rank, step): loss as float.hex} from the example's output (the
    ranks' lines may run together: a line's newline is a write of its
    own)."""
    found = re.findall(r"rank (\d+): step (\d+) loss\.hex "
                       r"(-?0x[0-9a-f]+(?:\.[0-9a-f]+)?p[-+]\d+)", log)
    return {(int(rank), int(step)): value for rank, step, value in found}


def test_example_is_killed_and_resumes_with_the_same_losses(server,
                                                            tmp_path):
    watcher = stagger.Checkpointer(servers=server, job="example", rank=0,
                                   world_size=2)
    with open(tmp_path / "run1.log", "w") as log:
        proc = _launch(server, 100000, log)
        try:
            deadline = time.monotonic() + 90
            while not [s for s in watcher.steps() if s >= 6]:
                assert proc.poll() is None, (tmp_path / "run1.log").read_text()
                assert time.monotonic() < deadline, "no checkpoint in 90 s"
                time.sleep(0.1)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)  # a crash: nothing cleans up
            proc.wait()
    # A commit the killed ranks sent just before the kill may still land
    # at the server: read the steps once they have stopped changing.
    settled = (watcher.steps(), watcher.steps(include_partial=True))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = (watcher.steps(), watcher.steps(include_partial=True))
        if now == settled:
            break
        settled = now
    seen = watcher.steps()[-1]
    # A step some ranks committed before the crash: the resumed run must
    # save under other numbers (the server keeps rank 0's shard).
    if seen + 3 not in watcher.steps(include_partial=True):
        st.save_state_dict(watcher, {"x": torch.ones(1)}, seen + 3).wait()

    with open(tmp_path / "run2.log", "w") as log:
        proc = _launch(server, seen + 7, log)
        assert proc.wait(timeout=120) == 0, (tmp_path / "run2.log").read_text()
    out = (tmp_path / "run2.log").read_text()
    resumed = [int(s) for s in re.findall(r"resumed from step (\d+)", out)]
    assert len(resumed) == 2 and resumed[0] == resumed[1] >= seen, out
    assert out.count(f"done at step {seen + 7}") == 2, out
    assert out.count(f"step {seen + 3} not saved") == 2, out
    assert watcher.steps()[-1] == seen + 6

    # An uninterrupted run of another job: the resumed run's losses (model,
    # AdamW state, RNG state and step restored) equal its own, bit for bit,
    # and so do the killed run's up to the kill.
    with open(tmp_path / "straight.log", "w") as log:
        proc = _launch(server, seen + 7, log, job="example-straight")
        assert proc.wait(timeout=120) == 0, (
            tmp_path / "straight.log").read_text()
    straight = _losses((tmp_path / "straight.log").read_text())
    assert sorted(straight) == [(r, s) for r in (0, 1)
                                for s in range(1, seen + 8)]
    resumed_losses = _losses(out)
    assert sorted(resumed_losses) == [(r, s) for r in (0, 1)
                                      for s in range(resumed[0] + 1, seen + 8)]
    for key, value in resumed_losses.items():
        assert value == straight[key], (key, value, straight[key])
    killed = _losses((tmp_path / "run1.log").read_text())
    assert len(killed) >= 12
    for key, value in killed.items():
        assert key[1] > seen + 7 or value == straight[key], key
