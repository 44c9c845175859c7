"""The rank layout of a torch job: from an initialized process group, or
the variables torchrun sets."""
import os
from collections import namedtuple

from .. import Checkpointer

DistEnv = namedtuple("DistEnv", "rank world_size local_rank local_world_size")


def _int_var(environ, name, default):
    value = environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an "
                         "integer") from None


def _process_group():
    """(rank, world size) of torch.distributed's default process group,
    or None where none is initialized."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not dist.is_available() or not dist.is_initialized():
        return None
    return dist.get_rank(), dist.get_world_size()


def dist_env(environ=None):
    """This process's ``DistEnv``: rank and world size from an initialized
    ``torch.distributed`` process group (``mp.spawn`` and other launchers
    that set no variables), else from RANK and WORLD_SIZE (as torchrun sets
    them); LOCAL_RANK and LOCAL_WORLD_SIZE from the environment. A missing
    variable is a single-process job's value (0, 1, the rank, the world
    size). ValueError when the process group and RANK/WORLD_SIZE disagree:
    one of them is not this process's."""
    environ = os.environ if environ is None else environ
    rank = _int_var(environ, "RANK", None)
    world_size = _int_var(environ, "WORLD_SIZE", None)
    group = _process_group()
    if group is not None:
        for name, env_value, group_value in (("RANK", rank, group[0]),
                                             ("WORLD_SIZE", world_size,
                                              group[1])):
            if env_value is not None and env_value != group_value:
                raise ValueError(
                    f"environment variable {name}={env_value} disagrees "
                    f"with the initialized torch.distributed process group "
                    f"({name.lower()} {group_value}); unset it or pass "
                    f"rank=/world_size= to checkpointer()")
        rank, world_size = group
    rank = 0 if rank is None else rank
    world_size = 1 if world_size is None else world_size
    local_rank = _int_var(environ, "LOCAL_RANK", rank)
    local_world_size = _int_var(environ, "LOCAL_WORLD_SIZE", world_size)
    return DistEnv(rank, world_size, local_rank, local_world_size)


def checkpointer(servers, job, **options):
    """A ``stagger.Checkpointer`` for this rank of a distributed job.

    ``rank`` and ``world_size`` default to the initialized
    ``torch.distributed`` process group's, else RANK and WORLD_SIZE;
    ``ranks_per_node`` to LOCAL_WORLD_SIZE (``dist_env``). Options given
    here win over both. Other options as ``stagger.Checkpointer``'s.
    """
    env = dist_env()
    options.setdefault("rank", env.rank)
    options.setdefault("world_size", env.world_size)
    options.setdefault("ranks_per_node", env.local_world_size)
    return Checkpointer(servers=servers, job=job, **options)
