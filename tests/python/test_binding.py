import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

import stagger
from conftest import bin_dir, start_server


def state(seed, n=300_000):
    rng = np.random.default_rng(seed)
    return {
        "w": (rng.standard_normal(n) * 0.02).astype(np.float32),
        "emb": rng.integers(0, 1 << 15, size=(100, 64), dtype=np.int64),
        "mask": rng.integers(0, 2, size=1000).astype(np.bool_),
        "h": rng.standard_normal(777).astype(np.float16),
    }


def empty_like(d):
    return {k: np.zeros_like(v) for k, v in d.items()}


def test_embedded_round_trip_and_steps(tmp_path):
    ck = stagger.Checkpointer(servers=f"embedded:{tmp_path}", job="py",
                              rank=0, world_size=1, chunk_size=65536)
    s1, s2 = state(1), state(2)
    h = ck.save(s1, step=1)
    h.wait()
    assert h.done()
    stats = h.stats()
    assert stats["bytes_raw"] == sum(v.nbytes for v in s1.values())
    assert stats["chunks"] == 19 + 1 + 1 + 1
    assert 0 < stats["bytes_shipped"] <= stats["bytes_raw"]
    # At most 2 x max_inflight_chunks (default 16) ahead of the acks.
    assert 1 <= stats["peak_chunks_shipping"] <= 32
    ck.save(s2, step=5).wait()
    assert ck.steps() == [1, 5]

    out = empty_like(s1)
    assert ck.load(out, step="latest") == 5
    for k in s2:
        np.testing.assert_array_equal(out[k], s2[k])
    assert ck.load(out, step=1) == 1
    for k in s1:
        np.testing.assert_array_equal(out[k], s1[k])


def test_real_server_two_ranks(server):
    cks = [stagger.Checkpointer(servers=server, job="two", rank=r,
                                world_size=2) for r in range(2)]
    states = [state(10 + r) for r in range(2)]
    cks[0].save(states[0], step=3).wait()
    assert cks[0].steps() == []  # rank 1 has not committed
    assert cks[0].steps(include_partial=True) == [3]
    cks[1].save(states[1], step=3).wait()
    assert cks[1].steps() == [3]
    for r in range(2):
        out = empty_like(states[r])
        assert cks[r].load(out) == 3
        for k in out:
            np.testing.assert_array_equal(out[k], states[r][k])


def test_replicas_survive_a_killed_server(tmp_path):
    procs = [start_server(tmp_path / name) for name in ("a", "b")]
    servers = ",".join(grpc for _, grpc in procs)
    try:
        with pytest.raises(stagger.Error) as e:
            stagger.Checkpointer(servers=servers, job="r", replicas=3)
        assert e.value.code == "INVALID_ARGUMENT"
        assert "replicas 3 exceeds the 2 server(s)" in str(e.value)
        ck = stagger.Checkpointer(servers=servers, job="r", replicas=2,
                                  chunk_size=64 << 10)
        s = state(21)
        ck.save(s, step=1).wait()
        procs[0][0].kill()
        procs[0][0].wait()
        # Every chunk has a copy on the server left.
        fresh = stagger.Checkpointer(servers=servers, job="r", replicas=2,
                                     chunk_size=64 << 10)
        assert fresh.metrics()["servers_down"] == 1
        out = empty_like(s)
        assert fresh.load(out) == 1
        for k in out:
            np.testing.assert_array_equal(out[k], s[k])
        with pytest.raises(stagger.Error) as e:
            fresh.save(s, step=2)
        assert e.value.code == "UNAVAILABLE"
        assert procs[0][1] in str(e.value)
    finally:
        for p, _ in procs:
            p.kill()
            p.wait()


def test_tokens_from_python_and_the_cli(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("alpha-token-0123456789 ja\n")
    proc, grpc = start_server(tmp_path / "data", "--auth-tokens", str(tokens))
    try:
        with pytest.raises(stagger.Error) as e:
            stagger.Checkpointer(servers=grpc, job="ja")
        assert e.value.code == "UNAUTHENTICATED"
        ck = stagger.Checkpointer(servers=grpc, job="ja",
                                  token="alpha-token-0123456789")
        ck.save(state(5), step=4).wait()
        cli = [os.path.join(bin_dir(), "stagger"), "--server", grpc]
        ls = subprocess.run(cli + ["ls", "--job", "ja"], capture_output=True,
                            text=True)
        assert ls.returncode != 0 and "UNAUTHENTICATED" in ls.stderr
        env = dict(os.environ, STAGGER_TOKEN="alpha-token-0123456789")
        ls = subprocess.run(cli + ["ls", "--job", "ja"], capture_output=True,
                            text=True, env=env)
        assert ls.returncode == 0, ls.stderr
        rows = [line.split() for line in ls.stdout.splitlines()[1:]]
        assert [r[:2] for r in rows] == [["4", "complete"]], ls.stdout
        other = subprocess.run(cli + ["--token", "alpha-token-0123456789",
                                      "ls", "--job", "jb"],
                               capture_output=True, text=True)
        assert other.returncode != 0 and "PERMISSION_DENIED" in other.stderr
    finally:
        proc.kill()
        proc.wait()


def test_errors_carry_status_codes(tmp_path):
    ck = stagger.Checkpointer(servers=f"embedded:{tmp_path}", job="e")
    with pytest.raises(stagger.Error) as e:
        ck.load({"w": np.zeros(4, np.float32)}, step=7)
    assert e.value.code == "NOT_FOUND"

    ck.save({"w": np.ones(4, np.float32)}, step=1).wait()
    with pytest.raises(stagger.Error) as e:
        ck.load({"missing": np.zeros(4, np.float32)})
    assert e.value.code == "NOT_FOUND"
    assert "tensor 'missing'" in str(e.value)
    with pytest.raises(stagger.Error) as e:
        ck.load({"w": np.zeros(5, np.float32)})
    assert e.value.code == "INVALID_ARGUMENT"
    assert "tensor 'w' was saved by rank 0 as F32[4]" in str(e.value)

    with pytest.raises(stagger.Error) as e:
        stagger.Checkpointer(servers=f"embedded:{tmp_path}", job="bad job")
    assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(stagger.Error) as e:
        stagger.Checkpointer(servers=f"embedded:{tmp_path}", job="j", rank=1,
                             world_size=1)
    assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(stagger.Error) as e:
        stagger.Checkpointer(servers=f"embedded:{tmp_path}", job="j",
                             world_size=0)
    assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(stagger.Error) as e:
        ck.save({"x/y": np.ones(2)}, step=2)
    assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(stagger.Error) as e:
        ck.save({"w": np.ones((4, 4))[:, ::2]}, step=2)
    assert "not C-contiguous" in str(e.value)
    with pytest.raises(stagger.Error) as e:
        ck.load({"w": np.zeros(4, np.float32)}, step=-2)
    assert e.value.code == "INVALID_ARGUMENT"


def test_dtype_override_for_bf16(tmp_path):
    ck = stagger.Checkpointer(servers=f"embedded:{tmp_path}", job="bf")
    bits = np.arange(1000, dtype=np.uint16)  # bf16 bit patterns
    ck.save({"w": bits}, step=1, dtypes={"w": "BF16"}).wait()
    out = np.zeros_like(bits)
    assert ck.load({"w": out}, dtypes={"w": "BF16"}) == 1
    np.testing.assert_array_equal(out, bits)
    # Saved as BF16, so loading it as U16 names the mismatch.
    with pytest.raises(stagger.Error) as e:
        ck.load({"w": out})
    assert e.value.code == "INVALID_ARGUMENT"
    assert "saved by rank 0 as BF16[1000]" in str(e.value)
    # A dtype whose element size differs from the array's is refused.
    with pytest.raises(stagger.Error) as e:
        ck.save({"w": np.zeros(4, np.float32)}, step=2, dtypes={"w": "BF16"})
    assert e.value.code == "INVALID_ARGUMENT"
    assert "2-byte elements" in str(e.value)
    with pytest.raises(stagger.Error) as e:
        ck.save({"w": bits}, step=2, dtypes={"w": "F8"})
    assert "unknown dtype 'F8'" in str(e.value)


def test_unreachable_server_is_unavailable():
    with pytest.raises(stagger.Error) as e:
        # Port 1 on loopback: nothing listens there.
        stagger.Checkpointer(servers="127.0.0.1:1", job="j")
    assert e.value.code == "UNAVAILABLE"
    assert "127.0.0.1:1" in str(e.value)


def test_async_and_lazy_saves_capture_the_snapshot(tmp_path):
    ck = stagger.Checkpointer(servers=f"embedded:{tmp_path}", job="lazy",
                              chunk_size=1 << 20)
    w = np.arange(3_000_000, dtype=np.float32)
    before = w.copy()
    h = ck.save({"w": w}, step=1)
    w[:] = -1  # the optimizer step right after save() returns
    h.wait()
    stats = h.stats()
    for key in ("stall_s", "snapshot_s", "durable_s", "bytes_raw",
                "bytes_shipped", "chunks", "staging_bytes",
                "staging_limited"):
        assert key in stats
    assert stats["snapshot_s"] <= stats["durable_s"]
    assert stats["staging_bytes"] > 0

    w[:] = before
    h2 = ck.save({"w": w}, step=2, lazy=True)
    ck.before_update()
    w[:] = 7
    h2.wait()
    out = np.zeros_like(w)
    assert ck.load({"w": out}, step=2) == 2
    np.testing.assert_array_equal(out, before)
    assert ck.load({"w": out}, step=1) == 1
    np.testing.assert_array_equal(out, before)


def test_staging_pool_bounds_memory(tmp_path):
    ck = stagger.Checkpointer(servers=f"embedded:{tmp_path}", job="pool",
                              chunk_size=256 << 10, staging_bytes=1 << 20,
                              snapshot_overlap="off")
    w = np.random.default_rng(0).integers(0, 255, 4 << 20, dtype=np.uint8)
    h = ck.save({"w": w}, step=1)
    h.wait()
    assert h.stats()["staging_limited"] is True
    # 16 chunks, 4 slabs: the last 12 were copied only as earlier ones left.
    assert 12 * (256 << 10) <= h.stats()["bytes_overlapped"] < 4 << 20
    assert h.stats()["staging_bytes"] <= 1 << 20
    out = np.zeros_like(w)
    ck.load({"w": out})
    np.testing.assert_array_equal(out, w)


class DlpackOnly:
    """An array reachable only through DLPack (like a torch CPU tensor)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_dlpack_arrays_save_and_load_without_buffer_protocol(tmp_path):
    ck = stagger.Checkpointer(servers=f"embedded:{tmp_path}", job="dl",
                              chunk_size=65536)
    # numpy exports no bool arrays through DLPack.
    s = {k: v for k, v in state(7).items() if k != "mask"}
    ck.save({k: DlpackOnly(v) for k, v in s.items()}, step=1).wait()
    out = empty_like(s)
    assert ck.load({k: DlpackOnly(v) for k, v in out.items()}) == 1
    for k in s:
        np.testing.assert_array_equal(out[k], s[k])
    # A bf16 override works through DLPack too (same element size).
    raw = np.arange(4096, dtype=np.uint16)
    ck.save({"b": DlpackOnly(raw)}, step=2, dtypes={"b": "BF16"}).wait()
    back = np.zeros_like(raw)
    ck.load({"b": DlpackOnly(back)}, step=2, dtypes={"b": "BF16"})
    np.testing.assert_array_equal(back, raw)


def test_dlpack_rejects_strided_and_unknown_objects(tmp_path):
    ck = stagger.Checkpointer(servers=f"embedded:{tmp_path}", job="dl2")
    strided = np.arange(100, dtype=np.float32)[::2]
    with pytest.raises(stagger.Error, match="not C-contiguous"):
        ck.save({"s": DlpackOnly(strided)}, step=1)
    with pytest.raises(stagger.Error, match="'x' is a plain list"):
        ck.save({"x": [1.0, 2.0]}, step=1)


def test_every_bad_value_is_a_stagger_error_naming_it(tmp_path):
    ck = stagger.Checkpointer(servers=f"embedded:{tmp_path}", job="v")
    for value, kind in [(1.5, "float"), (3, "int"), (True, "bool"),
                        ([1.0], "list"), ((1, 2), "tuple"), ("s", "str")]:
        with pytest.raises(stagger.Error) as e:
            ck.save({"x": value}, step=1)
        assert e.value.code == "INVALID_ARGUMENT"
        assert f"tensor 'x' is a plain {kind}" in str(e.value)
        assert "numpy.asarray" in str(e.value)
    with pytest.raises(stagger.Error) as e:
        ck.save({"x": object()}, step=1)
    assert "tensor 'x' is a object: expected an array" in str(e.value)
    # A load fills arrays in place: a read-only one is refused by name.
    ck.save({"w": np.ones(4, np.float32)}, step=1).wait()
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(stagger.Error) as e:
        ck.load({"w": ro})
    assert e.value.code == "INVALID_ARGUMENT"
    assert "tensor 'w' is read-only" in str(e.value)

    class Refuses:  # what torch does for a tensor that requires grad
        def __dlpack__(self, stream=None):
            raise RuntimeError("Can't export tensors that require gradient, "
                               "use tensor.detach()")

    with pytest.raises(stagger.Error) as e:
        ck.save({"p": Refuses()}, step=2)
    assert e.value.code == "INVALID_ARGUMENT"
    assert "tensor 'p' (a Refuses) cannot be used" in str(e.value)
    assert "pass p.detach()" in str(e.value)


def test_qos_marks_and_stats(tmp_path):
    ck = stagger.Checkpointer(servers=f"embedded:{tmp_path}", job="q",
                              chunk_size=65536, qos_yield="pause",
                              qos_deadline_s=0.3, qos_floor_Bps=0)
    s = state(3)
    ck.iteration_begin()
    with ck.collective():
        h = ck.save(s, step=1)
        # Long enough for chunks to be ready to send: they wait.
        time.sleep(0.1)
        assert not h.done()  # held back while the collective runs
    h.wait()
    st = h.stats()
    # Held back: the encoders wait out the collective (background_cpu
    # "idle"), and any chunk they had ready waits at the sender.
    assert st["cpu_yield_s"] + st["yield_s"] >= 0.09
    assert st["paced_rate_Bps"] > 0
    # Everything went out after the one collective: one idle window (no
    # iteration pattern learned, so that window stays open to the end).
    assert st["windows"] == 1
    assert st["durable_s"] >= 0.25  # spread over the 0.3 s deadline
    # Per save: no deadline for this one.
    h = ck.save(s, step=2, deadline_s=0)
    h.wait()
    assert h.stats()["paced_rate_Bps"] == 0
    out = empty_like(s)
    assert ck.load(out) == 2
    for k in s:
        np.testing.assert_array_equal(out[k], s[k])


def test_bad_qos_option_names_the_option(tmp_path):
    with pytest.raises(stagger.Error, match="qos_yield"):
        stagger.Checkpointer(servers=f"embedded:{tmp_path}", job="q",
                             qos_yield="maybe")
    with pytest.raises(stagger.Error, match="snapshot_overlap 'maybe'"):
        stagger.Checkpointer(servers=f"embedded:{tmp_path}", job="q",
                             snapshot_overlap="maybe")


def test_shards_reshard_two_row_slices_onto_one_rank(tmp_path):
    rng = np.random.default_rng(11)
    full = rng.standard_normal((10, 6)).astype(np.float32)
    for r, (lo, hi) in enumerate([(0, 4), (4, 10)]):
        ck = stagger.Checkpointer(servers=f"embedded:{tmp_path}", job="sh",
                                  rank=r, world_size=2)
        ck.save({"w": np.ascontiguousarray(full[lo:hi])}, step=1,
                shards={"w": ([10, 6], [lo, 0])}).wait()
    one = stagger.Checkpointer(servers=f"embedded:{tmp_path}", job="sh")
    cols = np.zeros((10, 4), np.float32)
    assert one.load({"w": cols}, shards={"w": ((10, 6), (0, 2))}) == 1
    np.testing.assert_array_equal(cols, full[:, 2:])


def test_bad_shards_are_invalid_arguments(tmp_path):
    ck = stagger.Checkpointer(servers=f"embedded:{tmp_path}", job="bad")
    w = np.ones((4, 4), np.float32)
    cases = [
        ({"v": ([4, 4], [0, 0])}, "shards names tensor 'v'"),
        ({"w": ([4, 4], [0, 0], [1])}, "pair (global_shape, global_offset)"),
        ({"w": [4, 4]}, "global_shape must be a list of ints"),
        ({"w": ([4, "x"], [0, 0])}, "global_shape must be a list of ints"),
        ({"w": ([8, 4], [6, 0])}, "tensor 'w': slice [4,4] at offset [6,0]"),
        ({"w": ([8], [0])}, "must have the rank of shape"),
    ]
    for shards, message in cases:
        with pytest.raises(stagger.Error) as e:
            ck.save({"w": w}, step=1, shards=shards)
        assert e.value.code == "INVALID_ARGUMENT"
        assert message in str(e.value)


def test_show_json_matches_the_saves_own_stats(server):
    import json
    import os
    import subprocess

    from conftest import bin_dir

    cks = [stagger.Checkpointer(servers=server, job="shown", rank=r,
                                world_size=2, chunk_size=65536)
           for r in range(2)]
    states = [state(10 + r) for r in range(2)]
    first = [ck.save(s, step=1) for ck, s in zip(cks, states)]
    for h in first:
        h.wait()
    handles = [ck.save(s, step=2) for ck, s in zip(cks, states)]
    for h in handles:
        h.wait()
    out = subprocess.run(
        [os.path.join(bin_dir(), "stagger"), "--server", server, "show",
         "--job", "shown", "--json"],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert shown["job"] == "shown"
    assert shown["step"] == 2
    assert shown["state"] == "complete"
    assert [r["rank"] for r in shown["ranks"]] == [0, 1]
    for row, h in zip(shown["ranks"], handles):
        st = h.stats()
        for key in ("bytes_raw", "bytes_shipped", "chunks",
                    "chunks_unchanged"):
            assert row[key] == st[key], key
        assert row["codec_chunks"] == st["codec_chunks"]
        # Step 2 saved the same bytes again: every chunk a reference.
        assert row["chunks_unchanged"] == row["chunks"]
        assert row["bytes_shipped"] == 0
        assert row["stall_s"] == pytest.approx(st["stall_s"], rel=1e-4)
        assert row["snapshot_s"] == pytest.approx(st["snapshot_s"], rel=1e-4)
        # Stored when the commit was sent, so just below the handle's.
        assert 0 < row["durable_s"] <= st["durable_s"]
        assert row["servers"] == [server]
    one = json.loads(subprocess.run(
        [os.path.join(bin_dir(), "stagger"), "--server", server, "show",
         "--job", "shown", "--step", "1", "--json"],
        capture_output=True, text=True, timeout=120, check=True).stdout)
    for row, h in zip(one["ranks"], first):
        st = h.stats()
        assert row["bytes_shipped"] == st["bytes_shipped"] > 0
        assert row["codec_chunks"] == st["codec_chunks"]
        assert sum(row["codec_chunks"].values()) == row["chunks"]
        # Every shipped chunk has its policy's reason, in the manifest too.
        assert row["codec_reasons"] == st["codec_reasons"]
        assert sum(row["codec_reasons"].values()) == row["chunks"]
        assert row["chunks_no_base"] == st["chunks_no_base"] == 0
        assert row["ratio"] == pytest.approx(
            st["bytes_raw"] / st["bytes_shipped"], rel=1e-4)
    bad = subprocess.run(
        [os.path.join(bin_dir(), "stagger"), "--server", server, "show",
         "--job", "shown", "--step", "7"],
        capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1
    assert "step 7" in bad.stderr or "NOT_FOUND" in bad.stderr, bad.stderr


def test_client_metrics_count_saves_and_loads(server):
    import urllib.request

    ck = stagger.Checkpointer(servers=server, job="counted",
                              chunk_size=65536, metrics_listen="127.0.0.1:0")
    m0 = ck.metrics()
    assert m0["saves"] == 0 and m0["bytes_raw"] == 0
    s = state(30)
    handles = [ck.save(s, step=1), None]
    handles[0].wait()
    # Counted by the time wait() returns, not a moment later.
    assert ck.metrics()["saves"] == 1
    handles[1] = ck.save(s, step=2)
    handles[1].wait()
    ck.wait_all()
    out = empty_like(s)
    assert ck.load(out, step="latest") == 2
    m = ck.metrics()
    stats = [h.stats() for h in handles]
    assert m["saves"] == 2 and m["saves_failed"] == 0
    for key in ("bytes_raw", "bytes_shipped", "chunks", "chunks_unchanged"):
        assert m[key] == sum(st[key] for st in stats), key
    assert m["chunks_unchanged"] == stats[1]["chunks"]  # step 2 = step 1
    assert m["durable_s"] == pytest.approx(
        sum(st["durable_s"] for st in stats), rel=1e-6)
    assert m["last_durable_s"] == pytest.approx(stats[1]["durable_s"])
    assert m["stall_s"] == pytest.approx(
        sum(st["stall_s"] for st in stats), rel=1e-6)
    assert m["loads"] == 1
    assert m["bytes_loaded"] == sum(v.nbytes for v in s.values())

    # The same counters on the page, labelled with job and rank.
    addr = ck.metrics_address()
    assert addr.startswith("127.0.0.1:") and not addr.endswith(":0")
    page = urllib.request.urlopen(f"http://{addr}/metrics",
                                  timeout=10).read().decode()
    labels = '{job="counted",rank="0"}'
    assert f"stagger_client_saves_total{labels} 2\n" in page
    assert (f"stagger_client_raw_bytes_total{labels} {m['bytes_raw']}\n"
            in page)
    assert f"stagger_client_loads_total{labels} 1\n" in page
    assert 'stagger_build_info{component="client",version="' in page
    rss = re.search(r"^process_resident_memory_bytes (\S+)$", page, re.M)
    assert rss and float(rss.group(1)) > 10 << 20  # numpy, the binding
    # No iteration marks: the collective gate has learned nothing.
    assert m["gate_learned"] is False and m["gate_period_s"] == 0
    assert m["gate_models_learned"] == 0 and m["gate_models_dropped"] == 0
    assert f"stagger_client_gate_learned{labels} 0\n" in page
    assert f"stagger_client_gate_models_dropped_total{labels} 0\n" in page
    # Nobody is blocked in save() or wait_all() now.
    assert m["callers_waiting"] == 0
    assert f"stagger_client_callers_waiting{labels} 0\n" in page
    plain = stagger.Checkpointer(servers=server, job="unserved")
    assert plain.metrics_address() == ""
    with pytest.raises(stagger.Error) as e:
        stagger.Checkpointer(servers=server, job="clash",
                             metrics_listen=addr)
    assert e.value.code == "UNAVAILABLE"
    assert "metrics: cannot listen on" in str(e.value)


def test_an_embedded_server_logs_warnings_only_unless_asked(tmp_path):
    script = ("import sys, numpy as np, stagger\n"
              "ck = stagger.Checkpointer(servers='embedded:' + sys.argv[1], "
              "job='quiet')\n"
              "ck.save({'a': np.ones(4, np.float32)}, step=1).wait()\n")
    env = dict(os.environ)
    env.pop("STAGGER_LOG_LEVEL", None)
    quiet = subprocess.run([sys.executable, "-c", script, str(tmp_path / "q")],
                           capture_output=True, text=True, env=env,
                           timeout=120)
    assert quiet.returncode == 0, quiet.stderr
    assert "complete" not in quiet.stderr, quiet.stderr
    env["STAGGER_LOG_LEVEL"] = "info"
    loud = subprocess.run([sys.executable, "-c", script, str(tmp_path / "l")],
                          capture_output=True, text=True, env=env,
                          timeout=120)
    assert loud.returncode == 0, loud.stderr
    assert "job 'quiet' step 1 complete: 1 rank, " in loud.stderr, loud.stderr


def test_memory_durability_through_python(tmp_path):
    # Two servers in two domains, each with a memory tier; two copies.
    procs, addrs = [], []
    for name in ("n0", "n1"):
        p, a = start_server(tmp_path / name, "--domain", name,
                            "--memory-bytes", "32M")
        procs.append(p)
        addrs.append(a)
    try:
        ck = stagger.Checkpointer(servers=",".join(addrs), job="mem",
                                  replicas=2, chunk_size=65536,
                                  durability="memory")
        s1 = state(1)
        ck.save(s1, step=1).wait()
        assert ck.wait_disk(timeout=60) is True
        # A save may ask for disk itself; both load back.
        s2 = state(2)
        ck.save(s2, step=2, durability="disk").wait()
        out = empty_like(s2)
        assert ck.load(out) == 2
        for k in s2:
            np.testing.assert_array_equal(out[k], s2[k])
        ls = subprocess.run(
            [os.path.join(bin_dir(), "stagger"), "--server", ",".join(addrs),
             "ls", "--job", "mem", "--json"],
            capture_output=True, text=True, check=True).stdout
        assert '"level":"disk"}' in ls and '"memory"' not in ls, ls
        with pytest.raises(stagger.Error, match="durability 'ram' unknown"):
            ck.save(s1, step=3, durability="ram")
        with pytest.raises(stagger.Error, match="names a save's"):
            stagger.Checkpointer(servers=",".join(addrs), job="mem",
                                 durability="default")
        del ck
    finally:
        for p in procs:
            p.terminate()
            assert p.wait(timeout=60) == 0
