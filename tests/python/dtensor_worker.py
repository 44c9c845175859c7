"""One rank of the DTensor tests (test_dtensor.py runs WORLD of these).

    dtensor_worker.py MODE RANK WORLD INIT_FILE SERVERS JOB STEP OUT_JSON

Builds the same global tensors on every rank (fixed seed), lays them out
over a 1-D CPU mesh of WORLD ranks (gloo), and:

  save        saves {"model": {w: Shard(0), v: Shard(0) (uneven),
              r: Replicate(), e: Shard(1) of a 2-D tensor}} as STEP;
  load-dim1   loads STEP into DTensors laid out otherwise (w: Shard(1),
              v: Replicate(), r: Shard(0), e: Shard(0)) and checks each
              local tensor against the global one, bit for bit;
  load-plain  (WORLD 1, no process group) loads STEP into plain tensors
              of the global shapes.

Writes {"ok": bool, "detail": str} to OUT_JSON.
"""
import json
import os
import sys

import torch
import torch.distributed as dist

import stagger.torch as st


def global_tensors():
    g = torch.Generator().manual_seed(7)
    return {"w": torch.randn(6, 5, generator=g),
            "v": torch.randn(7, generator=g),
            "r": torch.randn(4, 3, generator=g).double(),
            "e": torch.randn(3, 9, generator=g)}


def main():
    mode, rank, world, init_file, servers, job, step, out = sys.argv[1:9]
    rank, world, step = int(rank), int(world), int(step)
    full = global_tensors()
    ck = st.checkpointer(servers, job=job, rank=rank, world_size=world)
    detail = []
    if mode == "load-plain":
        dest = {"model": {k: torch.zeros_like(t) for k, t in full.items()}}
        st.load_state_dict(ck, dest, step=step)
        for k, t in full.items():
            if not torch.equal(dest["model"][k], t):
                detail.append(f"{k} differs")
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import (Replicate, Shard,
                                              distribute_tensor)
        dist.init_process_group("gloo", init_method=f"file://{init_file}",
                                rank=rank, world_size=world)
        mesh = init_device_mesh("cpu", (world,))
        if mode == "save":
            layout = {"w": [Shard(0)], "v": [Shard(0)], "r": [Replicate()],
                      "e": [Shard(1)]}
            sd = {"model": {k: distribute_tensor(full[k], mesh, layout[k])
                            for k in full}}
            st.save_state_dict(ck, sd, step).wait()
        else:
            layout = {"w": [Shard(1)], "v": [Replicate()], "r": [Shard(0)],
                      "e": [Shard(0)]}
            dest = {"model": {k: distribute_tensor(torch.zeros_like(full[k]),
                                                   mesh, layout[k])
                              for k in full}}
            st.load_state_dict(ck, dest, step=step)
            for k, t in full.items():
                d = dest["model"][k]
                want = distribute_tensor(t, mesh, layout[k]).to_local()
                if not torch.equal(d.to_local(), want):
                    detail.append(f"{k} local part differs on rank {rank}")
        dist.barrier()
        dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump({"ok": not detail, "detail": "; ".join(detail)}, f)


if __name__ == "__main__":
    main()
    # Without finalizing: torch's gloo thread can still be freeing the last
    # barrier's work then, and abort the process (see fsdp_worker.py).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
