"""PyTorch DCP checkpoints in and out of stagger (torch >= 2.2).

``import_dcp(ck, dcp_dir, step)`` reads a DCP checkpoint through torch's
own ``FileSystemReader`` (so DCP reads its format), whole, into one
process, and saves it as ``step`` of ``ck``'s job: nested dicts, tensors
and the plain values DCP stored come back as they were saved.

``export_dcp(ck, step, dcp_dir)`` loads ``step`` whole (every sharded
tensor gathered at its global shape) and writes it with ``dcp.save`` in
one process: ``dcp.load`` reads it back, on any number of ranks, as DCP
reshards its own checkpoints.

Both run in one process and hold the whole state in its memory.

    python3 -m stagger.torch.dcp import --dir D --servers S --job J --step N
    python3 -m stagger.torch.dcp export --dir D --servers S --job J [--step N]
"""
import argparse
import sys

import torch

from . import meta
from .state import load_state_dict, read_metadata, save_state_dict
from .tensors import dtype_from_name


def _dcp():
    try:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.default_planner import (
            _EmptyStateDictLoadPlanner)
        from torch.distributed.checkpoint.state_dict_loader import (
            _load_state_dict)
    except ImportError as e:
        raise RuntimeError(f"torch {torch.__version__} cannot read DCP "
                           f"checkpoints here ({e}); torch >= 2.2 can") from e
    return dcp, _EmptyStateDictLoadPlanner, _load_state_dict


def read_dcp(dcp_dir):
    """The whole state dict of the DCP checkpoint in ``dcp_dir``."""
    dcp, empty_planner, load = _dcp()
    sd = {}
    load(sd, storage_reader=dcp.FileSystemReader(str(dcp_dir)),
         planner=empty_planner(), no_dist=True)
    return sd


def import_dcp(ck, dcp_dir, step):
    """Saves the DCP checkpoint in ``dcp_dir`` as ``step``; the
    SaveHandle (durable once it is waited for)."""
    return save_state_dict(ck, read_dcp(dcp_dir), step)


def _whole(enc):
    """A destination for the encoded tree: every saved tensor empty at its
    global shape (so a load gathers all of it), plain values as saved."""
    if not isinstance(enc, dict):
        return enc
    if "T" in enc:
        info = enc["T"]
        shape = info.get("global_shape", info["shape"])
        return torch.empty(shape, dtype=dtype_from_name(info["dtype"]))
    if "A" in enc:
        return None  # shares memory with an earlier tensor: loaded there
    if "d" in enc:
        return {meta.decode_plain(k): _whole(v) for k, v in enc["d"]}
    if "l" in enc:
        return [_whole(v) for v in enc["l"]]
    if "t" in enc:
        return tuple(_whole(v) for v in enc["t"])
    if "S" in enc:
        return _whole(enc["S"])
    return meta.decode_plain(enc)


def export_dcp(ck, step, dcp_dir):
    """Writes ``step`` (or "latest") as a DCP checkpoint in ``dcp_dir``;
    the step written."""
    dcp, _, _ = _dcp()
    step, tree = read_metadata(ck, step)
    sd = _whole(tree)
    load_state_dict(ck, sd, step=step)
    dcp.save(sd, checkpoint_id=str(dcp_dir), no_dist=True)
    return step


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python3 -m stagger.torch.dcp",
        description="PyTorch DCP checkpoints in and out of stagger")
    p.add_argument("command", choices=["import", "export"])
    p.add_argument("--dir", required=True, help="the DCP checkpoint")
    p.add_argument("--servers", required=True, help="host:port[,...]")
    p.add_argument("--job", required=True)
    p.add_argument("--step", default=None,
                   help="import: the step to save as (required); export: "
                        "the step to write (default: the latest)")
    p.add_argument("--token", default="")
    a = p.parse_args(argv)
    if a.command == "import" and a.step is None:
        p.error("import needs --step")
    import stagger
    from .env import checkpointer
    try:
        ck = checkpointer(a.servers, a.job, rank=0, world_size=1,
                          token=a.token)
        if a.command == "import":
            import_dcp(ck, a.dir, int(a.step)).wait()
            print(f"imported {a.dir} as job '{a.job}' step {a.step}")
        else:
            step = export_dcp(ck,
                              "latest" if a.step is None else int(a.step),
                              a.dir)
            print(f"exported job '{a.job}' step {step} to {a.dir}")
    except (RuntimeError, OSError, ValueError, stagger.Error) as e:
        print(f"stagger {a.command}-dcp: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
