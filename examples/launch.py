"""Start N local processes of a training script, as torchrun would.

    python3 examples/launch.py --nproc 2 examples/torch_ddp_train.py ARGS...

Each process gets the variables torchrun sets (RANK, LOCAL_RANK,
WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and OMP_NUM_THREADS=1
unless set), so ``torch.distributed.init_process_group()`` and
``stagger.torch.checkpointer()`` find their rank. One host only; no
restarts. When a process fails the others are stopped, and the launcher
exits with the failed process's status; SIGINT and SIGTERM are passed on.

Debian 12's torchrun (torch 1.13 under Python 3.11) fails to parse its own
default ``--redirects``; there ``torchrun -r 1 -t 1`` works too.
"""
import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import time


def ephemeral_low():
    """The first port the kernel hands out for bind(0) and connect()."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port():
    """A port free now, below the kernel's ephemeral range when there is room.

    A port from bind(0) is released before rank 0's store binds it, and any
    outgoing connection (a gloo peer, a checkpoint server's client) may take
    it in between. Ports below the ephemeral range are never handed out that
    way, so only another explicit bind can collide.
    """
    low = ephemeral_low()
    rng = random.SystemRandom()
    if low > 11000:
        for _ in range(64):
            port = rng.randrange(10000, low)
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nproc", type=int, default=2,
                   help="processes to start (the world size)")
    p.add_argument("--master-port", type=int, default=0,
                   help="rendezvous port on 127.0.0.1 (0: a free one)")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    return p.parse_args()


def stop(procs, sig):
    for p in procs:
        if p.poll() is None:
            p.send_signal(sig)


def main():
    args = parse_args()
    port = args.master_port or free_port()
    procs = []
    for rank in range(args.nproc):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank),
                   WORLD_SIZE=str(args.nproc),
                   LOCAL_WORLD_SIZE=str(args.nproc),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        env.setdefault("OMP_NUM_THREADS", "1")
        procs.append(subprocess.Popen(
            [sys.executable, args.script] + args.args, env=env))

    def forward(signum, frame):
        stop(procs, signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    status = 0
    while any(p.poll() is None for p in procs):
        failed = [p.returncode for p in procs
                  if p.returncode not in (None, 0)]
        if failed and not status:
            status = failed[0]
            stop(procs, signal.SIGTERM)
        time.sleep(0.05)
    failed = [p.returncode for p in procs if p.returncode != 0]
    status = status or (failed[0] if failed else 0)
    # A process killed by signal N reports -N; a shell reports 128 + N.
    sys.exit(status if status >= 0 else 128 - status)


if __name__ == "__main__":
    main()
