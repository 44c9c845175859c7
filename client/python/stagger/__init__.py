"""stagger: checkpoints for deep-learning training.

    ck = stagger.Checkpointer(servers="embedded:/tmp/ckpt", job="run1",
                              rank=0, world_size=1)
    h = ck.save({"w": array}, step=5)
    h.wait()
    ck.load({"w": out}, step="latest")

Errors raise stagger.Error; its .code names the status (e.g. "NOT_FOUND").
PyTorch state dicts, sharding and training hooks: ``stagger.torch``
(imported on its own; it needs torch).
"""
from ._stagger import Checkpointer, Error, SaveHandle

__all__ = ["Checkpointer", "Error", "SaveHandle"]
