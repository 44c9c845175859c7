"""stagger.torch: checkpoint torch state dicts with stagger.

    import stagger.torch as st
    ck = st.checkpointer("127.0.0.1:7700", job="run1")   # rank from torchrun
    hooks = st.install_hooks(ck, ddp_model, optimizer)
    sd = {"model": model.state_dict(), "optim": optimizer.state_dict(),
          "epoch": epoch}
    st.prepare_state_dict(ck, sd, replicated=["model", "optim"])  # set-up
    st.save_state_dict(ck, sd, step, replicated=["model", "optim"],
                       lazy=True)                  # fenced by the hooks
    step = st.load_state_dict(ck, sd).step        # fills sd in place
    model.load_state_dict(sd["model"])
    optimizer.load_state_dict(sd["optim"])

Objects with ``state_dict()``/``load_state_dict()`` may stand in the state
dict themselves (``{"model": model, "optim": optimizer}``), as in PyTorch
DCP: a load calls their ``load_state_dict``. ``async_save`` returns a
``concurrent.futures.Future``.

Sharded tensors carry a ``Shard`` (global shape, offset; ``row_shard``,
``column_shard``, ``flat_shard``), so a step loads on any world size.

FSDP and DTensor (torch 2.x): the state dicts of
``torch.distributed.checkpoint.state_dict.get_model_state_dict`` and
``get_optimizer_state_dict`` (DTensors under FSDP2's ``fully_shard``,
ShardedTensors under FSDP1) save as they are, each rank its shards, and
load on any world size without ``shards=``; apply them with
``set_model_state_dict`` / ``set_optimizer_state_dict``.
``install_hooks(ck, fsdp_model, optimizer)`` marks FSDP's forward and
backward as collectives.
"""
from .env import DistEnv, checkpointer, dist_env
from .hooks import Hooks, install_hooks
from .sharding import (Shard, chunk_shard, column_shard, flat_shard,
                       local_slice, replicated, row_shard)
from .state import (LoadResult, StateDictMismatch, async_save,
                    load_state_dict, prepare_state_dict, read_metadata,
                    save_state_dict)

__all__ = [
    "DistEnv", "Hooks", "LoadResult", "Shard", "StateDictMismatch",
    "async_save", "checkpointer", "chunk_shard", "column_shard", "dist_env",
    "export_dcp", "flat_shard", "import_dcp",
    "install_hooks", "load_state_dict", "local_slice", "prepare_state_dict",
    "read_metadata",
    "replicated", "row_shard", "save_state_dict",
]


def import_dcp(ck, dcp_dir, step):
    """``stagger.torch.dcp.import_dcp``: a DCP checkpoint saved as ``step``.
    (Imported when called, so that ``python3 -m stagger.torch.dcp`` runs
    the module once.)"""
    from .dcp import import_dcp as run
    return run(ck, dcp_dir, step)


def export_dcp(ck, step, dcp_dir):
    """``stagger.torch.dcp.export_dcp``: ``step`` written as a DCP
    checkpoint."""
    from .dcp import export_dcp as run
    return run(ck, step, dcp_dir)
