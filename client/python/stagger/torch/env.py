"""The rank layout of a torch job, from the variables torchrun sets."""
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


def dist_env(environ=None):
    """This process's ``DistEnv`` from RANK, WORLD_SIZE, LOCAL_RANK and
    LOCAL_WORLD_SIZE (as torchrun sets them); a missing variable is a
    single-process job's value (0, 1, the rank, the world size)."""
    environ = os.environ if environ is None else environ
    rank = _int_var(environ, "RANK", 0)
    world_size = _int_var(environ, "WORLD_SIZE", 1)
    local_rank = _int_var(environ, "LOCAL_RANK", rank)
    local_world_size = _int_var(environ, "LOCAL_WORLD_SIZE", world_size)
    return DistEnv(rank, world_size, local_rank, local_world_size)


def checkpointer(servers, job, **options):
    """A ``stagger.Checkpointer`` for this rank of a torchrun job.

    ``rank``, ``world_size`` and ``ranks_per_node`` default to RANK,
    WORLD_SIZE and LOCAL_WORLD_SIZE (``dist_env``); other options as
    ``stagger.Checkpointer``'s.
    """
    env = dist_env()
    options.setdefault("rank", env.rank)
    options.setdefault("world_size", env.world_size)
    options.setdefault("ranks_per_node", env.local_world_size)
    return Checkpointer(servers=servers, job=job, **options)
