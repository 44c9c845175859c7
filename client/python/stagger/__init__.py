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
import atexit
import collections
import os
import sys
import weakref

from . import _stagger
from ._stagger import Error, SaveHandle

__all__ = ["Checkpointer", "Error", "SaveHandle"]

# Checkpointers alive in this process, for the exit hook below.
_live = weakref.WeakSet()


class Checkpointer(_stagger.Checkpointer):
    __doc__ = _stagger.Checkpointer.__doc__

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._job = kwargs.get("job", args[1] if len(args) > 1 else "?")
        self._deadline_s = kwargs.get("qos_deadline_s", 0.0)
        # The handles of the latest saves: one not yet durable is among
        # them, as a save waits while max_outstanding_saves are in flight.
        self._recent = collections.deque(
            maxlen=max(1, int(kwargs.get("max_outstanding_saves", 1))) + 1)
        _live.add(self)

    def save(self, *args, **kwargs):
        handle = super().save(*args, **kwargs)
        self._recent.append(handle)
        return handle
    save.__doc__ = _stagger.Checkpointer.save.__doc__


@atexit.register
def _finish_saves_at_exit():
    """A script that ends with saves in flight waits for them, saying so.

    The saves are not durable until they finish, so exit waits for them
    (Ctrl-C and every blocking call of the binding check for signals every
    0.1 s). A second Ctrl-C while waiting abandons them: the process exits
    130 and the last complete step stays the latest.
    """
    for ck in list(_live):
        if ck.wait_all(timeout=0):
            continue
        if all(h.done() for h in ck._recent):
            # Every save is durable (the caller waited for it); what is
            # left is the Checkpointer's bookkeeping after the handle was
            # answered: nothing to announce.
            ck.wait_all()
            continue
        bound = (f"at most about {ck._deadline_s:g} s (qos_deadline_s)"
                 if ck._deadline_s > 0 else "as fast as the servers take it")
        try:
            # Inside the try: a Ctrl-C that comes while this is written
            # abandons the saves too.
            print(f"stagger: waiting at exit for the saves in flight of job "
                  f"'{ck._job}' to become durable, {bound}; Ctrl-C abandons "
                  f"them", file=sys.stderr, flush=True)
            ck.wait_all()
        except KeyboardInterrupt:
            print(f"stagger: saves in flight of job '{ck._job}' abandoned: "
                  f"not durable; the last complete step stays the latest",
                  file=sys.stderr, flush=True)
            os._exit(130)
