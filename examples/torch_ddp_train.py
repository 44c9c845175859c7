"""Train a small model with DDP (gloo, CPU) and checkpoint it with stagger.

    build/bin/stagger-server --data /tmp/stagger-data --listen 127.0.0.1:7700 &
    PYTHONPATH=build/python python3 examples/launch.py --nproc 2 \\
        examples/torch_ddp_train.py --servers 127.0.0.1:7700 --job demo

(or ``torchrun --standalone --nproc_per_node 2 examples/torch_ddp_train.py
...``; Debian 12's torchrun needs ``-r 1 -t 1``, see launch.py).

Every --every steps the model, the AdamW state, the step and each rank's RNG
state are saved lazily: the save returns at once, the copy overlaps the next
forward and backward pass, and the optimizer step waits for it
(``install_hooks``). The gradient all-reduces are marked, so checkpoint
traffic yields to them. Started again (after a crash, or stopped with
Ctrl-C), the job resumes from its latest complete step and continues with
the losses an uninterrupted run has, bit for bit (``--print-losses`` shows
them): each batch is derived from the seed and the step, and the
algorithms are deterministic.

One process may use an embedded server instead (``--servers
embedded:DIR``); several processes need a stagger-server.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import stagger.torch as st


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--servers", required=True,
                   help="stagger-server addresses (host:port[,...]), or "
                        "embedded:DIR for a single process")
    p.add_argument("--job", default="torch-ddp-example")
    p.add_argument("--steps", type=int, default=100,
                   help="train until this step")
    p.add_argument("--every", type=int, default=10,
                   help="checkpoint every this many steps")
    p.add_argument("--step-time", type=float, default=0.0,
                   help="extra seconds per step (stands in for real work)")
    p.add_argument("--deadline-s", type=float, default=0.0,
                   help="spread each save's traffic over this many seconds")
    p.add_argument("--seed", type=int, default=0,
                   help="seeds the model's initial weights and the batches")
    p.add_argument("--print-losses", action="store_true",
                   help="print every step's loss, exactly (float.hex)")
    return p.parse_args()


def make_model():
    return torch.nn.Sequential(
        torch.nn.Linear(32, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 1))


def batch(seed, step, rank):
    """This rank's batch of a step: the same after a restart."""
    g = torch.Generator().manual_seed((seed * 1000003 + step) * 1009 + rank)
    x = torch.randn(64, 32, generator=g)
    return x, x.sum(dim=1, keepdim=True).sin()


def training_state(model, optimizer, step):
    return {"model": model.module.state_dict(),
            "optim": optimizer.state_dict(),
            "step": step,
            "rng": torch.get_rng_state()}


def checkpoint_steps(ck):
    """(latest complete step or -1, partial steps after it), as rank 0 sees
    them, on every rank.

    A partial step is one that some ranks committed before the job
    stopped. The servers keep a rank's committed shard and refuse a
    different one for the same step, so a resumed job saves under other
    step numbers.
    """
    info = [None]
    if dist.get_rank() == 0:
        complete = ck.steps()
        latest = complete[-1] if complete else -1
        partial = set(ck.steps(include_partial=True)) - set(complete)
        info = [(latest, sorted(s for s in partial if s > latest))]
    dist.broadcast_object_list(info, src=0)
    return info[0]


def main():
    args = parse_args()
    env = st.dist_env()
    if env.world_size > 1 and args.servers.startswith("embedded:"):
        sys.exit("an embedded server lives inside one process: start "
                 "stagger-server and pass --servers HOST:PORT")
    if "MASTER_ADDR" in os.environ:  # set by torchrun or launch.py
        dist.init_process_group("gloo")
    else:  # a single process started by hand
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0,
                                world_size=1)
    rank = env.rank

    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    model = DistributedDataParallel(make_model())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ck = st.checkpointer(args.servers, args.job,
                         qos_deadline_s=args.deadline_s)
    hooks = st.install_hooks(ck, model, optimizer)

    start, partial = checkpoint_steps(ck)
    if start >= 0:
        state = training_state(model, optimizer, 0)
        st.load_state_dict(ck, state, step=start)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optim"])
        torch.set_rng_state(state["rng"])
        print(f"rank {rank}: resumed from step {state['step']}", flush=True)
    else:
        start = 0

    loss_fn = torch.nn.MSELoss()
    handle = None
    for step in range(start + 1, args.steps + 1):
        x, y = batch(args.seed, step, rank)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()        # all-reduces marked as collectives
        optimizer.step()       # waits for a lazy save's snapshot first
        if step == start + 1:
            # Once AdamW holds its moments: the staging memory for the
            # saves is mapped and faulted in now, not in the first save.
            st.prepare_state_dict(ck, training_state(model, optimizer, step),
                                  replicated=["model", "optim"])
        if args.print_losses:
            print(f"rank {rank}: step {step} loss.hex {loss.item().hex()}",
                  flush=True)
        if step % args.every == 0 and step in partial:
            print(f"rank {rank}: step {step} not saved: a partial "
                  "checkpoint of that number is left from before", flush=True)
        elif step % args.every == 0:
            handle = st.save_state_dict(
                ck, training_state(model, optimizer, step), step,
                replicated=["model", "optim"], lazy=True)
            print(f"rank {rank}: step {step} loss {loss.item():.5f} saved",
                  flush=True)
        if args.step_time:
            time.sleep(args.step_time)
    ck.before_update()
    if handle is not None:
        handle.wait()  # durable; raises stagger.Error if the save failed
    print(f"rank {rank}: done at step {args.steps}, "
          f"{hooks.collectives} all-reduces marked", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
