"""Train a small model with FSDP2 (gloo, CPU), checkpoint it with stagger,
and resume it on another number of processes.

    build/bin/stagger-server --data /tmp/stagger-data --listen 127.0.0.1:7700 &
    PYTHONPATH=build/python python3 examples/launch.py --nproc 2 \\
        examples/fsdp_train.py --servers 127.0.0.1:7700 --steps 4
    PYTHONPATH=build/python python3 examples/launch.py --nproc 3 \\
        examples/fsdp_train.py --servers 127.0.0.1:7700 --steps 8

Needs torch 2.6 or later (``fully_shard`` in ``torch.distributed.fsdp``;
``bench/peers/setup_venv.sh`` makes such a venv). Each layer and the model
are ``fully_shard``-ed over all processes, so every rank holds a slice of
each parameter and of AdamW's moments, as DTensors. Every --every steps
the state dicts that ``get_model_state_dict`` and
``get_optimizer_state_dict`` give are saved lazily (the save returns at
once, the copies overlap the next forward and backward, the optimizer step
waits for them): each rank writes its own slices, nothing is gathered. The
second command finds step 4, loads it into its own (3-way) shards with no
``shards=`` (the DTensors say which slice each rank holds), and goes on.

Both runs print the state's fingerprint (a hash of the full parameters and
moments, gathered for the print only): the fingerprint a run prints at a
save is the one the resumed run prints after loading it.

What PyTorch DCP calls a checkpoint directory (``checkpoint_id``) is here
a job and a step: ``dcp.save(sd, checkpoint_id=f"ckpt/{step}")`` becomes
``st.save_state_dict(ck, sd, step)`` on a Checkpointer for the job;
``dcp.load`` becomes ``st.load_state_dict(ck, sd, step)`` (or "latest").
"""
import argparse
import hashlib
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions, get_model_state_dict, get_optimizer_state_dict,
    set_model_state_dict, set_optimizer_state_dict)

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:
    sys.exit(f"torch {torch.__version__} has no torch.distributed.fsdp."
             "fully_shard (FSDP2): this example needs torch 2.6 or later")
from torch.distributed.device_mesh import init_device_mesh

import stagger.torch as st


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--servers", required=True,
                   help="stagger-server addresses (host:port[,...])")
    p.add_argument("--job", default="fsdp-example")
    p.add_argument("--steps", type=int, default=8,
                   help="train until this step")
    p.add_argument("--every", type=int, default=2,
                   help="checkpoint every this many steps")
    return p.parse_args()


def make_model(mesh):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 96), torch.nn.ReLU(),
        torch.nn.Linear(96, 96), torch.nn.ReLU(),
        torch.nn.Linear(96, 1))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def batch(step, rank, world):
    """This rank's part of a step's global batch of 48 rows."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(48, 32, generator=g)
    y = x.sum(dim=1, keepdim=True).sin()
    return torch.chunk(x, world)[rank], torch.chunk(y, world)[rank]


def state_dicts(model, optimizer):
    """DTensor state dicts: each rank's slices, nothing gathered."""
    return {"model": get_model_state_dict(model),
            "optim": get_optimizer_state_dict(model, optimizer)}


def fingerprint(model, optimizer):
    """A hash of the full parameters and moments (every rank calls it: the
    full tensors are gathered)."""
    o = StateDictOptions(full_state_dict=True)
    full = {"model": get_model_state_dict(model, options=o),
            "optim": get_optimizer_state_dict(model, optimizer, options=o)}
    h = hashlib.sha256()

    def walk(v, path):
        if isinstance(v, dict):
            for k in sorted(v, key=str):
                walk(v[k], f"{path}.{k}")
        elif isinstance(v, torch.Tensor):
            t = v.full_tensor() if hasattr(v, "full_tensor") else v
            h.update(path.encode())
            flat = t.detach().reshape(-1).contiguous()
            h.update(flat.view(torch.uint8).numpy().tobytes())
    walk(full, "")
    return h.hexdigest()[:16]


def main():
    args = parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    model = make_model(mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    # Rank and world size come from the process group.
    ck = st.checkpointer(args.servers, args.job)
    st.install_hooks(ck, model, optimizer)

    start = 0
    if ck.steps():
        sd = state_dicts(model, optimizer)
        result = st.load_state_dict(ck, sd)       # the latest complete step
        set_model_state_dict(model, sd["model"])
        set_optimizer_state_dict(model, optimizer, sd["optim"])
        start = result.step
        fp = fingerprint(model, optimizer)
        if rank == 0:
            print(f"resumed from step {start} on {world} ranks, "
                  f"state {fp}", flush=True)

    handle = None
    for step in range(start + 1, args.steps + 1):
        x, y = batch(step, rank, world)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()             # waits for a lazy save's copies first
        if step % args.every == 0:
            fp = fingerprint(model, optimizer)
            handle = st.save_state_dict(ck, state_dicts(model, optimizer),
                                        step, lazy=True)
            if rank == 0:
                print(f"step {step} loss {loss.item():.5f} saved on {world} "
                      f"ranks, state {fp}", flush=True)
    ck.before_update()
    if handle is not None:
        handle.wait()       # this rank's part is durable
        ck.wait_step(handle.step, timeout=60)   # and every rank's
    if rank == 0:
        print(f"done at step {args.steps}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
