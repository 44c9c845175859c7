"""Training-loop hooks: QoS marks and lazy-save fences, installed once.

``install_hooks(ck, model, optimizer)`` connects a Checkpointer to a
training loop so the loop needs no stagger calls besides saving:

* a DDP communication hook brackets every gradient all-reduce with
  ``ck.collective_begin()`` / ``ck.collective_end()`` (the end when the
  all-reduce's future completes), so checkpoint traffic yields to it, and
  runs torch's default all-reduce; for an FSDP module (FSDP2, or FSDP1,
  whose comm hook would see only the reduce-scatters) its forward and its
  backward are each marked as one collective, since its all-gathers and
  reduce-scatters run through them;
* before ``optimizer.step()``, ``ck.before_update()``: a lazy save's
  snapshot completes before the step changes the tensors;
* after ``optimizer.step()``, ``ck.iteration_begin()``: the end of a step
  is the start of the next iteration, from which the QoS gate learns when
  the all-reduces come.

torch >= 2.0 has optimizer step hooks; on older torch (Debian's 1.13) the
optimizer's ``step`` is wrapped in a bound method, which LR schedulers
created afterwards wrap in turn as they do any optimizer's step.
"""
import types
import warnings

import torch


class Hooks:
    """What ``install_hooks`` installed, with counters of what they saw.

    ``collectives``: collectives marked (DDP's gradient all-reduces; FSDP's
    forwards and backwards); ``open_collectives``: those begun and not yet
    ended (0 between iterations); ``steps``: optimizer steps taken. The
    counters are updated under the GIL from torch's threads.
    """

    def __init__(self, ck, process_group, iteration_marks):
        self.ck = ck
        self._allreduce = None  # torch's default hook, once a model is hooked
        self.process_group = process_group
        self.iteration_marks = iteration_marks
        self.collectives = 0
        self.open_collectives = 0
        self.steps = 0
        self._removers = []

    def allreduce(self, bucket):
        """The DDP communication hook: a marked default all-reduce."""
        ck = self.ck
        ck.collective_begin()
        self.collectives += 1
        self.open_collectives += 1
        try:
            fut = self._allreduce(self.process_group, bucket)
        except BaseException:
            ck.collective_end()
            self.open_collectives -= 1
            raise

        def done(f):
            ck.collective_end()
            self.open_collectives -= 1
            return f.value()

        return fut.then(done)

    def before_step(self):
        self.ck.before_update()

    def after_step(self):
        self.steps += 1
        if self.iteration_marks:
            self.ck.iteration_begin()

    def remove(self):
        """Removes the optimizer and module hooks. DDP cannot unregister a
        comm hook."""
        while self._removers:
            self._removers.pop()()


def _comm_hook(hooks, bucket):
    return hooks.allreduce(bucket)


def _hook_optimizer(hooks, optimizer):
    if hasattr(optimizer, "register_step_pre_hook"):
        pre = optimizer.register_step_pre_hook(
            lambda opt, args, kwargs: hooks.before_step())
        post = optimizer.register_step_post_hook(
            lambda opt, args, kwargs: hooks.after_step())
        hooks._removers += [pre.remove, post.remove]
        return
    inner = optimizer.step
    had_own = "step" in vars(optimizer)

    def step(self, *args, **kwargs):
        hooks.before_step()
        out = inner(*args, **kwargs)
        hooks.after_step()
        return out

    optimizer.step = types.MethodType(step, optimizer)

    def restore():
        if had_own:
            optimizer.step = inner
        else:
            del optimizer.step

    hooks._removers.append(restore)


def _is_fsdp(model):
    """Whether ``model`` is an FSDP2 module (fully_shard) or an FSDP1
    FullyShardedDataParallel."""
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except Exception:  # none, or (Debian's torch 1.13 on Python 3.11) broken
        return False
    if isinstance(model, FullyShardedDataParallel):
        return True
    try:
        from torch.distributed.fsdp import FSDPModule
    except Exception:  # torch before FSDP2
        return False
    return isinstance(model, FSDPModule)


def _grad_output(output):
    """The first tensor of a module's output that autograd will reach, or
    None (eval, no_grad, an output without tensors)."""
    if isinstance(output, torch.Tensor):
        return output if output.requires_grad else None
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (list, tuple)):
        for o in output:
            found = _grad_output(o)
            if found is not None:
                return found
    return None


def _hook_fsdp(hooks, model):
    """FSDP runs its all-gathers and reduce-scatters through the forward
    and the backward (FSDP1's comm hook sees only the reduce-scatters,
    FSDP2 has none), so those are marked as one collective each
    (checkpoint traffic goes between a backward's end and the next
    forward, and at qos_yield_floor_Bps within them).

    The backward is marked from autograd itself, not with a module's full
    backward hooks (which make torch warn on every step when the model's
    inputs need no gradient, as a batch of data does): it begins when the
    gradient of the forward's output is computed (a hook on that tensor)
    and ends when the whole backward has run (a callback queued on
    autograd's engine, as FSDP queues its own final callback)."""
    ck = hooks.ck

    def begin(*_):
        ck.collective_begin()
        hooks.collectives += 1
        hooks.open_collectives += 1

    def end(*_):
        ck.collective_end()
        hooks.open_collectives -= 1

    def backward_begins(grad):
        begin()
        torch.autograd.Variable._execution_engine.queue_callback(end)
        return grad

    def forward_ends(module, inputs, output):
        end()
        out = _grad_output(output)
        if out is not None:
            out.register_hook(backward_begins)

    hooks._removers += [
        model.register_forward_pre_hook(begin).remove,
        model.register_forward_hook(forward_ends).remove,
    ]


def install_hooks(ck, model=None, optimizer=None, *, process_group=None,
                  iteration_marks=True):
    """Connects ``ck`` to a DDP or FSDP model and its optimizer; returns
    ``Hooks``.

    ``model``: a ``DistributedDataParallel``, whose gradient all-reduces
    (on ``process_group``, None: the default group) are marked as
    collectives; or an FSDP2 module (``fully_shard``) or an FSDP1
    ``FullyShardedDataParallel``, whose forward and backward are each
    marked as one collective (its all-gathers and reduce-scatters run
    through them); a plain ``torch.nn.Module`` (one process, or a model
    wrapped after this call): no marks, with a warning, as its collectives
    cannot be seen; None: no marks, silently. ``optimizer``:
    gets the before-step fence (``ck.before_update()``) and, with
    ``iteration_marks``, the iteration mark after each step. Raises
    TypeError for anything that is not a module; DDP raises if a comm hook
    is already registered.
    """
    hooks = Hooks(ck, process_group, iteration_marks)
    if model is not None and _is_fsdp(model):
        _hook_fsdp(hooks, model)
    elif model is not None and not hasattr(model, "register_comm_hook"):
        if not isinstance(model, torch.nn.Module):
            raise TypeError("model must be a torch.nn.Module: a "
                            "DistributedDataParallel, an FSDP2 module "
                            "(fully_shard), an FSDP1 "
                            "FullyShardedDataParallel or a plain module, got "
                            f"a {type(model).__name__}")
        warnings.warn(
            f"stagger.torch.install_hooks: a {type(model).__name__} is "
            "neither DistributedDataParallel nor FSDP: its collectives are "
            "not marked (saves do not yield to them); pass the wrapped "
            "model for that. The optimizer fence is installed.",
            stacklevel=2)
    elif model is not None:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        hooks._allreduce = default_hooks.allreduce_hook
        model.register_comm_hook(hooks, _comm_hook)
    if optimizer is not None:
        _hook_optimizer(hooks, optimizer)
    return hooks
