"""Which slice of a global tensor a rank holds.

A ``Shard`` is what the checkpoint records per tensor (the C++
``TensorSpec.global_shape`` and ``global_offset``): a step saved with one
layout loads with any other, on any number of ranks. The helpers describe
the common layouts:

* ``row_shard`` / ``column_shard`` / ``chunk_shard``: the pieces of
  ``torch.chunk(full, world_size, dim)`` (tensor parallelism);
* ``flat_shard``: FSDP's flat parameter, each rank holding an equal,
  padded piece of a 1-D tensor; the padding is not stored;
* ``replicated``: the whole tensor on every rank, stored once (by rank 0).
"""
from collections import namedtuple


class Shard(namedtuple("Shard", "global_shape offset shape")):
    """The slice ``offset`` (``shape`` long) of a ``global_shape`` tensor.

    ``shape`` may be None: the local tensor's own shape. A 1-D local tensor
    longer than ``shape`` (FSDP padding) stores only its first ``shape[0]``
    elements.
    """

    __slots__ = ()

    def __new__(cls, global_shape, offset, shape=None):
        global_shape = tuple(int(d) for d in global_shape)
        offset = tuple(int(d) for d in offset)
        if len(offset) != len(global_shape):
            raise ValueError(f"offset {offset} and global shape "
                             f"{global_shape} differ in rank")
        if shape is not None:
            shape = tuple(int(d) for d in shape)
            if len(shape) != len(global_shape):
                raise ValueError(f"shape {shape} and global shape "
                                 f"{global_shape} differ in rank")
        return super().__new__(cls, global_shape, offset, shape)

    def slices(self, shape=None):
        """Index of this slice in the global tensor (``full[s.slices()]``)."""
        local = self.shape if self.shape is not None else shape
        if local is None:
            raise ValueError("the shard has no shape: pass the local shape")
        return tuple(slice(o, o + n) for o, n in zip(self.offset, local))


def replicated(shape):
    """The whole tensor of ``shape`` on every rank (stored once)."""
    shape = tuple(int(d) for d in shape)
    return Shard(shape, (0,) * len(shape), shape)


def chunk_shard(global_shape, chunks, index, dim=0):
    """Piece ``index`` of ``torch.chunk(full, chunks, dim)``.

    As ``torch.chunk``: pieces of ceil(n / chunks), the last one shorter;
    an index past the last piece gets an empty slice (nothing is stored).
    """
    global_shape = tuple(int(d) for d in global_shape)
    if not 0 <= index < chunks:
        raise ValueError(f"index {index} is not in [0, {chunks})")
    dim = dim % len(global_shape)
    n = global_shape[dim]
    size = -(-n // chunks)
    start = min(index * size, n)
    offset = [0] * len(global_shape)
    offset[dim] = start
    shape = list(global_shape)
    shape[dim] = min(size, n - start)
    return Shard(global_shape, offset, shape)


def row_shard(global_shape, rank, world_size):
    """Rows of rank ``rank``: ``torch.chunk(full, world_size, 0)[rank]``."""
    return chunk_shard(global_shape, world_size, rank, dim=0)


def column_shard(global_shape, rank, world_size):
    """Columns (last dimension) of rank ``rank`` as ``torch.chunk``."""
    return chunk_shard(global_shape, world_size, rank, dim=-1)


def flat_shard(numel, rank, world_size):
    """Rank ``rank``'s piece of a flat 1-D tensor of ``numel`` (FSDP).

    Each rank holds ceil(numel / world_size) elements, the global tensor
    padded to a multiple of world_size; the shard covers only the real
    elements, so the checkpoint loads on another world size.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, {world_size})")
    size = -(-int(numel) // world_size)
    start = min(rank * size, numel)
    return Shard((numel,), (start,), (min(size, numel - start),))


def local_slice(full, shard):
    """A contiguous copy of ``shard``'s slice of the global tensor ``full``."""
    piece = full[shard.slices()]
    return piece.clone() if piece.is_contiguous() else piece.contiguous()
