"""DTensor (torch >= 2.1: FSDP2, tensor parallelism) as stagger shards.

A DTensor is a global tensor laid out over a device mesh; this rank holds
``to_local()``. Its global shape and this rank's offset in it come from the
tensor itself, so a state dict of DTensors needs no ``shards=``:

* ``Shard(dim)`` placements (even or uneven, on any mesh dimension) give a
  slice of the global tensor, recorded as a ``Shard``;
* a DTensor replicated over the whole mesh is stored once (by rank 0), as
  ``replicated=`` tensors are;
* a slice replicated over some mesh dimensions is stored by the ranks at
  coordinate 0 of those dimensions only; the others store nothing of it;
* ``Partial`` placements (a sum not reduced yet) are refused: the bytes of
  one rank are not the tensor.

Loading into a DTensor fills its local tensor with its own slice, whatever
layout the step was saved with (another mesh, another sharding dim).

A ``ShardedTensor`` (FSDP1's ``SHARDED_STATE_DICT``) is taken the same way:
its global shape and this rank's shard come from its metadata. One shard
per rank (FSDP1's layout; a rank may hold none) is supported; a rank with
several is refused, naming the entry.
"""
import torch

from .sharding import Shard

try:  # torch >= 2.4
    from torch.distributed.tensor import DTensor, Partial, Replicate
    from torch.distributed.tensor._utils import (
        compute_local_shape_and_global_offset)
except ImportError:  # pragma: no cover - torch 2.1 .. 2.3, or none
    try:
        from torch.distributed._tensor import DTensor, Replicate
        from torch.distributed._tensor.placement_types import (
            _Partial as Partial)
        from torch.distributed._tensor._utils import (
            compute_local_shape_and_global_offset)
    except ImportError:
        DTensor = None

try:  # Debian's torch 1.13 on Python 3.11 fails importing it (ValueError)
    from torch.distributed._shard.sharded_tensor import ShardedTensor
except Exception:  # pragma: no cover - no torch.distributed, or broken
    ShardedTensor = None


def is_sharded_tensor(value):
    """Whether ``value`` is a ShardedTensor (FSDP1's sharded state dicts)."""
    return ShardedTensor is not None and isinstance(value, ShardedTensor)


def is_layout_tensor(value):
    """Whether ``value`` carries its own global layout (DTensor or
    ShardedTensor): its shards come from the tensor, not from shards=."""
    return is_dtensor(value) or is_sharded_tensor(value)


def layout_shard_of(t, path):
    """shard_of for a DTensor or a ShardedTensor."""
    return sharded_shard_of(t, path) if is_sharded_tensor(t) \
        else shard_of(t, path)


def layout_target_shard(t, path):
    """target_shard for a DTensor or a ShardedTensor."""
    return sharded_shard_of(t, path) if is_sharded_tensor(t) \
        else target_shard(t)


def sharded_shard_of(t, path):
    """(local tensor, Shard) for ShardedTensor ``t``: its one local shard,
    or an empty tensor and an empty Shard on a rank that holds none.
    ValueError naming ``path`` for several local shards."""
    global_shape = tuple(t.size())
    shards = t.local_shards()
    if len(shards) > 1:
        raise ValueError(f"'{path}' is a ShardedTensor with {len(shards)} "
                         "shards on this rank; one per rank (FSDP1's "
                         "layout) is supported")
    if not shards:
        dtype = t.metadata().tensor_properties.dtype
        empty = torch.empty((0,) * len(global_shape), dtype=dtype)
        return empty, Shard(global_shape, (0,) * len(global_shape),
                            (0,) * len(global_shape))
    md = shards[0].metadata
    return shards[0].tensor, Shard(global_shape, tuple(md.shard_offsets),
                                   tuple(md.shard_sizes))


def is_dtensor(value):
    """Whether ``value`` is a DTensor (False where torch has none)."""
    return DTensor is not None and isinstance(value, DTensor)


def shard_of(t, path):
    """(local tensor, Shard) for DTensor ``t``; the Shard's shape is None
    and its offset None-free. For a rank that stores nothing of ``t`` (a
    replica at a nonzero coordinate of a replicated mesh dimension), the
    local tensor is an empty slice of the same rank count. ValueError
    naming ``path`` for a Partial placement."""
    mesh, placements = t.device_mesh, t.placements
    if any(isinstance(p, Partial) for p in placements):
        raise ValueError(f"'{path}' is a DTensor with a Partial placement "
                         f"({placements}): reduce it (redistribute to "
                         "Shard or Replicate) before saving")
    global_shape = tuple(t.shape)
    local = t.to_local()
    if all(isinstance(p, Replicate) for p in placements):
        return local, Shard(global_shape, (0,) * len(global_shape),
                            global_shape)
    shape, offset = compute_local_shape_and_global_offset(
        t.shape, mesh, placements)
    coords = mesh.get_coordinate()
    stores = coords is not None and all(
        coords[d] == 0 for d, p in enumerate(placements)
        if isinstance(p, Replicate))
    if not stores:
        empty = local.reshape(-1)[:0].reshape((0,) * local.dim())
        return empty, Shard(global_shape, (0,) * len(global_shape),
                            (0,) * len(global_shape))
    return local, Shard(global_shape, tuple(offset), tuple(shape))


def target_shard(t):
    """(local tensor to fill, Shard it wants) for a destination DTensor."""
    if all(isinstance(p, Replicate) for p in t.placements):
        global_shape = tuple(t.shape)
        return t.to_local(), Shard(global_shape, (0,) * len(global_shape),
                                   global_shape)
    shape, offset = compute_local_shape_and_global_offset(
        t.shape, t.device_mesh, t.placements)
    return t.to_local(), Shard(tuple(t.shape), tuple(offset), tuple(shape))
