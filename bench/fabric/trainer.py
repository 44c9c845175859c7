#!/usr/bin/env python3
"""Collective simulator for bench/fabric: one process per trainer node.

Each iteration: a ring all-reduce of --allreduce-mib MiB of float32 over TCP
to the ring neighbours (reduce-scatter then all-gather, numpy adds), then a
compute phase (a sleep, so the CPU stays free), then a small update of the
model state. Every --every iterations the state (--ckpt-mib MiB of float32)
is saved through stagger to --server: lazily by default (save(lazy=True)
after the update, before_update() before the next update, so the snapshot
copies overlap the next all-reduce and compute), or eagerly. Every
iteration and every checkpoint is written as one JSON line to --out, at
the end of the run, so the timed loop does no file I/O: a write inside it
could wait on the disk (in naive and qos modes the storage node writes
checkpoints to the same disk), and the neighbour waiting for this node
would time that wait as a slow all-reduce.

Modes:
  baseline  no checkpoint
  naive     checkpoint, QoS off
  qos       checkpoint, QoS on (deadline pacing, yield to the collectives
            marked with ck.collective(), ck.iteration_begin() each iteration)

  trainer.py --check-qos   exits 0 when the binding has the QoS API; else
                           prints "qos mode unavailable: binding lacks ..."
                           and exits 3.
"""
import argparse
import contextlib
import inspect
import json
import queue
import re
import signal
import socket
import struct
import sys
import threading
import time

import numpy as np

MiB = 1 << 20
# Elements between two updated elements of the state: every 256 KiB of
# float32 changes each iteration, so every chunk (>= 256 KiB) differs from
# its previous version and ships whole.
UPDATE_STRIDE = 64 * 1024

QOS_KWARGS = ("qos_deadline_s", "qos_yield", "ranks_per_node",
              "rate_limit_Bps")
QOS_METHODS = ("collective", "iteration_begin")


def import_stagger():
    try:
        import stagger  # noqa: PLC0415 (optional until a checkpoint mode)
    except ImportError as e:
        sys.exit(f"trainer.py: cannot import stagger ({e}); set PYTHONPATH "
                 "to build/python")
    return stagger


def qos_missing(stagger):
    """Names of the QoS API the binding lacks (empty when it has all)."""
    cls = stagger.Checkpointer
    missing = [m for m in QOS_METHODS if not hasattr(cls, m)]
    # stagger.Checkpointer is a Python subclass whose __init__ passes
    # *args, **kwargs on: the keywords are those of the first class up the
    # MRO that names its own (the pybind11 class, whose signature is its
    # doc).
    names = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:  # a Python signature
            params = inspect.signature(init).parameters
            if any(p.kind == p.VAR_KEYWORD for p in params.values()):
                continue
            names = set(params)
        except (TypeError, ValueError):  # pybind11: the signature is the doc
            doc = getattr(init, "__doc__", "") or ""
            names = set(re.findall(r"\b(\w+):", doc))
        break
    missing += [k for k in QOS_KWARGS if k not in names]
    return missing


class Ring:
    """TCP links to the ring neighbours: send to rank+1, receive from
    rank-1. A helper thread sends while the caller receives."""

    def __init__(self, rank, addrs, port, timeout_s):
        n = len(addrs)
        self.rank, self.n = rank, n
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((addrs[rank], port))
        listener.listen(1)
        right = addrs[(rank + 1) % n]
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.tx = socket.create_connection((right, port), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        listener.settimeout(timeout_s)
        self.rx, _ = listener.accept()
        listener.close()
        for s in (self.tx, self.rx):
            s.settimeout(None)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._todo = queue.Queue()
        self._done = queue.Queue()
        threading.Thread(target=self._sender, daemon=True).start()

    def _sender(self):
        while True:
            buf = self._todo.get()
            try:
                self.tx.sendall(buf)
                self._done.put(None)
            except OSError as e:
                self._done.put(e)

    def exchange(self, send_arr, recv_arr):
        """Sends send_arr to the right while filling recv_arr from the
        left."""
        self._todo.put(memoryview(send_arr).cast("B"))
        view = memoryview(recv_arr).cast("B")
        got = 0
        while got < len(view):
            k = self.rx.recv_into(view[got:])
            if k == 0:
                raise ConnectionError("ring neighbour closed the connection")
            got += k
        err = self._done.get()
        if err is not None:
            raise err

    def allreduce(self, buf, tmp):
        """In-place sum of buf across the ring (ring all-reduce)."""
        n, r = self.n, self.rank
        chunks = np.array_split(buf, n)
        for s in range(n - 1):  # reduce-scatter
            si, ri = (r - s) % n, (r - s - 1) % n
            t = tmp[:len(chunks[ri])]
            self.exchange(chunks[si], t)
            np.add(chunks[ri], t, out=chunks[ri])
        for s in range(n - 1):  # all-gather
            si, ri = (r - s + 1) % n, (r - s) % n
            self.exchange(chunks[si], chunks[ri])

    def retransmits(self):
        """Segments the kernel has retransmitted on the link to the right
        (tcp_info.tcpi_total_retrans; 0 where TCP_INFO is missing)."""
        try:
            info = self.tx.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
        except (AttributeError, OSError):
            return 0
        return struct.unpack_from("I", info, 100)[0] if len(info) >= 104 else 0

    def close(self):
        self.tx.close()
        self.rx.close()


def eth0_tx_bytes():
    """Bytes this node's namespace has sent on eth0 (/proc/net/dev is per
    network namespace); 0 where it cannot be read."""
    try:
        with open("/proc/net/dev", encoding="ascii") as f:
            for line in f:
                name, _, counters = line.partition(":")
                if name.strip() == "eth0":
                    return int(counters.split()[8])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def make_state(nbytes, seed):
    """Model weights and Adam moments, float32, nbytes in all."""
    rng = np.random.default_rng(seed)
    per = max(nbytes // 3 // 4, 1)
    w = (rng.random(per, dtype=np.float32) - 0.5) * 0.04
    m = w * 0.01
    v = np.square(m) + 1e-8
    return {"weight": w, "exp_avg": m, "exp_avg_sq": v}


def update_state(state, it, dense_every=0):
    """An Adam-like step. sparse (dense_every 0): a strided subset, cheap,
    yet every chunk changes (its XOR delta is nearly all zero bytes).
    dense: every dense_every-th element, a different one each iteration,
    so that between two saves every element changes (most mantissa bits,
    rarely the exponent: what dense training state does), at 1/dense_every
    of a full update's CPU per iteration."""
    stride = dense_every if dense_every > 0 else UPDATE_STRIDE
    off = it % stride
    for a in state.values():
        a[off::stride] *= np.float32(0.999)
        a[off::stride] += np.float32(1e-6)


def open_checkpointer(stagger, a, state_bytes):
    kw = dict(servers=a.server, job=a.job, rank=a.rank, world_size=a.nodes)
    if not a.defaults:
        kw.update(codec="raw", chunk_size=a.chunk_kib * 1024,
                  staging_bytes=state_bytes, max_outstanding_saves=1)
    has_qos = not qos_missing(stagger)
    if a.mode == "qos" and a.defaults:
        # What a user sets: the deadline; everything else as it comes.
        kw.update(qos_deadline_s=a.deadline_s)
    elif a.mode == "qos":
        kw.update(qos_deadline_s=a.deadline_s, qos_yield=a.qos_yield,
                  qos_stagger=a.qos_stagger,
                  ranks_per_node=1, rate_limit_Bps=a.rate_limit_Bps)
    elif has_qos:
        # Once the binding has QoS, naive turns it off explicitly.
        kw.update(qos_deadline_s=0.0, qos_yield="off", ranks_per_node=1,
                  rate_limit_Bps=0.0)
    for opt in a.ck_opt:
        key, _, value = opt.partition("=")  # checked in main()
        for conv in (int, float, str):
            try:
                kw[key] = conv(value)
                break
            except ValueError:
                continue
    return stagger.Checkpointer(**kw)


def run(a):
    # Kept in memory and written once the loop is over (see the docstring);
    # also when the run fails, so its records up to the failure remain.
    records = []

    def emit(rec):
        rec.update(mode=a.mode, rank=a.rank)
        records.append(json.dumps(rec))

    try:
        return run_loop(a, emit)
    finally:
        with open(a.out, "w", encoding="utf-8") as out:
            out.write("".join(r + "\n" for r in records))


def run_loop(a, emit):
    n_elems = a.allreduce_mib * MiB // 4
    grad = np.full(n_elems, a.rank + 1, dtype=np.float32)
    buf = np.empty_like(grad)
    tmp = np.empty(len(np.array_split(buf, a.nodes)[0]), dtype=np.float32)

    ck, state = None, None
    stagger = None
    # The baseline updates the same state too: the update is the training
    # job's work, not the checkpoint's (a dense one takes CPU every
    # iteration).
    state = make_state(a.ckpt_mib * MiB, seed=a.rank)
    if a.mode != "baseline":
        stagger = import_stagger()
        if a.mode == "qos" and qos_missing(stagger):
            print("qos mode unavailable: binding lacks "
                  + ", ".join(qos_missing(stagger)), file=sys.stderr)
            return 3
        t0 = time.perf_counter()
        # A slab per chunk: each array's partial last chunk takes a whole
        # one, so the snapshot never waits for the paced drain.
        chunk = a.chunk_kib * 1024
        ck = open_checkpointer(stagger, a, sum(
            (v.nbytes + chunk - 1) // chunk * chunk for v in state.values()))
        emit({"type": "open", "open_s": time.perf_counter() - t0})
    marking = a.mode == "qos"

    addrs = a.addrs.split(",")
    ring = Ring(a.rank, addrs, a.port, timeout_s=60)

    # Correctness check of the collective, once.
    np.copyto(buf, grad)
    ring.allreduce(buf, tmp)
    expect = a.nodes * (a.nodes + 1) / 2
    if not np.all(buf == expect):
        print(f"trainer.py: all-reduce wrong: {buf[:4]} != {expect}",
              file=sys.stderr)
        return 1

    pending = []

    def drain(block):
        for h in list(pending):
            if block:
                h.wait()
            elif not h.done():
                continue
            pending.remove(h)
            # Every figure stats() has (QoS adds yield_s, paced_rate_Bps,
            # windows), less the per-codec mix.
            rec = {k: v for k, v in h.stats().items() if k != "codec_chunks"}
            rec.update(type="ckpt", step=h.step)
            emit(rec)

    retrans_before = ring.retransmits()
    compute_s = a.compute_ms / 1000.0
    lazy = a.save_mode == "lazy"
    lazy_pending = False
    for it in range(a.iters):
        tx0 = eth0_tx_bytes()
        wall0 = time.time()
        t0 = time.perf_counter()
        if marking:
            ck.iteration_begin()
        np.copyto(buf, grad)
        with ck.collective() if marking else contextlib.nullcontext():
            ring.allreduce(buf, tmp)
        t1 = time.perf_counter()
        # Everything the node sent while the all-reduce ran: its own bytes,
        # and any checkpoint bytes the gate let through.
        tx_ar = eth0_tx_bytes() - tx0
        time.sleep(compute_s)
        save_s = before_s = 0.0
        if lazy_pending:  # the snapshot must end before the update
            ts = time.perf_counter()
            ck.before_update()
            before_s = time.perf_counter() - ts
            lazy_pending = False
        update_state(state, it,
                     a.every if a.update == "dense" else 0)
        # Saves only where J iterations follow, so every checkpoint's
        # traffic meets the collectives.
        if ck is not None and (it + 1) % a.every == 0 and \
                it + 1 + a.every <= a.iters:
            ts = time.perf_counter()
            pending.append(ck.save(state, it + 1, lazy=lazy))
            save_s = time.perf_counter() - ts
            lazy_pending = lazy
        if ck is not None:
            drain(block=False)
        t2 = time.perf_counter()
        retrans = ring.retransmits()
        emit({"type": "iter", "iter": it, "wall_s": wall0, "t_s": t2 - t0,
              "allreduce_s": t1 - t0, "save_call_s": save_s,
              "before_update_s": before_s,
              "ring_retrans": retrans - retrans_before,
              "allreduce_tx_bytes": tx_ar})
        retrans_before = retrans
    if ck is not None:
        if lazy_pending:
            ck.before_update()
        drain(block=True)
        # The client's counters, the collective gate's state among them.
        m = ck.metrics() if hasattr(ck, "metrics") else {}
        emit({"type": "end", **{k: v for k, v in m.items()
                                if isinstance(v, (int, float, bool))}})
    ring.close()
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check-qos", action="store_true")
    p.add_argument("--mode", choices=("baseline", "naive", "qos"),
                   default="baseline")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--addrs", help="trainer IPv4 addresses, rank order")
    p.add_argument("--port", type=int, default=29500)
    p.add_argument("--server", help="stagger-server HOST:PORT")
    p.add_argument("--job", default="fabric")
    p.add_argument("--allreduce-mib", type=int, default=16)
    p.add_argument("--compute-ms", type=float, default=150)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--ckpt-mib", type=int, default=128)
    p.add_argument("--chunk-kib", type=int, default=4096)
    p.add_argument("--save-mode", choices=("lazy", "eager"), default="lazy")
    p.add_argument("--deadline-s", type=float, default=0.0)
    p.add_argument("--qos-yield", default="learn",
                   choices=("off", "pause", "learn"))
    p.add_argument("--rate-limit-Bps", type=float, default=0.0)
    p.add_argument("--qos-stagger", type=float, default=0.1)
    p.add_argument("--update", choices=("sparse", "dense"),
                   default="sparse")
    p.add_argument("--defaults", action="store_true",
                   help="open the Checkpointer with default options (the "
                   "deadline alone in qos mode; QoS off in naive mode)")
    p.add_argument("--ck-opt", action="append", default=[],
                   metavar="KEY=VALUE",
                   help="one more Checkpointer keyword (repeatable), e.g. "
                   "background_cpu=normal")
    p.add_argument("--out", default="/dev/stdout")
    a = p.parse_args()
    for opt in a.ck_opt:
        key, eq, _ = opt.partition("=")
        if not eq or not key.isidentifier():
            p.error(f"--ck-opt wants KEY=VALUE, got {opt!r}")
    if a.check_qos:
        missing = qos_missing(import_stagger())
        if missing:
            print("qos mode unavailable: binding lacks " + ", ".join(missing))
            return 3
        return 0
    a.nodes = len(a.addrs.split(","))
    if a.nodes < 2 or not 0 <= a.rank < a.nodes:
        p.error("need >= 2 addresses and 0 <= rank < their number")
    if a.mode != "baseline" and not a.server:
        p.error("--server is needed for checkpoint modes")
    # run.sh's timeout sends SIGTERM: leave through run()'s finally, so the
    # records so far are written.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
