"""Saving and loading torch state dicts with a stagger Checkpointer.

``save_state_dict`` walks a nested state dict (a model's, an optimizer's,
plain values around them), registers every tensor without a copy
(``tensors.py``) and stores the structure as JSON (``meta.py``).
``load_state_dict`` reads the structure back, fills the destination's
tensors in place, allocates the ones it lacks (a fresh optimizer's state)
and puts the plain values back.
"""
import numpy as np
import torch

from . import meta
from .sharding import Shard, replicated as _replicated_shard
from .tensors import (as_array, dtype_from_name, dtype_name, stagger_dtype,
                      stored_view)


def _shard_table(shards):
    """{dotted path: Shard} from the user's {path or tuple: Shard or pair}."""
    table = {}
    for key, value in (shards or {}).items():
        path = meta.path_str(key) if isinstance(key, tuple) else str(key)
        if not isinstance(value, Shard):
            if len(value) not in (2, 3):
                raise ValueError(f"shard of '{path}' must be a Shard or "
                                 "(global_shape, offset)")
            value = Shard(*value)
        table[path] = value
    return table


def _binding_shard(shard, view):
    """(global_shape, offset) for the binding, given the stored view."""
    extra = view.dim() - len(shard.global_shape)  # complex: one more dim
    return (list(shard.global_shape) + list(view.shape[view.dim() - extra:]),
            list(shard.offset) + [0] * extra)


def _fit_to_shard(view, shard, path):
    """The part of ``view`` that ``shard`` stores (FSDP: without padding)."""
    if shard is None or shard.shape is None:
        return view
    want = tuple(shard.shape)
    have = tuple(view.shape[:len(want)])
    if have == want:
        return view
    if len(want) == 1 and have[0] > want[0]:
        return view[:want[0]]
    raise ValueError(f"'{path}' has shape {tuple(view.shape)} but its shard "
                     f"is {want}")


class _Registrations:
    """The arguments of one ``ck.save`` / ``ck.load`` call."""

    def __init__(self):
        self.tensors, self.dtypes, self.shards = {}, {}, {}

    def add(self, name, view, shard):
        self.tensors[name] = as_array(view)
        self.dtypes[name] = stagger_dtype(view.dtype)
        if shard is not None:
            self.shards[name] = _binding_shard(shard, view)

    def any_cuda(self):
        return any(isinstance(a, torch.Tensor) and a.is_cuda
                   for a in self.tensors.values())


def _is_replicated(path, replicated):
    if isinstance(replicated, bool):
        return replicated
    if isinstance(replicated, str):
        replicated = [replicated]
    return any(path == p or path.startswith(p + ".") for p in replicated)


class _SavePlan:
    """Encodes a state dict and collects its tensors for ``ck.save``."""

    def __init__(self, shards, replicated):
        self.shards = _shard_table(shards)
        self.replicated = replicated
        self.namer = meta.Namer()
        self.regs = _Registrations()
        self.by_memory = {}  # (device, ptr, dtype, shape, stride) -> name
        self.used_shards = set()

    def tensor(self, t, path):
        key = meta.path_str(path)
        info = {"dtype": dtype_name(t.dtype), "shape": list(t.shape),
                "device": str(t.device)}
        if t.numel() > 0:
            memory = (str(t.device), t.data_ptr(), t.dtype, tuple(t.shape),
                      t.stride())
            if memory in self.by_memory:
                return {"A": dict(info, name=self.by_memory[memory])}
        shard = self.shards.get(key)
        if shard is not None:
            self.used_shards.add(key)
        elif _is_replicated(key, self.replicated) and t.dim() > 0:
            shard = _replicated_shard(t.shape)
        view = _fit_to_shard(stored_view(t), shard, key)
        name = self.namer.name(path)
        if shard is not None:
            info.update(global_shape=list(shard.global_shape),
                        offset=list(shard.offset),
                        shard_shape=list(view.shape[:t.dim()]))
        if view.numel() == 0:  # nothing to store; a load allocates it
            return {"T": dict(info, name=name)}
        self.by_memory[memory] = name
        self.regs.add(name, view.contiguous(), shard)
        return {"T": dict(info, name=name)}


def save_state_dict(ck, state_dict, step, *, shards=None, replicated=False,
                    lazy=False, deadline_s=-1.0, cuda_stream=None):
    """Saves ``state_dict`` as ``step`` of this rank; returns the SaveHandle.

    ``state_dict``: a dict of tensors, dicts (any plain keys), lists,
    tuples and plain values, e.g. ``{"model": model.state_dict(), "optim":
    optimizer.state_dict(), "epoch": 3}``. Contiguous CPU and CUDA tensors
    are captured without a copy (a non-contiguous one is copied first).

    ``shards``: {path: Shard or (global_shape, offset)}, the path being the
    keys joined by '.' ("model.fc.weight", "optim.state.0.exp_avg"), for
    tensors that hold a slice of a global tensor. ``replicated``: True, or
    path prefixes ("model", "optim"), for tensors that every rank holds
    whole: stored once, by rank 0. Other tensors are per-rank.

    ``lazy``: return once the copies are queued; call ``ck.before_update()``
    (``install_hooks`` does, before ``optimizer.step()``) before changing
    the tensors. ``cuda_stream``: the stream whose work the snapshot must
    see (default: torch's current stream when CUDA tensors are saved).
    Raises TypeError for a value that cannot be stored, ValueError for a
    shard that does not fit, stagger.Error from the Checkpointer.
    """
    if not isinstance(state_dict, dict):
        raise TypeError("state_dict must be a dict")
    plan = _SavePlan(shards, replicated)
    tree = meta.encode(state_dict, (), plan.tensor)
    unused = set(plan.shards) - plan.used_shards
    if unused:
        raise ValueError(f"shards name no tensor of the state dict: "
                         f"{sorted(unused)}")
    doc = np.frombuffer(meta.dumps(tree), dtype=np.uint8).copy()
    plan.regs.tensors[meta.META] = doc
    plan.regs.tensors[meta.META_LEN] = np.array([doc.size], dtype=np.int64)
    if cuda_stream is None:
        cuda_stream = (torch.cuda.current_stream().cuda_stream
                       if plan.regs.any_cuda() else 0)
    return ck.save(plan.regs.tensors, step, lazy=lazy,
                   dtypes=plan.regs.dtypes, shards=plan.regs.shards,
                   cuda_stream=cuda_stream, deadline_s=deadline_s)


def read_metadata(ck, step="latest"):
    """(step, encoded tree) of a step saved by ``save_state_dict``."""
    length = np.zeros(1, dtype=np.int64)
    step = ck.load({meta.META_LEN: length}, step=step)
    doc = np.zeros(int(length[0]), dtype=np.uint8)
    ck.load({meta.META: doc}, step=step)
    return step, meta.loads(doc.tobytes())


def _has_tensor(value):
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, dict):
        return any(_has_tensor(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_tensor(v) for v in value)
    return False


class _LoadPlan:
    """Matches the saved tree with the destination; collects registrations.

    Builds the loaded tree without touching the destination's containers;
    tensors of the destination are reused (filled in place).
    """

    def __init__(self, shards, strict):
        self.shards = _shard_table(shards)
        self.strict = strict
        self.regs = _Registrations()
        self.targets = {}      # stored name -> tensor the step fills
        self.copy_back = []    # (destination, contiguous scratch)
        self.alias_copies = []  # (destination, primary)
        self.missing = []
        self.used_shards = set()

    def decode(self, enc, dest, path):
        if not isinstance(enc, dict):
            return enc
        if "d" in enc:
            out = {}
            for k_enc, v_enc in enc["d"]:
                k = meta.decode_plain(k_enc)
                sub = dest.get(k) if isinstance(dest, dict) else None
                out[k] = self.decode(v_enc, sub, path + (k,))
            if isinstance(dest, dict) and self.strict:
                self.missing += [meta.path_str(path + (k,))
                                 for k in dest.keys() - out.keys()
                                 if _has_tensor(dest[k])]
            return out
        if "l" in enc or "t" in enc:
            items = enc.get("l", enc.get("t"))
            seq = dest if isinstance(dest, (list, tuple)) else ()
            out = [self.decode(v, seq[i] if i < len(seq) else None,
                               path + (i,)) for i, v in enumerate(items)]
            return out if "l" in enc else tuple(out)
        if "T" in enc:
            return self.tensor(enc["T"], dest, path)
        if "A" in enc:
            return self.alias(enc["A"], dest, path)
        return meta.decode_plain(enc)

    def _target(self, info, dest, path, shape):
        key = meta.path_str(path)
        dtype = dtype_from_name(info["dtype"])
        if isinstance(dest, torch.Tensor):
            if dest.dtype != dtype:
                raise TypeError(f"'{key}' was saved as {info['dtype']}, the "
                                f"destination is {dtype_name(dest.dtype)}")
            return dest
        device = torch.device(info["device"])
        if device.type == "cuda" and (
                not torch.cuda.is_available()
                or (device.index or 0) >= torch.cuda.device_count()):
            device = torch.device("cpu")
        return torch.empty(shape, dtype=dtype, device=device)

    def tensor(self, info, dest, path):
        key = meta.path_str(path)
        shard = self.shards.get(key)
        if shard is not None:
            self.used_shards.add(key)
            if shard.shape is None and not isinstance(dest, torch.Tensor):
                raise ValueError(f"'{key}' is not in the destination: its "
                                 "shard needs a shape to allocate it")
            shape = shard.shape
        else:
            shape = info["shape"]
            if "global_shape" in info:
                shard = Shard(info["global_shape"], info["offset"],
                              info["shard_shape"])
        target = self._target(info, dest, path, shape)
        self.targets[info["name"]] = target
        view = stored_view(target)
        if (not target.is_contiguous()
                or view.data_ptr() != target.data_ptr()
                or target.is_conj() or target.is_neg()):
            scratch = torch.empty(target.shape, dtype=target.dtype,
                                  device=target.device)
            view = stored_view(scratch)
            self.copy_back.append((target, scratch))
        view = _fit_to_shard(view, shard, key)
        if view.numel() > 0:
            self.regs.add(info["name"], view, shard)
        return target

    def alias(self, info, dest, path):
        primary = self.targets.get(info["name"])
        if primary is None:
            raise ValueError(f"'{meta.path_str(path)}' shares memory with "
                             f"'{info['name']}', which the step lacks")
        if isinstance(dest, torch.Tensor):
            if not (dest.data_ptr() == primary.data_ptr()
                    and dest.shape == primary.shape):
                self.alias_copies.append((dest, primary))
            return dest
        return primary

    def finish(self):
        for target, scratch in self.copy_back:
            target.copy_(scratch)
        for dest, primary in self.alias_copies:
            dest.copy_(primary)


def _update_in_place(dest, new):
    """Writes the loaded tree ``new`` into the containers of ``dest``."""
    for key, value in new.items():
        old = dest.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            _update_in_place(old, value)
        elif isinstance(old, list) and isinstance(value, list):
            old[:] = value
        else:
            dest[key] = value


def load_state_dict(ck, state_dict, step="latest", *, shards=None,
                    strict=True):
    """Loads ``step`` (an int or "latest") into ``state_dict``; returns it.

    Tensors of ``state_dict`` are filled in place (same dtype; the shape the
    step saved, or the slice ``shards`` gives); tensors it lacks are
    allocated (on the saved CUDA device when present, else the CPU), and
    plain values are replaced by the saved ones, all written back into
    ``state_dict``'s own dicts and lists. Hand the parts to the objects:
    ``model.load_state_dict(sd["model"])``,
    ``optimizer.load_state_dict(sd["optim"])``.

    ``shards``: {path: Shard}, the slice of each sharded tensor this rank
    wants, when the layout differs from the saved one (another world size);
    without an entry a tensor loads the slice this rank saved. ``strict``:
    a tensor of ``state_dict`` that the step lacks raises KeyError (before
    anything is loaded). Raises stagger.Error from the Checkpointer
    (NOT_FOUND: no such step, or not saved by ``save_state_dict``).
    """
    if not isinstance(state_dict, dict):
        raise TypeError("state_dict must be a dict")
    step, tree = read_metadata(ck, step)
    plan = _LoadPlan(shards, strict)
    new = plan.decode(tree, state_dict, ())
    if plan.missing:
        raise KeyError(f"step {step} lacks tensors of the state dict: "
                       f"{sorted(plan.missing)}")
    unused = set(plan.shards) - plan.used_shards
    if unused:
        raise ValueError(f"shards name no tensor of step {step}: "
                         f"{sorted(unused)}")
    if plan.regs.tensors:
        ck.load(plan.regs.tensors, step=step, dtypes=plan.regs.dtypes,
                shards=plan.regs.shards)
    plan.finish()
    _update_in_place(state_dict, new)
    return step
