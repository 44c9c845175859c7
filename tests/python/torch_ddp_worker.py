"""One rank of the DDP hook test (test_torch.py runs two of these).

    torch_ddp_worker.py RANK WORLD INIT_FILE SERVERS JOB OUT_JSON

Trains a small DDP model (gloo, CPU) for 4 steps with stagger's hooks
installed, saves lazily after step 2 (the copy overlapping step 3's
forward and backward), and writes what it observed to OUT_JSON: the
hooks' counters, the save's stats, whether the loaded step 2 equals the
state right after step 2 bit for bit, and a digest of the final
parameters (equal on both ranks when the all-reduces ran).
"""
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import stagger
import stagger.torch as st


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 8))


_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32,
                8: torch.int64}


def bits(t):
    """The tensor's bytes as integers (NaN-safe, -0.0 distinct from 0.0)."""
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.contiguous().view(_INT_OF_SIZE[t.element_size()])


def same_bits(a, b):
    """True when a and b are the same tree, tensors equal bit for bit."""
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype
                and a.shape == b.shape and torch.equal(bits(a), bits(b)))
    if isinstance(a, dict):
        return (isinstance(b, dict) and a.keys() == b.keys()
                and all(same_bits(a[k], b[k]) for k in a))
    if isinstance(a, (list, tuple)):
        return (type(a) is type(b) and len(a) == len(b)
                and all(same_bits(x, y) for x, y in zip(a, b)))
    return type(a) is type(b) and a == b


def clone(sd):
    if isinstance(sd, torch.Tensor):
        return sd.clone()
    if isinstance(sd, dict):
        return {k: clone(v) for k, v in sd.items()}
    if isinstance(sd, list):
        return [clone(v) for v in sd]
    return sd


def main():
    rank, world, init, servers, job, out = sys.argv[1:]
    rank, world = int(rank), int(world)
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank,
                            world_size=world)
    model = DistributedDataParallel(make_model())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ck = stagger.Checkpointer(servers=servers, job=job, rank=rank,
                              world_size=world, chunk_size=4096,
                              qos_yield="pause")
    hooks = st.install_hooks(ck, model, optimizer)
    g = torch.Generator().manual_seed(rank)
    handle, want = None, None
    for step in range(1, 5):
        x = torch.randn(32, 64, generator=g)
        loss = (model(x) - x[:, :8]).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()  # the pre-step hook fences the lazy save
        if step == 2:
            sd = {"model": model.module.state_dict(),
                  "optim": optimizer.state_dict()}
            want = clone(sd)
            handle = st.save_state_dict(ck, sd, 2, lazy=True,
                                        replicated=["model", "optim"])
    handle.wait()
    stats = handle.stats()
    dist.barrier()  # step 2 is complete once every rank committed it

    fresh = make_model()
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    loaded = {"model": fresh.state_dict(), "optim": fresh_opt.state_dict()}
    st.load_state_dict(ck, loaded, step=2)
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    digest = float(flat.double().sum())
    with open(out, "w") as f:
        json.dump({"collectives": hooks.collectives, "steps": hooks.steps,
                   "yield_s": stats["yield_s"],
                   "durable_s": stats["durable_s"],
                   "bytes_raw": stats["bytes_raw"],
                   "equal": same_bits(want, loaded), "digest": digest}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Without finalizing: torch's gloo thread can still be freeing the last
    # barrier's work then, and abort the process (see fsdp_worker.py).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
