#!/usr/bin/env python3
"""Loading DTensors resharded, against loading them in the layout saved.

Run with the python of bench/peers/setup_venv.sh (torch 2.x from PyPI):

  $PY bench/peers/dtensor_reshard.py [--gib 1] [--ranks 2] [--reps 3]
                                     [--reshard ranks|dim] [--load-ranks 3]

RANKS processes (gloo, a 1-D CPU mesh) save a GPT-like state (bench/
peers/dcp.py's, fp32 weights and AdamW moments) as DTensors sharded on
dim 0 (FSDP2's layout), to one stagger-server. Then, in turn, --reps
times, the page cache dropped before each, every rank loads it into

  same      DTensors sharded on dim 0 over RANKS ranks, as saved;
  resharded --reshard ranks (default): sharded on dim 0 over LOAD_RANKS
            ranks (FSDP2 resumed on another number of ranks: slice
            boundaries fall inside saved chunks); --reshard dim: sharded
            on the last dim over RANKS ranks (each rank's slice crosses
            every saved row, so every rank reads every chunk: twice the
            bytes on 2 ranks, as any row-major store must).

The time of a load is the slowest rank's. Prints the times and

  RESULT dtensor_reshard reshard=... same_s=... resharded_s=...
         reshard_x_same=...
         ratio=...

(medians; the issue's target: reshard_x_same <= 1.2). Exits 2 without
torch 2.x.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "build", "python"))


def rank_main(a):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    import dcp as peers
    import stagger.torch as st
    dist.init_process_group("gloo", init_method=f"file://{a.init}",
                            rank=a.rank, world_size=a.ranks)
    mesh = init_device_mesh("cpu", (a.ranks,))
    sd = peers.gpt_state(int(a.gib * (1 << 30)))
    ck = st.checkpointer(a.server, job="reshard", rank=a.rank,
                         world_size=a.ranks)

    def layout(tree, dim):
        if isinstance(tree, dict):
            return {k: layout(v, dim) for k, v in tree.items()}
        if isinstance(tree, torch.Tensor) and tree.dim() > 0:
            return distribute_tensor(tree, mesh,
                                     [Shard(dim if dim >= 0 else
                                            tree.dim() - 1)])
        return tree

    if a.mode == "save":
        st.save_state_dict(ck, layout(sd, 0), 1).wait()
    else:
        zeros = {k: v for k, v in sd.items()}
        dest = layout(peers.empty_like_tree(zeros),
                      -1 if a.mode == "resharded" and a.reshard == "dim"
                      else 0)
        dist.barrier()
        t = time.perf_counter()
        st.load_state_dict(ck, dest, step=1)
        took = time.perf_counter() - t
        got = [torch.tensor(0.0) for _ in range(a.ranks)]
        dist.all_gather(got, torch.tensor(took))
        if a.rank == 0:
            print(f"LOAD {max(float(x) for x in got):.4f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def run(a, mode, work, server):
    init = os.path.join(work, f"init-{mode}-{time.monotonic_ns()}")
    ranks = (a.load_ranks if mode == "resharded" and a.reshard == "ranks"
             else a.ranks)
    procs = [subprocess.Popen(
        [sys.executable, __file__, "--rank", str(r), "--ranks",
         str(ranks), "--gib", str(a.gib), "--mode", mode, "--init", init,
         "--server", server, "--reshard", a.reshard],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for r in range(ranks)]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    for p, out in zip(procs, outs):
        if p.returncode != 0:
            raise RuntimeError(f"{mode} rank failed:\n{out}")
    for line in outs[0].splitlines():
        if line.startswith("LOAD "):
            return float(line.split()[1])
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--reshard", choices=["ranks", "dim"], default="ranks")
    p.add_argument("--load-ranks", type=int, default=3)
    p.add_argument("--dir", default="/tmp")
    p.add_argument("--server-bin",
                   default=os.path.join(ROOT, "build", "bin",
                                        "stagger-server"))
    p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--mode", default="", help=argparse.SUPPRESS)
    p.add_argument("--init", default="", help=argparse.SUPPRESS)
    p.add_argument("--server", default="", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.rank >= 0:
        rank_main(a)
        return 0
    import dcp as peers
    work = tempfile.mkdtemp(prefix="stagger-reshard-", dir=a.dir)
    server = peers.Server(a.server_bin, os.path.join(work, "data"))
    try:
        run(a, "save", work, server.grpc)
        peers.settle(os.path.join(work, "data"))
        times = {"same": [], "resharded": []}
        for r in range(a.reps):
            for mode in times:
                server.stop()
                peers.drop_caches()
                server.start()
                times[mode].append(run(a, mode, work, server.grpc))
            print(f"turn {r}: same {times['same'][-1]:.3f} s, resharded "
                  f"{times['resharded'][-1]:.3f} s", flush=True)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    same = statistics.median(times["same"])
    resharded = statistics.median(times["resharded"])
    print(f"RESULT dtensor_reshard reshard={a.reshard} same_s={same:.4g} "
          f"resharded_s={resharded:.4g} "
          f"reshard_x_same={resharded / same:.4g} "
          f"ratio={resharded / same:.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
