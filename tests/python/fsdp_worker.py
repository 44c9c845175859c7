"""One rank of the FSDP tests (test_dtensor.py runs WORLD of these).

    fsdp_worker.py MODE RANK WORLD INIT_FILE SERVERS JOB STEP DIR FLAVOUR

A small MLP with AdamW under FLAVOUR, on CPU with gloo:

  fsdp2  ``fully_shard`` on a mesh: get_model_state_dict and
         get_optimizer_state_dict give DTensors;
  fsdp1  ``FullyShardedDataParallel`` (device_id cpu): they give
         ShardedTensors (FSDP1's SHARDED_STATE_DICT).

  save  with stagger's hooks installed (install_hooks: the forward and
        backward marked as collectives, the optimizer step fenced), trains
        2 steps, saves get_model_state_dict and get_optimizer_state_dict
        as STEP lazily, takes one more step while the copies run, and
        (rank 0) writes the full parameters and moments as saved, the
        next loss and the hooks' counts to DIR/expected.pt;
  load  builds the model fresh on WORLD ranks, loads STEP into its state
        dicts, applies them with set_model_state_dict and
        set_optimizer_state_dict, and writes DIR/result-RANK.json:
        whether every full parameter and moment equals the saved ones,
        bit for bit, and whether one more training step gives the same
        loss as the saving run's next step (DIR/expected.pt).
"""
import json
import os
import sys
import warnings

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict, get_optimizer_state_dict, set_model_state_dict,
    set_optimizer_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.checkpoint.state_dict import StateDictOptions
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import fully_shard

import stagger.torch as st


def build(mesh, flavour):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 33), torch.nn.ReLU(),
                            torch.nn.Linear(33, 5))
    if flavour == "fsdp1":
        m = FSDP(m, device_id=torch.device("cpu"), use_orig_params=True)
    else:
        for layer in m:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(m, mesh=mesh)
    return m, torch.optim.AdamW(m.parameters(), lr=1e-2)


def state_dicts(m, opt):
    """The model's and the optimizer's sharded state dicts: DTensors under
    FSDP2, ShardedTensors under FSDP1."""
    return {"model": get_model_state_dict(m),
            "optim": get_optimizer_state_dict(m, opt)}


def kinds_of(sd):
    """The types of the model state dict's tensors."""
    return sorted({type(v).__name__ for v in sd["model"].values()})


def full_state(m, opt):
    """{"model": .., "optim": ..} of full tensors (every rank calls it)."""
    o = StateDictOptions(full_state_dict=True)
    return {"model": full(get_model_state_dict(m, options=o)),
            "optim": full(get_optimizer_state_dict(m, opt, options=o))}


def batch(i):
    g = torch.Generator().manual_seed(100 + i)
    return torch.randn(8, 16, generator=g)


def train(m, opt, i):
    opt.zero_grad()
    loss = m(batch(i)).square().mean()
    loss.backward()
    opt.step()
    return loss.item()


def full(sd):
    """{path: full tensor} of a model or optimizer state dict."""
    out = {}

    def walk(v, path):
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, f"{path}.{k}" if path else str(k))
        elif isinstance(v, torch.Tensor):
            out[path] = (v.full_tensor() if hasattr(v, "full_tensor")
                         else v).detach().clone()
    walk(sd, "")
    return out


def main():
    mode, rank, world, init_file, servers, job, step, work, flavour = \
        sys.argv[1:10]
    rank, world, step = int(rank), int(world), int(step)
    dist.init_process_group("gloo", init_method=f"file://{init_file}",
                            rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    m, opt = build(mesh, flavour)
    ck = st.checkpointer(servers, job=job, rank=rank, world_size=world)
    expected = os.path.join(work, "expected.pt")
    if mode == "save":
        hooks = st.install_hooks(ck, model=m, optimizer=opt)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for i in range(2):
                train(m, opt, i)
        marked = hooks.collectives
        still_open = hooks.open_collectives
        hook_warnings = [str(w.message) for w in caught
                         if "hook" in str(w.message).lower()]
        sd = state_dicts(m, opt)
        # Lazy: the copies run while the next step's forward and backward
        # do; the hooks' fence (before optimizer.step) waits for them.
        h = st.save_state_dict(ck, sd, step, lazy=True)
        want = full_state(m, opt)
        want["kinds"] = kinds_of(sd)
        want["next_loss"] = train(m, opt, 2)
        h.wait()
        want["marked"] = marked
        want["hook_warnings"] = hook_warnings
        want["still_open"] = still_open
        want["steps_hooked"] = hooks.steps
        if rank == 0:
            torch.save(want, expected)
    else:
        sd = state_dicts(m, opt)
        kinds = kinds_of(sd)
        st.load_state_dict(ck, sd, step=step)
        set_model_state_dict(m, sd["model"])
        set_optimizer_state_dict(m, opt, sd["optim"])
        want = torch.load(expected)
        got = full_state(m, opt)
        differ = [f"{part}.{k}" for part in ("model", "optim")
                  for k, v in want[part].items()
                  if k not in got[part] or not torch.equal(got[part][k], v)]
        loss = train(m, opt, 2)
        with open(os.path.join(work, f"result-{rank}.json"), "w") as f:
            json.dump({"differ": differ, "loss": loss, "kinds": kinds,
                       "saved_kinds": want["kinds"],
                       "want_loss": want["next_loss"],
                       "marked": want["marked"],
                       "hook_warnings": want["hook_warnings"],
                       "still_open": want["still_open"],
                       "steps_hooked": want["steps_hooked"]}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # torch's gloo worker thread may still be freeing the barrier's work,
    # which takes the GIL, while the interpreter finalizes: that thread is
    # then unwound through a noexcept destructor and the process aborts
    # ("terminate called without an active exception", in
    # ProcessGroupGloo::runLoop; about one run in six here). Everything this
    # worker writes is written and closed by now: leave without finalizing.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
