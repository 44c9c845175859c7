#!/usr/bin/env python3
"""PyTorch DCP and stagger side by side, on the same state dicts and disk.

Run with the python of bench/peers/setup_venv.sh (torch 2.x from PyPI):

  PY=$(bench/peers/setup_venv.sh | tail -1)
  $PY bench/peers/dcp.py [--gib 1] [--layout gpt,large] [--dir /tmp]

For each layout (``gpt``: a GPT-like model's fp32 weights with AdamW's two
moments, hundreds of tensors from a few KiB to tens of MiB; ``large``: four
large tensors), one process does, on one disk:

  floor      copy of every tensor into preallocated memory (torch copy_,
             all threads): what any snapshot must at least cost
  DCP        step 1 ``dcp.save``; a training-like update; step 2
             ``dcp.async_save`` (blocking time = the call, durable = the
             future's result); bytes of step 2's directory (du: its
             peak too, since DCP writes it once);
             ``dcp.load`` of step 2 into preallocated tensors
  stagger    a stagger-server process on its own data directory, default
             options; step 1 eager ``save_state_dict``; the same update;
             step 2 eager (blocking time, durable), step 3 lazy (the call
             plus ``before_update()`` at once), step 4 lazy with a training
             step of --step-s between the call and ``before_update()`` (a
             sleep: a GPU's forward and backward leave the CPU free; the
             visible stall is the call plus the wait in
             ``before_update()``); bytes steps 2 and 3 added to the
             server's data directory, per step (du, the server stopped so
             reservations are given back), at peak (du every 50 ms until
             it settled: step 3, the server running since before step 2,
             and step 2, the first after a restart) and written by the
             server's process for them (/proc/PID/io, its rebases and
             compaction included); ``load_state_dict`` of step
             4 into preallocated
             tensors, from a fresh Checkpointer. Before the server is
             stopped (to measure, or to drop its caches before the load)
             its data directory is left to settle: the server rebases
             deltas (the newest version whole) and compacts behind the
             saves, as it would between a save and a restore after a
             failure

The loads run in turn, DCP's then stagger's, --load-reps times (3), and
the medians (load_x_dcp) and the fastest of each (load_best_x_dcp) are
compared: the disk of a shared machine reads the same gigabyte in 0.7 s
or 2 s from one run to the next, and DCP's load of a few large tensors
was seen to take 4-7 s in some turns and 1.1-1.4 s in others. The page cache is
dropped before each load (/proc/sys/vm/drop_caches; the output says when
that is not allowed); the stagger-server is restarted after the drop.
Then a second stagger-server with a memory tier (--memory-bytes) takes a
save with durability "memory", and stagger loads it --load-reps times
into fresh tensors and --load-reps times into tensors already in memory
(the server holds the step in RAM; fresh tensors' pages are faulted in by
the load, which on a VM can cost more than the copy). The machine's ceilings are
measured in the same run (build/bin/bench_ceilings: disk write and read,
O_DIRECT; UCX loopback), beside the copy floor. Prints a table per
layout, the loads' times in turn, the ceilings, and

  RESULT peers layout=L eager_x_async=... eager_x_floor=... lazy_x_async=...
         dcp_durable_x_stagger=... dcp_bytes_x_stagger=... peak_x_raw=...
         restart_peak_x_raw=... write_amp=... load_x_dcp=...
         load_best_x_dcp=... memory_load_x_floor=... memory_fresh_x_floor=...
         load_x_disk_read=...
         ratio=eager_x_async

(peak_x_raw: stagger's peak growth for a step over the state's bytes,
the server running since the step before; restart_peak_x_raw: the same
for the first step after the server restarted;
write_amp: the bytes its server wrote per step over the state's bytes;
memory_load_x_floor: the memory-tier load's bandwidth into resident
tensors over the copy floor's, which copies into resident memory too;
memory_fresh_x_floor: the same into fresh tensors;
load_x_disk_read: the cold load's over the disk's read ceiling)

ratios the targets of docs/benchmarks.md are stated in. Exits 2 when torch 2.x
or DCP is missing.
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
from cold_tier_bench import drop_caches  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

try:
    import torch
    import torch.distributed.checkpoint as dcp
except ImportError as e:
    print(f"dcp.py: torch 2.x with DCP is needed ({e}); peer skipped")
    sys.exit(2)
if int(torch.__version__.split(".")[0]) < 2:
    print(f"dcp.py: torch {torch.__version__} is too old for DCP; skipped")
    sys.exit(2)


def gpt_state(total_bytes, dim=768, vocab=16000):
    """A GPT-like model's weights and AdamW moments, about total_bytes."""
    g = torch.Generator().manual_seed(1)
    params = {}

    def add(name, *shape):
        params[name] = torch.randn(*shape, generator=g) * 0.02

    add("wte", vocab, dim)
    add("wpe", 1024, dim)
    per_layer = 12 * dim * dim * 4
    layers = max(1, int((total_bytes / 3 - vocab * dim * 4) // per_layer))
    for i in range(layers):
        p = f"h.{i}."
        add(p + "ln_1.weight", dim)
        add(p + "ln_1.bias", dim)
        add(p + "attn.c_attn.weight", 3 * dim, dim)
        add(p + "attn.c_attn.bias", 3 * dim)
        add(p + "attn.c_proj.weight", dim, dim)
        add(p + "attn.c_proj.bias", dim)
        add(p + "ln_2.weight", dim)
        add(p + "ln_2.bias", dim)
        add(p + "mlp.c_fc.weight", 4 * dim, dim)
        add(p + "mlp.c_fc.bias", 4 * dim)
        add(p + "mlp.c_proj.weight", dim, 4 * dim)
        add(p + "mlp.c_proj.bias", dim)
    add("ln_f.weight", dim)
    add("ln_f.bias", dim)
    # AdamW's moments in mid-training: the steady state of their moving
    # averages for train_step's gradients (N(0, 0.01^2)): exp_avg ~
    # sqrt((1-b1)/(1+b1)) * 0.01 * N(0,1), exp_avg_sq ~ 0.01^2 within
    # sqrt(2 (1-b2)/(1+b2)) of it.
    state = {}
    for i, (name, w) in enumerate(params.items()):
        m = torch.randn(w.shape, generator=g) * (0.229 * 0.01)
        v = (1 + 0.0316 * torch.randn(w.shape, generator=g)) * 1e-4
        state[i] = {"step": torch.tensor(100.0), "exp_avg": m,
                    "exp_avg_sq": v}
    return {"model": params,
            "optim": {"state": state,
                      "param_groups": [{"lr": 3e-4,
                                        "params": list(range(len(params)))}]}}


def large_state(total_bytes):
    g = torch.Generator().manual_seed(2)
    n = max(1, int(total_bytes // 16))
    return {"model": {f"w{i}": torch.randn(n, generator=g) for i in range(4)}}


def tensors(sd):
    out = []

    def walk(v):
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
    walk(sd)
    return out


def empty_like_tree(sd):
    if isinstance(sd, torch.Tensor):
        return torch.empty_like(sd)
    if isinstance(sd, dict):
        return {k: empty_like_tree(v) for k, v in sd.items()}
    if isinstance(sd, list):
        return [empty_like_tree(v) for v in sd]
    return sd


def train_step(sd):
    """An AdamW-like update of every weight and moment, in place."""
    g = torch.Generator().manual_seed(int(time.time()))
    model, optim = sd["model"], sd.get("optim")
    for i, (name, w) in enumerate(model.items()):
        grad = torch.randn(w.shape, generator=g) * 0.01
        if optim is not None:
            st = optim["state"][i]
            st["exp_avg"].mul_(0.9).add_(grad, alpha=0.1)
            st["exp_avg_sq"].mul_(0.999).addcmul_(grad, grad, value=0.001)
            st["step"].add_(1)
            w.sub_(3e-4 * st["exp_avg"] / (st["exp_avg_sq"].sqrt() + 1e-8))
        else:
            w.add_(grad, alpha=1e-4)


def du(path):
    n = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                n += os.stat(os.path.join(root, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return n


def settle(path, limit_s=120):
    """Waits until `path` has not changed for a second (at most limit_s):
    the server rebases deltas and compacts what that leaves dead in the
    background, after the save is durable."""
    last, still = du(path), 0
    for _ in range(int(limit_s * 10)):
        if still >= 10:
            return
        time.sleep(0.1)
        now = du(path)
        still = still + 1 if now == last else 0
        last = now


class Server:
    """A stagger-server on `data`, restartable on the same address."""

    def __init__(self, binary, data, *extra):
        self.binary, self.data, self.listen = binary, data, "127.0.0.1:0"
        self.extra = list(extra)
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            [self.binary, "--data", self.data, "--listen", self.listen,
             *self.extra],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("stagger-server ready grpc="):
            raise RuntimeError(f"stagger-server did not start: {line!r}")
        self.grpc = line.split()[2].split("=", 1)[1]
        self.listen = self.grpc

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=120)


def run_dcp(sd, work, dropped):
    out = {}
    d1, d2 = os.path.join(work, "dcp1"), os.path.join(work, "dcp2")
    t = time.perf_counter()
    dcp.save(sd, checkpoint_id=d1)
    out["save_s"] = time.perf_counter() - t
    train_step(sd)
    t = time.perf_counter()
    future = dcp.async_save(sd, checkpoint_id=d2)
    out["async_block_s"] = time.perf_counter() - t
    future.result()
    out["async_durable_s"] = time.perf_counter() - t
    os.sync()
    out["bytes"] = du(d2)
    out["dir"] = d2
    return out


def dcp_load(sd, d, dropped):
    """dcp.load of step 2 into preallocated tensors, the cache dropped."""
    dest = empty_like_tree(sd)
    dropped.append(drop_caches())
    t = time.perf_counter()
    dcp.load(dest, checkpoint_id=d["dir"])
    s = time.perf_counter() - t
    return s, all(torch.equal(a, b) for a, b in zip(tensors(d["sd2"]),
                                                    tensors(dest)))


def stagger_load(sd, server, dropped):
    """load_state_dict of step 4 from a fresh Checkpointer, the server
    restarted after the cache was dropped."""
    import stagger.torch as st
    dest = empty_like_tree(sd)
    server.stop()
    dropped.append(drop_caches())
    server.start()
    ck = st.checkpointer(server.grpc, job="peers")
    t = time.perf_counter()
    st.load_state_dict(ck, dest, step=4)
    s = time.perf_counter() - t
    del ck
    return s, all(torch.equal(a, b) for a, b in zip(tensors(sd),
                                                    tensors(dest)))


def run_stagger(sd, work, server_bin, dropped, step_s):
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    import stagger.torch as st
    out = {}
    data = os.path.join(work, "stagger-data")
    server = Server(server_bin, data)
    try:
        ck = st.checkpointer(server.grpc, job="peers")
        st.save_state_dict(ck, sd, 1).wait()
        train_step(sd)
        t = time.perf_counter()
        h = st.save_state_dict(ck, sd, 2)
        out["eager_block_s"] = time.perf_counter() - t
        h.wait()
        out["durable_s"] = time.perf_counter() - t
        train_step(sd)
        t = time.perf_counter()
        h3 = st.save_state_dict(ck, sd, 3, lazy=True)
        ck.before_update()
        out["lazy_at_once_s"] = time.perf_counter() - t
        h3.wait()
        # As in training: the save call, the next forward and backward (on
        # a GPU, which leaves the CPU free: a sleep here), then
        # before_update() ahead of the optimizer step. Visible: the call
        # and the wait in before_update().
        train_step(sd)
        t = time.perf_counter()
        h4 = st.save_state_dict(ck, sd, 4, lazy=True)
        call_s = time.perf_counter() - t
        time.sleep(step_s)
        t = time.perf_counter()
        ck.before_update()
        out["lazy_visible_s"] = call_s + time.perf_counter() - t
        h4.wait()
        del ck
        settle(data)
    except BaseException:
        server.stop()
        raise
    out["server"] = server
    return out


def stagger_memory_loads(sd, work, server_bin, reps):
    """Loads of a step the server holds in RAM: a stagger-server with a
    memory tier, a save with durability "memory", then `reps` loads from
    fresh Checkpointers into fresh tensors (whose pages the load faults
    in, as DCP's loads do) and `reps` into tensors already in memory (a
    resumed trainer's initialized model; the copy floor's case). Returns
    the two medians (s) and whether every load was bit exact."""
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    import stagger.torch as st
    nbytes = sum(t.numel() * t.element_size() for t in tensors(sd))
    server = Server(server_bin, os.path.join(work, "stagger-memory"),
                    "--memory-bytes", str(2 * nbytes + (64 << 20)))
    try:
        ck = st.checkpointer(server.grpc, job="memory", durability="memory")
        st.save_state_dict(ck, sd, 1).wait()
        del ck
        resident = empty_like_tree(sd)
        for d, x in zip(tensors(resident), tensors(sd)):
            d.zero_()
        fresh, touched, exact = [], [], True
        for i in range(2 * reps):
            dest = empty_like_tree(sd) if i % 2 == 0 else resident
            ck = st.checkpointer(server.grpc, job="memory")
            t = time.perf_counter()
            st.load_state_dict(ck, dest, step=1)
            (fresh if i % 2 == 0 else touched).append(
                time.perf_counter() - t)
            del ck
            exact = exact and all(torch.equal(a, b) for a, b in
                                  zip(tensors(sd), tensors(dest)))
            if i % 2 == 1:
                for d in tensors(resident):
                    d.zero_()
        return statistics.median(fresh), statistics.median(touched), exact
    finally:
        server.stop()


def written_bytes(pid):
    """Bytes process `pid` wrote to storage (/proc/PID/io write_bytes)."""
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    return 0


def stagger_step_bytes(sd, work, server_bin):
    """Disk bytes a step after the first adds, over steps 2 and 3: settled
    (du, the server stopped so that its reservations are given back, after
    step 1 and after step 3; the same Checkpointer goes on against the
    restarted server, so it keeps its delta bases), at peak (du every 50 ms
    from the save to the settled directory, the server running: for step 3
    over the directory before it, the server running since before step 2,
    as a user's runs; and for step 2, the first after a restart), and the
    bytes the server wrote for both (/proc/PID/io). Returns per-step
    averages: (settled, peak step 3, peak step 2, written)."""
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    import threading
    import stagger.torch as st
    data = os.path.join(work, "stagger-bytes")
    server = Server(server_bin, data)

    def save_sampled(ck, step):
        """Saves `step` once the state trained; its peak over du before."""
        train_step(sd)
        before = du(data)
        peak, done = [before], threading.Event()

        def sample():
            while not done.wait(0.05):
                peak[0] = max(peak[0], du(data))

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            st.save_state_dict(ck, sd, step).wait()
            settle(data)
        finally:
            done.set()
            sampler.join()
        return peak[0] - before

    try:
        ck = st.checkpointer(server.grpc, job="bytes")
        st.save_state_dict(ck, sd, 1).wait()
        settle(data)
        server.stop()
        first = du(data)
        server.start()
        peak_after_restart = save_sampled(ck, 2)
        peak = save_sampled(ck, 3)
        written = written_bytes(server.proc.pid)
        server.stop()
        return ((du(data) - first) / 2, peak, peak_after_restart,
                written / 2)
    finally:
        if server.proc.poll() is None:
            server.stop()


def ceilings(work, nbytes):
    """The disk's write and read ceilings and the UCX loopback's, as
    bench_ceilings measures them (GB/s), or None where it is not built."""
    exe = os.path.join(ROOT, "build", "bin", "bench_ceilings")
    if not os.path.exists(exe):
        return None
    r = subprocess.run([exe, "--dir", work, "--size", str(nbytes),
                        "--iterations", "1"], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT ceilings "):
            kv = dict(f.split("=", 1) for f in line.split()[2:])
            return {k: float(v) for k, v in kv.items()}
    print(f"dcp.py: bench_ceilings failed: {r.stdout}{r.stderr}")
    return None


def floor_copy(sd):
    torch.set_num_threads(os.cpu_count() or 1)
    src = tensors(sd)
    dst = [torch.empty_like(t) for t in src]
    for d, s in zip(dst, src):  # fault the pages in first
        d.copy_(s)
    t = time.perf_counter()
    for d, s in zip(dst, src):
        d.copy_(s)
    return time.perf_counter() - t


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--layout", default="gpt,large")
    p.add_argument("--dir", default="/tmp")
    p.add_argument("--step-s", type=float, default=0.25,
                   help="the training step between a lazy save and "
                        "before_update() (a sleep: GPU compute)")
    p.add_argument("--gpt-dim", type=int, default=768,
                   help="the gpt layout's width: 768 gives 496 tensors for "
                        "1 GiB, 576 gives 976")
    p.add_argument("--load-reps", type=int, default=3,
                   help="cold loads of each, in turn; medians compared")
    p.add_argument("--server-bin",
                   default=os.path.join(ROOT, "build", "bin",
                                        "stagger-server"))
    a = p.parse_args()
    total = int(a.gib * (1 << 30))
    print(f"dcp.py: torch {torch.__version__}, {a.gib} GiB per layout, "
          f"{os.cpu_count()} cores, disk under {a.dir}")
    for layout in a.layout.split(","):
        sd = (gpt_state(total, dim=a.gpt_dim) if layout == "gpt"
              else large_state(total))
        ts = tensors(sd)
        nbytes = sum(t.numel() * t.element_size() for t in ts)
        work = tempfile.mkdtemp(prefix=f"stagger-peers-{layout}-",
                                dir=a.dir)
        dropped = []
        try:
            floor = floor_copy(sd)
            ceil = ceilings(work, nbytes)
            d = run_dcp(sd, work, dropped)
            # What DCP's step 2 holds, to check its load against.
            d["sd2"] = [t.clone() for t in tensors(sd)]
            s = run_stagger(sd, work, a.server_bin, dropped, a.step_s)
            try:
                # Cold loads alternate, DCP then stagger, --load-reps
                # times; the medians are compared (the disk of a shared
                # machine varies by 2x from one read to the next).
                loads = [(dcp_load(sd, d, dropped),
                          stagger_load(sd, s["server"], dropped))
                         for _ in range(a.load_reps)]
            finally:
                s["server"].stop()
            d["load_s"] = statistics.median(x[0][0] for x in loads)
            s["load_s"] = statistics.median(x[1][0] for x in loads)
            d["load_best_s"] = min(x[0][0] for x in loads)
            s["load_best_s"] = min(x[1][0] for x in loads)
            d["bit_exact"] = all(x[0][1] for x in loads)
            s["bit_exact"] = all(x[1][1] for x in loads)
            (s["memory_load_fresh_s"], s["memory_load_s"],
             s["memory_exact"]) = stagger_memory_loads(
                sd, work, a.server_bin, a.load_reps)
            load_runs = " ".join(f"{x[0][0]:.3f}/{x[1][0]:.3f}" for x in loads)
            (step_bytes, step_peak, restart_peak,
             step_written) = stagger_step_bytes(sd, work, a.server_bin)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(f"\nlayout {layout}: {len(ts)} tensors, {nbytes / 2**20:.1f} "
              f"MiB; page cache dropped before loads: {all(dropped)}")
        rows = [("blocking time of a save (s)", d["async_block_s"],
                 s["eager_block_s"]),
                ("lazy: call + before_update() at once (s)", None,
                 s["lazy_at_once_s"]),
                (f"lazy: call + before_update() after a {a.step_s:g} s "
                 "step (s)", None, s["lazy_visible_s"]),
                ("save call to durable (s)", d["async_durable_s"],
                 s["durable_s"]),
                ("dcp.save, step 1 (s)", d["save_s"], None),
                ("bytes stored for a step after the first (MiB)",
                 d["bytes"] / 2**20, step_bytes / 2**20),
                ("  at peak, before the server settled (MiB)",
                 d["bytes"] / 2**20, step_peak / 2**20),
                ("  at peak, the first step after a restart (MiB)",
                 d["bytes"] / 2**20, restart_peak / 2**20),
                ("  written by the server for it (MiB)", None,
                 step_written / 2**20),
                (f"load of the last step, median of {a.load_reps} (s)",
                 d["load_s"], s["load_s"]),
                ("load of the last step, fastest (s)", d["load_best_s"],
                 s["load_best_s"]),
                ("load from the servers' RAM into fresh tensors (s)",
                 None, s["memory_load_fresh_s"]),
                ("load from the servers' RAM into resident ones (s)",
                 None, s["memory_load_s"]),
                ("bit exact", d["bit_exact"],
                 s["bit_exact"] and s["memory_exact"])]
        print(f"{'figure':<48} {'DCP':>10} {'stagger':>10}")
        for name, x, y in rows:
            fx = "-" if x is None else (f"{x:.3f}" if isinstance(x, float)
                                        else str(x))
            fy = "-" if y is None else (f"{y:.3f}" if isinstance(y, float)
                                        else str(y))
            print(f"{name:<48} {fx:>10} {fy:>10}")
        print(f"{'copy floor, all threads (s)':<48} {floor:>10.3f}")
        if ceil:
            print(f"ceilings (GB/s): disk write {ceil['disk_write_GBps']:.2f}, "
                  f"disk read {ceil['disk_read_GBps']:.2f}, UCX loopback "
                  f"{ceil['link_GBps']:.2f}, memcpy floor "
                  f"{nbytes / floor / 1e9:.2f}; stagger's cold load "
                  f"{nbytes / s['load_s'] / 1e9:.2f}, from RAM "
                  f"{nbytes / s['memory_load_s'] / 1e9:.2f}")
        print(f"cold loads in turn, DCP/stagger (s): {load_runs}")
        r = {"eager_x_async": s["eager_block_s"] / d["async_block_s"],
             "eager_x_floor": s["eager_block_s"] / floor,
             "lazy_x_async": s["lazy_visible_s"] / d["async_block_s"],
             "dcp_durable_x_stagger": d["async_durable_s"] / s["durable_s"],
             "dcp_bytes_x_stagger": d["bytes"] / max(1, step_bytes),
             "peak_x_raw": step_peak / nbytes,
             "restart_peak_x_raw": restart_peak / nbytes,
             "write_amp": step_written / nbytes,
             "load_x_dcp": s["load_s"] / d["load_s"],
             "load_best_x_dcp": s["load_best_s"] / d["load_best_s"],
             # Shares of a ceiling's bandwidth (1 = at the ceiling).
             "memory_load_x_floor": floor / s["memory_load_s"],
             "memory_fresh_x_floor": floor / s["memory_load_fresh_s"]}
        if ceil:
            r["load_x_disk_read"] = (nbytes / s["load_s"] / 1e9
                                     / ceil["disk_read_GBps"])
        print("RESULT peers layout=" + layout + " "
              + " ".join(f"{k}={v:.4g}" for k, v in r.items())
              + f" ratio={r['eager_x_async']:.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
