"""Saving and loading torch state dicts with a stagger Checkpointer.

``save_state_dict`` walks a nested state dict (a model's, an optimizer's,
plain values around them), registers every tensor without a copy
(``tensors.py``) and stores the structure as JSON (``meta.py``).
``load_state_dict`` reads the structure back, fills the destination's
tensors in place, allocates the ones it lacks (a fresh optimizer's state)
and puts the plain values back. It loads what the destination asks for,
as PyTorch DCP's ``dcp.load`` does: what else the step holds is left out
(reported), a tensor of another shape or dtype raises
``StateDictMismatch`` naming both, and so does a tensor the step lacks
unless ``strict=False``.
"""
import concurrent.futures
import threading
import types
from typing import Dict, List, NamedTuple

import numpy as np
import torch

from . import dtensor, meta
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
        if t.layout != torch.strided and not dtensor.is_layout_tensor(t):
            raise TypeError(
                f"'{key}' is a {t.layout} tensor, which cannot be stored: "
                "save t.to_dense(), or its parts (for sparse COO: "
                "t.coalesce().indices() and .values())")
        info = {"dtype": dtype_name(t.dtype), "shape": list(t.shape),
                "device": str(t.device)}
        if dtensor.is_layout_tensor(t):
            if key in self.shards:
                raise ValueError(f"'{key}' is a {type(t).__name__}: its "
                                 "layout comes from the tensor, not from "
                                 "shards=")
            t, shard = dtensor.layout_shard_of(t, key)
            info["device"] = str(t.device)
            info["shape"] = list(t.shape)  # this rank's part, as a Shard's
            return self._store(t, key, path, info, shard)
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
        return self._store(t, key, path, info, shard)

    def _store(self, t, key, path, info, shard):
        """Registers ``t`` (this rank's part, ``shard`` of the global
        tensor or None) under a new name; its encoding."""
        memory = ((str(t.device), t.data_ptr(), t.dtype, tuple(t.shape),
                   t.stride()) if t.numel() > 0 else None)
        view = _fit_to_shard(stored_view(t), shard, key)
        name = self.namer.name(path)
        if shard is not None:
            info.update(global_shape=list(shard.global_shape),
                        offset=list(shard.offset),
                        shard_shape=list(view.shape[:t.dim()]))
        if view.numel() == 0:  # nothing to store; a load allocates it
            return {"T": dict(info, name=name)}
        if memory is not None:
            self.by_memory[memory] = name
        self.regs.add(name, view.contiguous(), shard)
        return {"T": dict(info, name=name)}


def save_state_dict(ck, state_dict, step, *, shards=None, replicated=False,
                    lazy=False, deadline_s=-1.0, cuda_stream=None,
                    durability="default"):
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
    ``durability``: "memory" (complete once held in the RAM of ``replicas``
    servers in as many failure domains; disk-level behind), "disk", or
    "default" (the Checkpointer's).
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
                   cuda_stream=cuda_stream, deadline_s=deadline_s,
                   durability=durability)


def prepare_state_dict(ck, state_dict, *, shards=None, replicated=False,
                       background=False):
    """Sizes ``ck``'s staging memory for ``state_dict`` and faults it in,
    so that the first ``save_state_dict`` of it does not pay for that in
    its stall: now, or with ``background=True`` on a thread of the
    Checkpointer's at idle priority, returning at once (a save meanwhile
    stops it and faults the rest itself, off the caller's thread). Call
    once at set-up, with the state dict (and ``shards``/``replicated``)
    the saves will use.
    """
    if not isinstance(state_dict, dict):
        raise TypeError("state_dict must be a dict")
    plan = _SavePlan(shards, replicated)
    tree = meta.encode(state_dict, (), plan.tensor)
    doc = np.frombuffer(meta.dumps(tree), dtype=np.uint8).copy()
    plan.regs.tensors[meta.META] = doc
    plan.regs.tensors[meta.META_LEN] = np.array([doc.size], dtype=np.int64)
    ck.prepare(plan.regs.tensors, dtypes=plan.regs.dtypes,
               shards=plan.regs.shards, background=background)


def read_metadata(ck, step="latest"):
    """(step, encoded tree) of a step saved by ``save_state_dict``."""
    length = np.zeros(1, dtype=np.int64)
    step = ck.load({meta.META_LEN: length}, step=step)
    doc = np.zeros(int(length[0]), dtype=np.uint8)
    ck.load({meta.META: doc}, step=step)
    return step, meta.loads(doc.tobytes())


class _Keys(NamedTuple):
    step: int
    missing_keys: List[str]
    unexpected_keys: List[str]
    mismatched_keys: List[str]


class LoadResult(_Keys):
    """What ``load_state_dict`` loaded, and which tensors it left alone.

    Keys are dotted paths ("model.fc.weight"). ``missing_keys``: tensors of
    the state dict that the step lacks (left untouched; only with
    ``strict=False``). ``unexpected_keys``: tensors of the step that the
    state dict did not ask for (not loaded). ``mismatched_keys``: tensors
    of both whose dtype or shape differ; a load with any raises, so it is
    empty in a returned result.

    ``from_other_ranks`` (an attribute, not a fifth item: the result still
    unpacks as ``step, missing, unexpected, mismatched``): {key: rank} of
    the per-rank tensors (not sharded: RNG states, step counters, a
    module's buffers saved without a layout) this rank took from another
    rank's save; a rank the saving job did not have (resuming on more
    ranks than saved) gets the lowest saved rank's. Empty when each came
    from this rank's own save.
    """

    # What _replace() and copies (which bypass __new__) read.
    from_other_ranks = types.MappingProxyType({})

    def __new__(cls, step, missing_keys, unexpected_keys, mismatched_keys,
                from_other_ranks=None):
        self = super().__new__(cls, step, missing_keys, unexpected_keys,
                               mismatched_keys)
        self.from_other_ranks = dict(from_other_ranks or {})
        return self

    def __repr__(self):
        return (f"LoadResult(step={self.step}, "
                f"missing_keys={self.missing_keys}, "
                f"unexpected_keys={self.unexpected_keys}, "
                f"mismatched_keys={self.mismatched_keys}, "
                f"from_other_ranks={self.from_other_ranks})")


class StateDictMismatch(RuntimeError):
    """The step cannot fill the state dict: a tensor of another shape or
    dtype (always), or one the step lacks (unless ``strict=False``).

    ``result``: the ``LoadResult`` of the match; the message names every
    mismatched tensor first, with both dtypes and shapes, then the missing
    ones. Nothing was loaded.
    """

    def __init__(self, result, details, strict=True):
        lines = [f"step {result.step} cannot be loaded into the state "
                 "dict:"]
        lines += [f"  mismatched {d}" for d in sorted(details)]
        if result.missing_keys and strict:
            lines.append("  missing (in the state dict, not in the step; "
                         "strict=False leaves them as they are): "
                         + ", ".join(map(repr, result.missing_keys)))
        n = len(result.unexpected_keys)
        if n:
            lines.append(f"  ({n} tensor{'s' if n > 1 else ''} of the step "
                         f"not asked for {'are' if n > 1 else 'is'} left "
                         "out, as a load does)")
        super().__init__("\n".join(lines))
        self.result = result


def _has_tensor(value):
    if isinstance(value, (torch.Tensor, np.ndarray)) or meta.is_stateful(value):
        return True
    if isinstance(value, dict):
        return any(_has_tensor(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_tensor(v) for v in value)
    return False


def _tensor_paths(value, path):
    """Dotted paths of the tensors in ``value`` (a destination subtree)."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return [meta.path_str(path)]
    if meta.is_stateful(value):
        value = value.state_dict()
    items = (value.items() if isinstance(value, dict) else
             enumerate(value) if isinstance(value, (list, tuple)) else ())
    return [p for k, v in items for p in _tensor_paths(v, path + (k,))]


def _describe(dtype, shape):
    return f"{dtype}{list(shape)}"


class _LoadPlan:
    """Matches the saved tree with the destination; collects registrations.

    Builds the loaded tree without touching the destination's containers;
    tensors of the destination are reused (filled in place). A dict of the
    destination that holds tensors asks for its keys only: what else the
    step saved there is left out (its tensors are unexpected). A dict
    without tensors (a fresh optimizer's ``state``) receives what the step
    saved there. With ``cast``, a tensor of another dtype that
    ``torch.can_cast`` allows is loaded through a copy of the saved dtype.
    """

    def __init__(self, shards, cast=False):
        self.cast = cast
        self.casts = []        # (destination, scratch of the saved dtype)
        self.stateful = []     # (object, its loaded state dict)
        self.shards = _shard_table(shards)
        self.regs = _Registrations()
        self.targets = {}      # stored name -> tensor the step fills
        self.keys = {}         # stored name -> dotted path
        self.skipped = {}      # stored name -> info of a tensor not loaded
        self.copy_back = []    # (destination, contiguous scratch)
        self.alias_copies = []  # (destination, primary)
        self.missing, self.unexpected, self.mismatched = [], [], []
        self.details = []      # "'path': saved ..., state dict ..."
        self.used_shards = set()

    def decode(self, enc, dest, path):
        if not isinstance(enc, dict):
            return enc
        if "d" in enc:
            holds = isinstance(dest, dict) and _has_tensor(dest)
            out = {}
            for k_enc, v_enc in enc["d"]:
                k = meta.decode_plain(k_enc)
                if holds and k not in dest:
                    self._skip(v_enc, path + (k,))  # not asked for
                    continue
                sub = dest.get(k) if isinstance(dest, dict) else None
                out[k] = self.decode(v_enc, sub, path + (k,))
            if isinstance(dest, dict):
                for k in dest.keys() - out.keys():
                    self.missing += _tensor_paths(dest[k], path + (k,))
            return out
        if "l" in enc or "t" in enc:
            items = enc.get("l", enc.get("t"))
            seq = dest if isinstance(dest, (list, tuple)) else ()
            out = [self.decode(v, seq[i] if i < len(seq) else None,
                               path + (i,)) for i, v in enumerate(items)]
            return out if "l" in enc else tuple(out)
        if "S" in enc:
            if not meta.is_stateful(dest):
                return self.decode(enc["S"], dest, path)  # its state dict
            loaded = self.decode(enc["S"], dest.state_dict(), path)
            self.stateful.append((dest, loaded))
            return dest
        if "T" in enc or "A" in enc:
            info = enc.get("T", enc.get("A"))
            into = (torch.from_numpy(meta.torch_view(dest))
                    if isinstance(dest, np.ndarray) else dest)
            got = (self.tensor(info, into, path) if "T" in enc else
                   self.alias(info, into, path))
            if isinstance(dest, np.ndarray):
                return dest
            if info.get("numpy") and isinstance(got, torch.Tensor):
                return got.numpy().view(np.dtype(info["numpy"]))
            return got
        return meta.decode_plain(enc)

    def _skip(self, enc, path):
        """Records the saved tensors under ``enc`` as unexpected; whether
        there were any (a subtree of plain values is loaded as usual)."""
        if not isinstance(enc, dict):
            return False
        if "T" in enc or "A" in enc:
            self.unexpected.append(meta.path_str(path))
            if "T" in enc:
                self.skipped[enc["T"]["name"]] = enc["T"]
            return True
        if "S" in enc:
            return self._skip(enc["S"], path)
        if "d" in enc:
            found = [self._skip(v, path + (meta.decode_plain(k),))
                     for k, v in enc["d"]]
        else:
            found = [self._skip(v, path + (i,))
                     for i, v in enumerate(enc.get("l", enc.get("t", ())))]
        return any(found)

    def _mismatch(self, key, info, dest, shard):
        """Records ``dest`` as mismatched when it cannot take the saved
        tensor (a dtype it may not be cast from, or a shape that is not the
        saved one or the shard's); whether it did."""
        dtype = dtype_from_name(info["dtype"])
        same_dtype = dest.dtype == dtype
        castable = not same_dtype and torch.can_cast(dtype, dest.dtype)
        fits = same_dtype or (self.cast and castable)
        if shard is not None:
            try:
                _fit_to_shard(stored_view(dest), shard, key)
                shape_ok = True
            except ValueError:
                shape_ok = False
        else:
            shape_ok = list(dest.shape) == list(info["shape"])
        if fits and shape_ok:
            return False
        saved = (shard.shape if shard is not None and shard.shape is not None
                 else info["shape"])
        hint = (" (cast=True loads it)" if shape_ok and castable else "")
        whole = info.get("global_shape", info["shape"])
        if (key not in self.shards and not shape_ok and
                len(dest.shape) == len(whole) and
                all(d <= w for d, w in zip(dest.shape, whole))):
            # A slice of the saved tensor: a sharded load that did not say
            # which slice this rank holds.
            hint = (f" (a slice of it? pass shards={{'{key}': "
                    f"stagger.torch.row_shard(...)}} or column_shard / "
                    f"chunk_shard to load this rank's slice)")
        self.mismatched.append(key)
        self.details.append(
            f"'{key}': saved {_describe(info['dtype'], saved)}, state dict "
            f"{_describe(dtype_name(dest.dtype), dest.shape)}{hint}")
        return True

    def _allocate(self, info, shape):
        device = torch.device(info["device"])
        if device.type == "cuda" and (
                not torch.cuda.is_available()
                or (device.index or 0) >= torch.cuda.device_count()):
            device = torch.device("cpu")
        return torch.empty(shape, dtype=dtype_from_name(info["dtype"]),
                           device=device)

    def tensor(self, info, dest, path):
        key = meta.path_str(path)
        self.keys[info["name"]] = key
        if dtensor.is_layout_tensor(dest):
            return self._into_dtensor(info, dest, key, path)
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
                if (isinstance(dest, torch.Tensor)
                        and list(dest.shape) == list(info["global_shape"])):
                    # A whole tensor for a saved slice (a consolidated
                    # model from FSDP or tensor-parallel ranks): all of it.
                    shard = _replicated_shard(dest.shape)
        loaded_into = None  # the destination a cast copy goes to
        if isinstance(dest, torch.Tensor):
            if self._mismatch(key, info, dest, shard):
                self.skipped[info["name"]] = info
                return dest
            target = dest
            if dest.dtype != dtype_from_name(info["dtype"]):
                loaded_into = dest
                target = torch.empty(dest.shape,
                                     dtype=dtype_from_name(info["dtype"]),
                                     device=dest.device)
                self.casts.append((dest, target))
        else:
            target = self._allocate(info, shape)
        self.targets[info["name"]] = loaded_into if loaded_into is not None \
            else target
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
        return loaded_into if loaded_into is not None else target

    def _into_dtensor(self, info, dest, key, path):
        """Fills the local tensor of DTensor or ShardedTensor ``dest`` with
        its slice of the saved global tensor, whatever layout saved it."""
        saved_global = info.get("global_shape", info["shape"])
        if (list(dest.shape) != list(saved_global)
                or dest.dtype != dtype_from_name(info["dtype"])):
            self.mismatched.append(key)
            self.details.append(
                f"'{key}': saved {_describe(info['dtype'], saved_global)}, "
                f"state dict {type(dest).__name__} "
                f"{_describe(dtype_name(dest.dtype), dest.shape)}")
            self.skipped[info["name"]] = info
            return dest
        local, shard = dtensor.layout_target_shard(dest, key)
        self.targets[info["name"]] = local
        view = stored_view(local)
        if not local.is_contiguous() or view.data_ptr() != local.data_ptr():
            scratch = torch.empty(local.shape, dtype=local.dtype,
                                  device=local.device)
            view = stored_view(scratch)
            self.copy_back.append((local, scratch))
        if view.numel() > 0:
            self.regs.add(info["name"], view, shard)
        return dest

    def alias(self, info, dest, path):
        name = info["name"]
        if name not in self.targets and name in self.skipped:
            # The tensor it shares memory with was not loaded: this one
            # takes its place.
            return self.tensor(self.skipped.pop(name), dest, path)
        primary = self.targets.get(name)
        if primary is None:
            raise ValueError(f"'{meta.path_str(path)}' shares memory with "
                             f"'{name}', which the step lacks")
        if isinstance(dest, torch.Tensor):
            if dest.dtype != primary.dtype or dest.shape != primary.shape:
                key = meta.path_str(path)
                self.mismatched.append(key)
                self.details.append(
                    f"'{key}': saved "
                    f"{_describe(info['dtype'], info['shape'])}, state dict "
                    f"{_describe(dtype_name(dest.dtype), dest.shape)}")
            elif dest.data_ptr() != primary.data_ptr():
                self.alias_copies.append((dest, primary))
            return dest
        return primary

    def result(self, step, from_other_ranks=None):
        return LoadResult(step, sorted(self.missing),
                          sorted(self.unexpected), sorted(self.mismatched),
                          {self.keys[name]: rank for name, rank
                           in sorted((from_other_ranks or {}).items())
                           if name in self.keys})

    def finish(self):
        for target, scratch in self.copy_back:
            target.copy_(scratch)
        for dest, scratch in self.casts:
            dest.copy_(scratch)  # casts
        for obj, loaded in self.stateful:
            obj.load_state_dict(loaded)
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
                    strict=True, cast=False):
    """Loads ``step`` (an int or "latest") into ``state_dict``.

    Tensors of ``state_dict`` are filled in place (the saved dtype and
    shape, or the slice ``shards`` gives); tensors it lacks are allocated
    (on the saved CUDA device when present, else the CPU), and plain values
    are replaced by the saved ones, all written back into ``state_dict``'s
    own dicts and lists. Hand the parts to the objects:
    ``model.load_state_dict(sd["model"])``,
    ``optimizer.load_state_dict(sd["optim"])``.

    What is loaded is what ``state_dict`` asks for, as PyTorch DCP's
    ``dcp.load`` does: tensors are matched by path, and what else the step
    holds (an optimizer's state when only ``{"model": ...}`` is given, plain
    values under keys the state dict lacks) is left out and listed in
    ``unexpected_keys``; a dict without tensors, such as a fresh
    optimizer's ``state``, receives what the step saved there. A tensor of
    both with another shape, or a dtype it is not cast to, always raises
    ``StateDictMismatch`` (a RuntimeError), the mismatches named first
    with both dtypes and shapes; so does a tensor of ``state_dict`` that
    the step lacks, unless ``strict=False`` (it is then left as it is and
    listed in ``missing_keys``). Nothing is loaded when it raises.
    ``cast=True`` loads a tensor saved with another dtype when
    ``torch.can_cast`` allows it (float32 into a float64 model, as
    ``Module.load_state_dict``'s copy would), through a copy of the saved
    dtype.

    ``shards``: {path: Shard}, the slice of each sharded tensor this rank
    wants, when the layout differs from the saved one (another world size);
    without an entry a tensor loads the slice this rank saved.

    Returns a ``LoadResult``: the step, ``missing_keys``,
    ``unexpected_keys``, ``mismatched_keys`` and ``from_other_ranks``. Raises stagger.Error from
    the Checkpointer (NOT_FOUND: no such step, or not saved by
    ``save_state_dict``).
    """
    if not isinstance(state_dict, dict):
        raise TypeError("state_dict must be a dict")
    step, tree = read_metadata(ck, step)
    plan = _LoadPlan(shards, cast=cast)
    new = plan.decode(tree, state_dict, ())
    result = plan.result(step)
    if result.mismatched_keys or (strict and result.missing_keys):
        raise StateDictMismatch(result, plan.details, strict=strict)
    unused = set(plan.shards) - plan.used_shards
    if unused:
        raise ValueError(f"shards name no tensor of step {step}: "
                         f"{sorted(unused)}")
    if plan.regs.tensors:
        ck.load(plan.regs.tensors, step=step, dtypes=plan.regs.dtypes,
                shards=plan.regs.shards)
        result = plan.result(step, ck.last_load_from_other_ranks())
    plan.finish()
    _update_in_place(state_dict, new)
    return result


def async_save(ck, state_dict, step, **options):
    """``save_state_dict`` with a ``concurrent.futures.Future`` for its end,
    as ``torch.distributed.checkpoint.async_save`` returns one: ``done()``,
    ``result(timeout)`` (the save's stats once durable; its error raised)
    and ``add_done_callback``. Returns once the snapshot is taken, as
    ``save_state_dict`` does; ``future.handle`` is the SaveHandle. A thread
    of its own waits for the save.
    """
    handle = save_state_dict(ck, state_dict, step, **options)
    future = concurrent.futures.Future()
    future.set_running_or_notify_cancel()
    future.handle = handle

    def wait():
        try:
            handle.wait()
            future.set_result(handle.stats())
        except BaseException as e:  # the save's error, for result()
            future.set_exception(e)

    threading.Thread(target=wait, name=f"stagger-async-save-{step}",
                     daemon=True).start()
    return future
