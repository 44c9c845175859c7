"""The structure of a state dict as JSON, tensors replaced by references.

A state dict is a tree of dicts (keys of any plain type: optimizer state is
keyed by ints), lists, tuples, tensors and plain values. The tree without
the tensors' bytes travels in the checkpoint as JSON in a per-rank uint8
tensor (``META``), its length in another (``META_LEN``), so a load needs no
object of the saved kind to exist beforehand (a fresh optimizer has empty
state) and plain values come back with their types.

Encoding: a JSON scalar (None, bool, int, float, str) stands for itself;
every other value is an object with one tag key:
``{"d": [[key, value], ...]}`` a dict (``"o": 1`` for an OrderedDict),
``{"l": [...]}`` a list, ``{"t": [...]}`` a tuple, ``{"size": [...]}``,
``{"dtype": "float32"}``, ``{"device": "cuda:0"}``, ``{"T": info}`` a stored
tensor and ``{"A": info}`` a tensor sharing the memory of an earlier one
(tied weights); a numpy array is a tensor whose info has ``"numpy"``, its
numpy dtype (unsigned ones torch cannot hold stored as signed integers of
their size),
``{"np": "float32", "v": 1.5}`` a numpy scalar, and ``{"S": tree}`` a
``Stateful`` object (anything with ``state_dict()`` and
``load_state_dict()``, as PyTorch DCP takes them: a module, an optimizer)
saved as its ``state_dict()``. Floats round-trip exactly (``repr``), NaN
and infinities included.
"""
import hashlib
import json
import re
from collections import OrderedDict

import numpy as np
import torch

FORMAT = "stagger.torch/1"
META = "__stagger_meta__"
META_LEN = "__stagger_meta_len__"
_RESERVED_PREFIX = "__stagger_"
_NAME_OK = re.compile(r"[A-Za-z0-9._-]{1,128}\Z")
_NAME_BAD_CHARS = re.compile(r"[^A-Za-z0-9._-]")
_PLAIN = (type(None), bool, int, float, str)


# Unsigned numpy dtypes torch (before 2.3) cannot hold, stored as the
# signed integers of their size: the bits are the same.
_AS_SIGNED = {np.dtype(np.uint16): np.int16, np.dtype(np.uint32): np.int32,
              np.dtype(np.uint64): np.int64}


def torch_view(array):
    """``array`` as a dtype torch.from_numpy takes, same bits."""
    signed = _AS_SIGNED.get(array.dtype.newbyteorder("="))
    if signed is None:
        return array
    return array.astype(array.dtype.newbyteorder("="), copy=False).view(
        signed)


def is_stateful(value):
    """Whether ``value`` is saved and loaded through its state dict."""
    return (not isinstance(value, (dict, torch.Tensor))
            and callable(getattr(value, "state_dict", None))
            and callable(getattr(value, "load_state_dict", None)))


def path_str(path):
    """'model.fc.weight' for ('model', 'fc.weight'): the tensor's key."""
    return ".".join(str(k) for k in path)


class Namer:
    """Assigns each tensor a unique stagger name derived from its path.

    The name is the dotted path when that is a valid, unused stagger name
    (``[A-Za-z0-9._-]{1,128}``); otherwise the path with other characters
    replaced, cut to 100 characters, plus a hash of the path.
    """

    def __init__(self):
        self._used = {META, META_LEN}

    def name(self, path):
        base = path_str(path)
        if (_NAME_OK.match(base) and base not in self._used
                and not base.startswith(_RESERVED_PREFIX)):
            self._used.add(base)
            return base
        digest = hashlib.sha1(repr(path).encode()).hexdigest()[:16]
        stem = _NAME_BAD_CHARS.sub("_", base)[:100]
        name, i = f"{stem}-{digest}", 0
        while name in self._used:
            i += 1
            name = f"{stem}-{digest}-{i}"
        self._used.add(name)
        return name


def encode(value, path, on_tensor):
    """The JSON-ready encoding of ``value`` at ``path``.

    ``on_tensor(tensor, path)`` returns a tensor's encoding. Raises
    TypeError naming the path for a value of another type.
    """
    if isinstance(value, torch.Tensor):
        return on_tensor(value, path)
    if isinstance(value, np.ndarray):
        try:
            t = torch.from_numpy(torch_view(np.ascontiguousarray(value)))
        except TypeError as e:
            raise TypeError(f"state dict entry '{path_str(path)}' is a numpy "
                            f"array of dtype {value.dtype}, which torch "
                            "cannot hold") from e
        enc = on_tensor(t, path)
        next(iter(enc.values()))["numpy"] = value.dtype.str
        return enc
    if isinstance(value, np.generic):
        if not isinstance(value, (np.number, np.bool_)):
            raise TypeError(f"state dict entry '{path_str(path)}' is a numpy "
                            f"{type(value).__name__}: only numbers and bools "
                            "can be stored")
        return {"np": value.dtype.str, "v": value.item()}
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, dict):
        items = [[encode_key(k, path), encode(v, path + (k,), on_tensor)]
                 for k, v in value.items()]
        out = {"d": items}
        if isinstance(value, OrderedDict):
            out["o"] = 1
        return out
    if isinstance(value, torch.Size):
        return {"size": list(value)}
    if isinstance(value, (list, tuple)):
        items = [encode(v, path + (i,), on_tensor)
                 for i, v in enumerate(value)]
        return {"l" if isinstance(value, list) else "t": items}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).replace("torch.", "")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if is_stateful(value):
        return {"S": encode(value.state_dict(), path, on_tensor)}
    raise TypeError(
        f"state dict entry '{path_str(path)}' is a {type(value).__name__}: "
        "only tensors, numpy arrays and scalars, dicts, lists, tuples, None, "
        "bool, int, float, str, torch.Size, torch.dtype, torch.device and "
        "objects with state_dict() and load_state_dict() can be stored")


def encode_key(key, path):
    """The encoding of a dict key (plain values and tuples of them)."""
    def refuse(value, p):
        raise TypeError(f"state dict key at '{path_str(path)}' holds a "
                        "tensor; keys must be plain values")
    return encode(key, path, refuse)


def decode_plain(enc):
    """Decodes an encoding that holds no tensor (a key, or a plain value)."""
    if not isinstance(enc, dict):
        return enc
    if "d" in enc:
        cls = OrderedDict if enc.get("o") else dict
        return cls((decode_plain(k), decode_plain(v)) for k, v in enc["d"])
    if "l" in enc:
        return [decode_plain(v) for v in enc["l"]]
    if "t" in enc:
        return tuple(decode_plain(v) for v in enc["t"])
    if "size" in enc:
        return torch.Size(enc["size"])
    if "dtype" in enc:
        return getattr(torch, enc["dtype"])
    if "device" in enc:
        return torch.device(enc["device"])
    if "np" in enc:
        return np.dtype(enc["np"]).type(enc["v"])
    if "S" in enc:
        return decode_plain(enc["S"])
    raise ValueError(f"unknown entry in the state dict metadata: {enc!r}")


def dumps(tree):
    """The metadata document for an encoded tree, as UTF-8 bytes."""
    return json.dumps({"format": FORMAT, "tree": tree},
                      separators=(",", ":")).encode()


def loads(data):
    """The encoded tree of a metadata document; ValueError if foreign."""
    doc = json.loads(data.decode())
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError("the step's state dict metadata is not in format "
                         f"{FORMAT}")
    return doc["tree"]
