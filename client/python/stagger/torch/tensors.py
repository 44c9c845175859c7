"""Torch tensors as arrays the binding registers, without a copy.

Every tensor travels as a view of its memory with an integer element type of
the same size (``int16`` for ``bfloat16``, ``uint8`` for ``bool``, ...): on
the CPU as a numpy array (the buffer protocol), on CUDA as a torch tensor
(``__cuda_array_interface__``, its device pointer). The real element type
goes to the binding as a stagger dtype (``dtypes={name: "BF16"}``), so the
checkpoint records it. The integer view exists for every dtype in every
torch version, unlike numpy's or DLPack's support for ``bfloat16`` and
``bool``.

Complex tensors are stored as their real view (``torch.view_as_real``: one
more dimension of 2). Element types stagger has no name for (``float8_*``)
are stored as unsigned integers of their size; the state dict's metadata
keeps the torch dtype either way.
"""
import torch

# Stagger dtype of each torch dtype the checkpoint format names directly.
_STAGGER_DTYPES = {
    "float64": "F64", "float32": "F32", "float16": "F16",
    "bfloat16": "BF16", "int64": "I64", "int32": "I32", "int16": "I16",
    "int8": "I8", "uint64": "U64", "uint32": "U32", "uint16": "U16",
    "uint8": "U8", "bool": "BOOL",
}
_UNSIGNED_OF_SIZE = {1: "U8", 2: "U16", 4: "U32", 8: "U64"}
# The integer view of each element size (torch 1.13 has no uint16..uint64).
_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32,
                8: torch.int64}


def dtype_name(dtype):
    """'float32' for torch.float32: the name kept in the metadata."""
    return str(dtype).replace("torch.", "")


def dtype_from_name(name):
    """The torch dtype called ``name``; TypeError if this torch lacks it."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"this torch ({torch.__version__}) has no dtype "
                        f"'{name}'")
    return dtype


def stored_view(tensor):
    """The tensor as stagger stores it: a real, non-conjugated view.

    Complex tensors become their real view (a last dimension of 2); the
    result shares the tensor's memory whenever the tensor is contiguous.
    """
    t = tensor.detach()
    if t.is_complex():
        t = torch.view_as_real(t.resolve_conj())
    return t.resolve_neg()


def stagger_dtype(dtype):
    """The stagger dtype a tensor of (real) ``dtype`` is stored as."""
    name = dtype_name(dtype)
    if name in _STAGGER_DTYPES:
        return _STAGGER_DTYPES[name]
    size = torch.empty((), dtype=dtype).element_size()
    if size not in _UNSIGNED_OF_SIZE:
        raise TypeError(f"tensors of dtype {name} cannot be stored")
    return _UNSIGNED_OF_SIZE[size]


def as_array(view):
    """An array sharing ``view``'s memory for the binding.

    ``view`` must be contiguous and real (see ``stored_view``). Returns a
    numpy array (CPU) or an integer-typed CUDA tensor.
    """
    if view.is_sparse or view.layout != torch.strided:
        raise TypeError(f"{view.layout} tensors cannot be stored")
    raw = view.view(_INT_OF_SIZE[view.element_size()])
    if raw.is_cuda:
        return raw
    if raw.device.type != "cpu":
        raise TypeError(f"tensors on {raw.device} cannot be stored (CPU and "
                        "CUDA only)")
    return raw.numpy()
