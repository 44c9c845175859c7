"""stagger.torch: state dicts, sharding helpers, the optimizer hook, the
CLI's consolidated restores (test_torch_jobs.py: jobs of several
processes).

Skipped as a whole where torch is missing (CI installs python3-torch).
"""
import json
import os
import subprocess
import time

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed (Debian: apt-get install "
    "--no-install-recommends python3-torch)")

import stagger  # noqa: E402
import stagger.torch as st  # noqa: E402
from conftest import bin_dir  # noqa: E402
from torch_ddp_worker import bits, clone, same_bits  # noqa: E402


def open_ck(tmp_path, job, **options):
    return stagger.Checkpointer(servers=f"embedded:{tmp_path}", job=job,
                                chunk_size=4096, **options)


class Net(torch.nn.Module):
    """fp32 and bf16 parameters and an integer buffer."""

    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.fc = torch.nn.Linear(40, 30)
        self.head = torch.nn.Linear(30, 20).to(torch.bfloat16)
        self.register_buffer("seen", torch.tensor(seed, dtype=torch.int64))

    def forward(self, x):
        return self.head(torch.relu(self.fc(x)).to(torch.bfloat16)).float()


def train(model, optimizer, steps, seed=0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        loss = model(torch.randn(8, 40, generator=g)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test_model_and_adamw_round_trip_bit_exact(tmp_path):
    model = Net(1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    train(model, opt, 3)
    sd = {"model": model.state_dict(), "optim": opt.state_dict(),
          "epoch": 7, "lr": 3e-4, "name": "run-1",
          "tags": ["a", 1, 2.5, None, True, -0.0],
          "nested": {"pair": (1, 2.0), 3: "int key", "inf": float("inf")}}
    want = clone(sd)
    ck = open_ck(tmp_path, "rt")
    st.save_state_dict(ck, sd, 5).wait()

    fresh = Net(2)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1.0)
    assert fresh_opt.state_dict()["state"] == {}
    # Plain values load where the state dict asks for them, as tensors do.
    dest = {"model": fresh.state_dict(), "optim": fresh_opt.state_dict(),
            "epoch": 0, "lr": None, "name": "", "tags": [], "nested": {}}
    assert st.load_state_dict(ck, dest) == (5, [], [], [])
    assert same_bits(want, dest)
    assert dest["tags"][-1] == 0.0 and str(dest["tags"][-1]) == "-0.0"
    fresh.load_state_dict(dest["model"])
    fresh_opt.load_state_dict(dest["optim"])
    assert same_bits(want["model"], fresh.state_dict())
    assert same_bits(want["optim"], fresh_opt.state_dict())
    assert fresh.head.weight.dtype == torch.bfloat16
    # The restored optimizer continues exactly as the original.
    train(model, opt, 2, seed=9)
    train(fresh, fresh_opt, 2, seed=9)
    assert same_bits(model.state_dict(), fresh.state_dict())


def test_dtypes_layouts_and_values_round_trip(tmp_path):
    g = torch.Generator().manual_seed(5)
    base = torch.randn(6, 10, generator=g)
    tensors = {
        dt: (base * 50).to(dt) for dt in (
            torch.float32, torch.float64, torch.float16, torch.bfloat16,
            torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
            torch.complex64, torch.complex128)}
    tensors[torch.bool] = base > 0
    shared = torch.randn(4, 4, generator=g)
    sd = {
        "t": {str(dt).replace("torch.", ""): t for dt, t in tensors.items()},
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 3),
        "transposed": base.t(),  # not contiguous: saved from a copy
        "nan": torch.tensor([float("nan"), -float("inf"), -0.0]),
        "tied_a": shared, "tied_b": shared,  # stored once
        "odd/key with spaces": torch.arange(5),
        "a.b": torch.ones(2), "a": {"b": torch.zeros(2)},  # same dotted path
        "x" * 200: torch.ones(1),  # name longer than 128
        "meta": {"size": torch.Size([2, 3]), "dtype": torch.bfloat16,
                 "device": torch.device("cpu"), 0: [1, [2, (3, None)]]},
    }
    want = clone(sd)
    ck = open_ck(tmp_path, "dt")
    st.save_state_dict(ck, sd, 1).wait()

    # Loading into nothing at all (allocated) and into a transposed
    # (non-contiguous) destination both give the saved bits.
    dest = {"t": {}}
    st.load_state_dict(ck, dest)
    assert same_bits(want, dest)
    assert dest["tied_a"] is dest["tied_b"]
    assert isinstance(dest["meta"]["size"], torch.Size)
    dest = {"transposed": torch.zeros(6, 10).t()}
    st.load_state_dict(ck, dest, strict=False)
    assert torch.equal(bits(dest["transposed"]), bits(want["transposed"]))
    # A destination of the saved dtype is filled in place.
    into = torch.zeros(6, 10, dtype=torch.bfloat16)
    dest = {"t": {"bfloat16": into}}
    st.load_state_dict(ck, dest, strict=False)
    assert dest["t"]["bfloat16"] is into
    assert torch.equal(bits(into), bits(want["t"]["bfloat16"]))


def test_load_errors_name_the_entry(tmp_path):
    ck = open_ck(tmp_path, "err")
    with pytest.raises(TypeError, match="'bad.x' is a object"):
        st.save_state_dict(ck, {"bad": {"x": object()}}, 1)
    with pytest.raises(ValueError, match="shards name no tensor"):
        st.save_state_dict(ck, {"w": torch.ones(4)}, 1,
                           shards={"v": st.row_shard([4], 0, 1)})
    st.save_state_dict(ck, {"w": torch.ones(4), "n": 1}, 1).wait()
    with pytest.raises(st.StateDictMismatch,
                       match=r"'w': saved float32\[4\], state dict float64"):
        st.load_state_dict(ck, {"w": torch.zeros(4, dtype=torch.float64)})
    with pytest.raises(RuntimeError, match="missing.*'extra'"):
        st.load_state_dict(ck, {"w": torch.zeros(4), "extra": torch.ones(1)})
    with pytest.raises(st.StateDictMismatch,
                       match=r"'w': saved float32\[4\], state dict float32"
                             r"\[5\]"):
        st.load_state_dict(ck, {"w": torch.zeros(5)})
    with pytest.raises(stagger.Error) as e:
        st.load_state_dict(ck, {}, step=2)
    assert e.value.code == "NOT_FOUND"
    # A step saved by the plain binding has no state dict metadata.
    ck.save({"w": np.ones(4, np.float32)}, step=3).wait()
    with pytest.raises(stagger.Error) as e:
        st.load_state_dict(ck, {}, step=3)
    assert e.value.code == "NOT_FOUND"


def test_load_takes_what_is_asked_and_fails_on_every_difference(tmp_path):
    g = torch.Generator().manual_seed(6)
    w = torch.randn(4, 3, generator=g)
    saved = {"model": {"w": w, "b": torch.randn(5, generator=g),
                       "h": torch.randn(2, generator=g).bfloat16(),
                       "n": torch.arange(3), "tied": w,
                       "extra": torch.randn(2, generator=g)},
             "optim": {"state": {0: {"m": torch.randn(3, generator=g)}}},
             "epoch": 3}
    want = clone(saved)
    ck = open_ck(tmp_path, "strict")
    st.save_state_dict(ck, saved, 4).wait()

    def destination():
        # "w" and "extra" are not asked for, "b" and "h" mismatched (shape,
        # dtype), "new" missing; "optim.state" holds no tensor, so it
        # receives the saved ones.
        return {"model": {"tied": torch.zeros(4, 3), "b": torch.zeros(6),
                          "h": torch.zeros(2), "n": torch.zeros(3).long(),
                          "new": torch.ones(2)},
                "optim": {"state": {}}, "epoch": 0}

    dest = destination()
    for strict in (True, False):  # mismatches fail either way
        with pytest.raises(st.StateDictMismatch) as e:
            st.load_state_dict(ck, dest, strict=strict)
        assert e.value.result == st.LoadResult(
            4, ["model.new"], ["model.extra", "model.w"],
            ["model.b", "model.h"])
        lines = str(e.value).splitlines()
        # Mismatches first, each with both dtypes and shapes.
        assert lines[1] == ("  mismatched 'model.b': saved float32[5], "
                            "state dict float32[6]"), lines
        assert lines[2] == ("  mismatched 'model.h': saved bfloat16[2], "
                            "state dict float32[2] (cast=True loads it)")
        assert ("'model.new'" in lines[3]) == strict, lines
        assert isinstance(e.value, RuntimeError)
        assert same_bits(dest, destination())  # nothing was loaded

    # Without the mismatches: strict fails on the missing tensor alone...
    del dest["model"]["b"]
    dest["model"]["h"] = torch.zeros(2, dtype=torch.bfloat16)
    with pytest.raises(st.StateDictMismatch, match="missing.*'model.new'"):
        st.load_state_dict(ck, dest)
    # ...strict=False loads the rest and leaves it as it is.
    result = st.load_state_dict(ck, dest, strict=False)
    assert result == st.LoadResult(4, ["model.new"],
                                   ["model.b", "model.extra", "model.w"], [])
    model = dest["model"]
    assert sorted(model) == ["h", "n", "new", "tied"]
    assert torch.equal(model["tied"], want["model"]["w"])  # took w's place
    assert torch.equal(model["n"], want["model"]["n"])
    assert torch.equal(bits(model["h"]), bits(want["model"]["h"]))
    assert torch.equal(model["new"], torch.ones(2))
    assert same_bits(dest["optim"], want["optim"])
    assert dest["epoch"] == 3


def test_loading_the_weights_of_a_training_checkpoint(tmp_path):
    model = Net(1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train(model, opt, 2)
    ck = open_ck(tmp_path, "subset")
    st.save_state_dict(ck, {"model": model.state_dict(),
                            "optim": opt.state_dict(), "epoch": 9}, 1).wait()
    fresh = Net(2)
    dest = {"model": fresh.state_dict()}
    result = st.load_state_dict(ck, dest)
    assert result.missing_keys == [] and result.mismatched_keys == []
    assert result.unexpected_keys and all(
        k.startswith("optim.") for k in result.unexpected_keys)
    assert sorted(dest) == ["model"]  # nothing added that was not asked
    fresh.load_state_dict(dest["model"])
    for a, b in zip(model.state_dict().values(),
                    fresh.state_dict().values()):
        assert torch.equal(bits(a), bits(b))


def test_cast_loads_a_float32_step_into_a_float64_model(tmp_path):
    ck = open_ck(tmp_path, "cast")
    w = torch.randn(3, 4, generator=torch.Generator().manual_seed(2))
    st.save_state_dict(ck, {"w": w, "i": torch.arange(4)}, 1).wait()
    with pytest.raises(st.StateDictMismatch,
                       match=r"'w': saved float32\[3, 4\], state dict "
                             r"float64\[3, 4\] \(cast=True loads it\)"):
        st.load_state_dict(ck, {"w": torch.zeros(3, 4, dtype=torch.float64)})
    dest = {"w": torch.zeros(3, 4, dtype=torch.float64)}
    into = dest["w"]
    assert st.load_state_dict(ck, dest, cast=True).mismatched_keys == []
    assert dest["w"] is into and dest["w"].dtype == torch.float64
    assert torch.equal(dest["w"], w.double())
    # Not where torch would not cast: a float into an integer tensor.
    with pytest.raises(st.StateDictMismatch,
                       match=r"'w': saved float32\[3, 4\], state dict "
                             r"int64\[3, 4\]\n") as e:
        st.load_state_dict(ck, {"w": torch.zeros(3, 4, dtype=torch.int64)},
                           cast=True)
    assert "cast=True" not in str(e.value)
    assert "1 tensor of the step not asked for is left out" in str(e.value)


def test_shard_helpers_match_torch_chunk():
    for n in (1, 5, 7, 16, 37):
        for world in (1, 2, 3, 4, 6):
            full = torch.arange(n * 3).reshape(n, 3)
            pieces = torch.chunk(full, world, 0)
            for r in range(world):
                s = st.row_shard(full.shape, r, world)
                want = pieces[r] if r < len(pieces) else full[n:]
                assert torch.equal(full[s.slices()], want), (n, world, r)
                cols = torch.chunk(full.t(), world, 1)
                c = st.column_shard((3, n), r, world)
                want = cols[r] if r < len(cols) else full.t()[:, n:]
                assert torch.equal(full.t()[c.slices()], want)
    assert st.flat_shard(101, 3, 4) == st.Shard((101,), (78,), (23,))
    assert st.flat_shard(5, 3, 4) == st.Shard((5,), (5,), (0,))
    assert st.replicated((2, 3)) == st.Shard((2, 3), (0, 0), (2, 3))
    with pytest.raises(ValueError):
        st.Shard((4, 4), (0,))


def _global_tensors():
    g = torch.Generator().manual_seed(3)
    return {
        "w": torch.randn(37, 24, generator=g),
        "b": torch.randn(37, 10, generator=g).to(torch.bfloat16),
        "emb": torch.randint(0, 1 << 40, (37, 6, 5), generator=g),
    }


def test_save_on_4_ranks_load_on_2_and_3_by_rows_and_columns(tmp_path):
    full = _global_tensors()
    norm = torch.randn(24)
    handles = []
    savers = [open_ck(tmp_path, "rs", rank=r, world_size=4) for r in range(4)]
    for r, ck in enumerate(savers):
        shards = {k: st.row_shard(v.shape, r, 4) for k, v in full.items()}
        sd = {k: st.local_slice(v, shards[k]) for k, v in full.items()}
        sd.update(norm=norm.clone(), rank=r)
        handles.append(st.save_state_dict(ck, sd, 1, shards=shards,
                                          replicated=["norm"]))
    for h in handles:
        h.wait()
    # The replicated tensor travels once, from rank 0 (the rest of the
    # difference: the ranks' metadata differ by a few bytes).
    extra = [h.stats()["bytes_raw"] - sum(
        st.local_slice(v, st.row_shard(v.shape, r, 4)).numel()
        * v.element_size() for v in full.values())
        for r, h in enumerate(handles)]
    assert abs(extra[0] - extra[1] - norm.numel() * 4) < 16

    for world in (2, 3):
        for helper, dim in ((st.row_shard, 0), (st.column_shard, -1)):
            for r in range(world):
                ck = open_ck(tmp_path, "rs", rank=r, world_size=world)
                shards = {k: helper(v.shape, r, world)
                          for k, v in full.items()}
                dest = {k: torch.empty(shards[k].shape, dtype=v.dtype)
                        for k, v in full.items()}
                dest["norm"] = torch.empty(24)
                dest["rank"] = None
                assert st.load_state_dict(ck, dest,
                                          shards=shards).step == 1
                for k, v in full.items():
                    want = torch.chunk(v, world, dim)[r]
                    assert torch.equal(bits(dest[k]), bits(want)), (
                        k, world, helper.__name__, r)
                assert torch.equal(dest["norm"], norm)
                assert dest["rank"] == r
    # A rank's slice without shards=: the error says how to ask for it.
    ck = open_ck(tmp_path, "rs", rank=0, world_size=3)
    key = next(iter(full))
    dest = {key: torch.empty(st.row_shard(full[key].shape, 0, 3).shape,
                             dtype=full[key].dtype)}
    with pytest.raises(st.StateDictMismatch,
                       match=r"a slice of it\? pass shards="):
        st.load_state_dict(ck, dest, strict=False)


def test_a_rank_the_saving_job_lacked_is_told_whose_tensors_it_got(
        tmp_path):
    """Saved on 2 ranks, loaded on 3: rank 2 takes rank 0's per-rank
    tensors (its RNG state, a counter), and LoadResult says so."""
    weight = torch.randn(6, 4)
    handles = []
    for r in range(2):
        ck = open_ck(tmp_path, "more", rank=r, world_size=2)
        shard = st.row_shard(weight.shape, r, 2)
        sd = {"w": st.local_slice(weight, shard),
              "rng": torch.full((8,), r, dtype=torch.uint8),
              "seen": torch.tensor(100 + r)}
        handles.append(st.save_state_dict(ck, sd, 1, shards={"w": shard}))
    for h in handles:
        h.wait()
    for r in range(3):
        ck = open_ck(tmp_path, "more", rank=r, world_size=3)
        shard = st.row_shard(weight.shape, r, 3)
        dest = {"w": torch.empty(shard.shape), "rng": torch.empty(8,
                dtype=torch.uint8), "seen": torch.tensor(0)}
        result = st.load_state_dict(ck, dest, shards={"w": shard})
        assert torch.equal(dest["w"], st.local_slice(weight, shard))
        if r < 2:
            # Its own save holds its per-rank tensors.
            assert result.from_other_ranks == {}, r
            assert int(dest["seen"]) == 100 + r
        else:
            assert result.from_other_ranks == {"rng": 0, "seen": 0}
            assert torch.equal(dest["rng"], torch.zeros(8, dtype=torch.uint8))
            assert int(dest["seen"]) == 100
        # The binding's own view, by stored name.
        assert sorted(ck.last_load_from_other_ranks().values()) == sorted(
            result.from_other_ranks.values())


def test_fsdp_flat_shards_reload_on_another_world_size(tmp_path):
    flat = torch.randn(101, generator=torch.Generator().manual_seed(4))
    handles = []
    for r in range(4):
        shard = st.flat_shard(flat.numel(), r, 4)
        local = torch.zeros(26)  # padded to 4 x 26
        local[:shard.shape[0]] = flat[shard.slices()]
        ck = open_ck(tmp_path, "fsdp", rank=r, world_size=4)
        handles.append(st.save_state_dict(ck, {"flat": local}, 1,
                                          shards={"flat": shard}))
    for h in handles:
        h.wait()
    for r in range(3):
        shard = st.flat_shard(flat.numel(), r, 3)
        local = torch.full((34,), -1.0)  # padded to 3 x 34
        ck = open_ck(tmp_path, "fsdp", rank=r, world_size=3)
        st.load_state_dict(ck, {"flat": local}, shards={"flat": shard})
        n = shard.shape[0]
        assert torch.equal(local[:n], flat[shard.slices()])
        assert torch.all(local[n:] == -1)  # padding untouched


def test_optimizer_hook_fences_lazy_save(tmp_path):
    model = torch.nn.Linear(512, 512)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    ck = open_ck(tmp_path, "hook")
    hooks = st.install_hooks(ck, optimizer=opt)
    # An LR scheduler created afterwards wraps the hooked step as usual.
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    for step in range(1, 4):
        loss = model(torch.ones(4, 512)).sum()
        opt.zero_grad()
        loss.backward()
        sd = {"model": model.state_dict()}
        want = clone(sd)
        h = st.save_state_dict(ck, sd, step, lazy=True)
        opt.step()  # must wait for the snapshot first
        sched.step()
        h.wait()
        dest = {"model": torch.nn.Linear(512, 512).state_dict()}
        st.load_state_dict(ck, dest, step=step)
        assert same_bits(want, dest)
        assert not torch.equal(dest["model"]["weight"], model.weight)
    assert hooks.steps == 3
    assert hooks.collectives == 0
    hooks.remove()
    opt.step()
    assert hooks.steps == 3
    # A plain module: the fence, no marks, and a warning saying so.
    with pytest.warns(UserWarning, match="a Linear is neither "
                                         "DistributedDataParallel nor FSDP"):
        plain = st.install_hooks(ck, model=model, optimizer=opt)
    opt.step()
    assert plain.steps == 1 and plain.collectives == 0
    plain.remove()
    with pytest.raises(TypeError, match="must be a torch.nn.Module"):
        st.install_hooks(ck, model=object())


def test_stateful_objects_and_numpy_values(tmp_path):
    model = Net(1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train(model, opt, 2)
    np.random.seed(12)
    rng = np.random.get_state()
    arr = np.arange(12, dtype=np.float64).reshape(3, 4)
    ck = open_ck(tmp_path, "stateful")
    st.save_state_dict(ck, {"model": model, "optim": opt, "rng": rng,
                            "arr": arr, "lr": np.float32(0.5),
                            "n": np.int64(7), "flag": np.bool_(True)},
                       1).wait()
    fresh, fresh_opt = Net(2), None
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1.0)
    into = np.zeros((3, 4))
    dest = {"model": fresh, "optim": fresh_opt, "rng": None, "arr": into,
            "lr": None, "n": None, "flag": None}
    assert st.load_state_dict(ck, dest).mismatched_keys == []
    # The objects themselves were loaded (their load_state_dict ran).
    assert dest["model"] is fresh and dest["optim"] is fresh_opt
    for a, b in zip(model.state_dict().values(),
                    fresh.state_dict().values()):
        assert torch.equal(bits(a), bits(b))
    assert fresh_opt.param_groups[0]["lr"] == 1e-3
    assert same_bits(fresh_opt.state_dict()["state"], opt.state_dict()["state"])
    # numpy values come back as numpy, in place where the array was given.
    assert dest["arr"] is into and np.array_equal(into, arr)
    got = dest["rng"]
    assert got[0] == "MT19937" and isinstance(got[1], np.ndarray)
    assert got[1].dtype == np.uint32 and np.array_equal(got[1], rng[1])
    assert tuple(got[2:]) == tuple(rng[2:])
    np.random.set_state(got)
    np.random.seed(12)
    a = np.random.rand(3)
    np.random.set_state(got)
    assert np.array_equal(np.random.rand(3), a)
    assert type(dest["lr"]) is np.float32 and dest["lr"] == np.float32(0.5)
    assert type(dest["n"]) is np.int64 and dest["n"] == 7
    assert type(dest["flag"]) is np.bool_ and dest["flag"]
    # A missing key under a Stateful names the path.
    with pytest.raises(st.StateDictMismatch, match="missing"):
        st.load_state_dict(ck, {"model": torch.nn.Linear(2, 2)})
    with pytest.raises(TypeError, match="'bad' is a numpy str_"):
        st.save_state_dict(ck, {"bad": np.str_("x")}, 2)


def test_async_save_returns_a_future(tmp_path):
    ck = open_ck(tmp_path, "future")
    done = []
    f = st.async_save(ck, {"w": torch.ones(1000)}, 1)
    f.add_done_callback(lambda fut: done.append(fut.result()["bytes_raw"]))
    stats = f.result(timeout=60)
    assert f.done() and stats["bytes_raw"] > 4000  # the tensor and metadata
    deadline = time.monotonic() + 10
    while not done and time.monotonic() < deadline:
        time.sleep(0.01)
    assert done == [stats["bytes_raw"]]
    assert f.handle.done()
    # A step this Checkpointer committed is refused at the call, before
    # anything is shipped.
    st.save_state_dict(ck, {"w": torch.zeros(3)}, 2).wait()
    with pytest.raises(stagger.Error, match="already has step 2 of rank 0"):
        st.async_save(ck, {"w": torch.ones(3)}, 2)
    # One that fails on the way raises from result(): another Checkpointer
    # of the same job and rank commits step 3 first (this one listed the
    # job's steps at its first save), so this commit is refused.
    other = open_ck(tmp_path, "future")
    st.save_state_dict(other, {"w": torch.zeros(3)}, 3).wait()
    bad = st.async_save(ck, {"w": torch.ones(3)}, 3)
    with pytest.raises(stagger.Error) as e:
        bad.result(timeout=60)
    assert e.value.code == "ABORTED"


def read_safetensors(path):
    """{name: torch tensor} of a safetensors file, and its metadata."""
    dtypes = {"F32": torch.float32, "BF16": torch.bfloat16,
              "I64": torch.int64, "F64": torch.float64, "U8": torch.uint8}
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        buf = bytearray(data[begin:end])
        t = torch.frombuffer(buf, dtype=torch.uint8) if buf else \
            torch.empty(0, dtype=torch.uint8)
        out[name] = t.view(dtypes[e["dtype"]]).reshape(e["shape"])
    return out, header.get("__metadata__", {})


def test_consolidate_only_model_loads_into_a_module(tmp_path, server):
    cli = [os.path.join(bin_dir(), "stagger"), "--server", server]
    model = Net(1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train(model, opt, 2)
    # Two data-parallel ranks: model and optimizer replicated (rank 0
    # stores them), the optimizer's 0-dim steps per-rank and equal.
    for r in range(2):
        ck = stagger.Checkpointer(servers=server, job="cons", rank=r,
                                  world_size=2, chunk_size=4096)
        st.save_state_dict(ck, {"model": model.state_dict(),
                                "optim": opt.state_dict(), "epoch": 1}, 3,
                           replicated=["model", "optim"]).wait()
    out = tmp_path / "out"
    r = subprocess.run(cli + ["restore", "--job", "cons", "--out", str(out),
                              "--consolidate", "--only", "model"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    tensors, meta = read_safetensors(out / "model.safetensors")
    assert sorted(tensors) == sorted(model.state_dict())
    assert meta["only"] == "model"
    fresh = Net(2)
    fresh.load_state_dict(tensors)  # strict: names and shapes match
    for a, b in zip(model.state_dict().values(),
                    fresh.state_dict().values()):
        assert torch.equal(bits(a), bits(b))
    # The optimizer's per-rank steps agree across ranks: consolidated once.
    r = subprocess.run(cli + ["restore", "--job", "cons", "--out",
                              str(tmp_path / "o2"), "--consolidate",
                              "--only", "optim"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    optim, _ = read_safetensors(tmp_path / "o2" / "model.safetensors")
    assert "state.0.step" in optim and "state.0.exp_avg" in optim
    # The whole step, without --only: stagger.torch's per-rank metadata
    # (rank 1 stores no replicated tensor, so its description differs)
    # stays out of the file.
    r = subprocess.run(cli + ["restore", "--job", "cons", "--out",
                              str(tmp_path / "all"), "--consolidate"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    everything, _ = read_safetensors(tmp_path / "all" / "model.safetensors")
    assert not [n for n in everything if n.startswith("__stagger_")]
    assert {"model." + n for n in model.state_dict()} <= set(everything)
    assert "optim.state.0.exp_avg" in everything
    # A prefix with nothing under it names what there is.
    r = subprocess.run(cli + ["restore", "--job", "cons", "--out",
                              str(tmp_path / "o3"), "--consolidate",
                              "--only", "modle"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "--only modle names no tensor" in r.stderr
    assert "model, optim" in r.stderr, r.stderr
    r = subprocess.run(cli + ["restore", "--job", "cons", "--out",
                              str(tmp_path / "o4"), "--only", "model"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "needs --consolidate" in r.stderr
    for step in ("five", "-1"):
        r = subprocess.run(cli + ["restore", "--job", "cons", "--out",
                                  str(tmp_path / "o5"), "--step", step],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2, r.stderr
        assert f"step must be 'latest' or a number >= 0, got '{step}'" in \
            r.stderr


def test_consolidate_refuses_per_rank_tensors_that_differ(tmp_path, server):
    for r in range(2):
        ck = stagger.Checkpointer(servers=server, job="diff", rank=r,
                                  world_size=2)
        st.save_state_dict(ck, {"model": {"w": torch.full((3,), float(r))}},
                           1).wait()
    r = subprocess.run([os.path.join(bin_dir(), "stagger"), "--server",
                        server, "restore", "--job", "diff", "--out",
                        str(tmp_path / "out"), "--consolidate"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "'model.w' is per-rank" in r.stderr, r.stderr
    assert "rank 1 saved other values" in r.stderr, r.stderr
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_the_binding_names_torch_tensors_it_cannot_take(tmp_path):
    """torch's own errors (a parameter, a dtype DLPack lacks) come back as
    stagger.Error naming the tensor and what to pass instead; through
    stagger.torch the same values save."""
    ck = open_ck(tmp_path, "binding")
    p = torch.nn.Parameter(torch.ones(4))
    with pytest.raises(stagger.Error) as e:
        ck.save({"p": p}, step=1)
    assert e.value.code == "INVALID_ARGUMENT"
    assert "tensor 'p' (a Parameter) cannot be used" in str(e.value)
    assert "pass p.detach()" in str(e.value)
    ck.save({"p": p.detach()}, step=1).wait()
    flags = torch.tensor([True, False, True])
    try:
        ck.save({"b": flags}, step=2).wait()  # where DLPack has bool
    except stagger.Error as err:
        assert err.code == "INVALID_ARGUMENT"
        assert "tensor 'b' (a Tensor) cannot be used" in str(err)
    st.save_state_dict(ck, {"p": p, "b": flags}, 3).wait()
    # A sparse tensor: named, with what to save instead.
    with pytest.raises(TypeError,
                       match=r"'s' is a torch.sparse_coo tensor, which "
                             r"cannot be stored: save t.to_dense\(\)"):
        st.save_state_dict(ck, {"s": torch.eye(3).to_sparse()}, 4)
    back = {"p": torch.zeros(4), "b": torch.zeros(3, dtype=torch.bool)}
    st.load_state_dict(ck, back, step=3)
    assert torch.equal(back["p"], p.detach())
    assert torch.equal(back["b"], flags)


def test_prepare_state_dict_spares_the_first_save_its_page_faults(tmp_path):
    """The staging memory is mapped and faulted in by prepare_state_dict at
    set-up (now, or in the background), not inside the first save's stall:
    measured as the memory that becomes resident during save_state_dict
    (a new pool's pages are faulted by the copy threads, not the calling
    one). The Checkpointers stay open so that none takes another's pool."""
    import time
    sd = {"model": {"w": torch.randn(16 << 20)}, "epoch": 3}  # 64 MiB
    size = 64 << 20
    page = os.sysconf("SC_PAGESIZE")

    def resident():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * page

    open_cks = []

    def first_save_growth(how, job):
        # A chunk size of its own: no pool parked by an earlier test of
        # this process (spare pools go to the same chunk size) is taken.
        ck = stagger.Checkpointer(servers=f"embedded:{tmp_path}", job=job,
                                  snapshot_overlap="off", chunk_size=2 << 20)
        open_cks.append(ck)
        if how == "now":
            st.prepare_state_dict(ck, sd)
        elif how == "background":
            st.prepare_state_dict(ck, sd, background=True)
            deadline = time.monotonic() + 30
            while (ck.metrics()["staging_prefaulted_bytes"] < size
                   and time.monotonic() < deadline):
                time.sleep(0.01)
            assert ck.metrics()["staging_prefaulted_bytes"] >= size
        before = resident()
        h = st.save_state_dict(ck, sd, 1)
        grew = resident() - before
        h.wait()
        assert h.stats()["staging_limited"] is False
        back = {"model": {"w": torch.zeros(16 << 20)}, "epoch": 0}
        st.load_state_dict(ck, back)
        assert torch.equal(back["model"]["w"], sd["model"]["w"])
        return grew

    unprepared = first_save_growth(None, "cold")
    prepared = first_save_growth("now", "warm")
    background = first_save_growth("background", "bg")
    assert unprepared >= size * 3 // 4, (unprepared, size)
    assert prepared < size // 4, (prepared, size)
    assert background < size // 4, (background, size)
    with pytest.raises(TypeError):
        st.prepare_state_dict(stagger.Checkpointer(
            servers=f"embedded:{tmp_path}", job="bad"), [1, 2])
