"""The JAX multi-process runtime and the few cross-process agreements the trainer needs.

    initialize(coordinator_address="10.0.0.2:8476", num_processes=2, process_id=0)  # or auto (TPU)
    lo, hi = share(groups_per_step)     # this process's contiguous share of the step's task groups
    rows = allgather_json(row)          # one JSON-able object per process, in process order
    barrier("export")                   # every process reaches this point before any goes on

Every process must issue the same sequence of collective / jitted calls on global arrays (SPMD);
what a process decides alone (its rollouts, its judge's answers) reaches the others only through
these helpers. With one process they are local no-ops.
"""

from __future__ import annotations

import ctypes
import json
import math
import os

import jax
import numpy as np
from absl import logging

_INITIALIZED = False

# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def keep_host_memory() -> bool:
    """Makes glibc's malloc keep freed memory for reuse (mallopt: blocks up to 32 MB from the heap,
    which is trimmed only past 2 GB of free space, grown 256 MB at a time) instead of handing it back
    to the kernel, so buffers the CPU backend allocates and frees on every call stop costing fresh
    zeroed pages. A process setting for programs (the trainer, the demo, the benches), called before
    the work starts; memory freed stays with the process. False where the C library is not glibc."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    settings = ((_M_MMAP_THRESHOLD, 32 << 20), (_M_TRIM_THRESHOLD, 2 ** 31 - 1), (_M_TOP_PAD, 256 << 20))
    return all(mallopt(option, value) == 1 for option, value in settings)


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, heartbeat_timeout_s: int = 100,
               initialization_timeout_s: int = 300) -> None:
    """`jax.distributed.initialize` for a multi-process run.

    With `coordinator_address` (HOST:PORT, ValueError otherwise), `num_processes` and `process_id`
    are required; CPU processes exchange collectives over gloo. Without it, Cloud TPU pods are
    auto-detected (TPU_WORKER_HOSTNAMES lists several workers, or PROVER_DISTRIBUTED=1); a single
    host does nothing. A process whose peers stop answering for `heartbeat_timeout_s` exits with an error
    rather than hang.
    """
    global _INITIALIZED
    if _INITIALIZED:
        return
    explicit = coordinator_address is not None
    if explicit:
        if num_processes is None or process_id is None:
            raise ValueError("--coordinator_address needs --num_processes and --process_id")
        if num_processes < 1 or not 0 <= process_id < num_processes:
            raise ValueError(f"--process_id={process_id} must lie in [0, --num_processes={num_processes})")
        host, _, port = coordinator_address.rpartition(":")
        if not host or "/" in host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"--coordinator_address={coordinator_address!r} must be HOST:PORT (a port "
                             "number in 1..65535, no scheme), e.g. 10.0.0.2:8476")
    elif num_processes not in (None, 1) or process_id not in (None, 0):
        raise ValueError("--num_processes / --process_id need --coordinator_address=HOST:PORT")
    auto = (os.environ.get("PROVER_DISTRIBUTED") == "1"
            or os.environ.get("TPU_WORKER_HOSTNAMES", "").count(",") > 0)
    if not explicit and not auto:
        return
    if explicit and num_processes == 1:
        return
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU backend only; harmless on TPU
    kwargs = dict(heartbeat_timeout_seconds=int(heartbeat_timeout_s),
                  initialization_timeout=int(initialization_timeout_s))
    if explicit:
        jax.distributed.initialize(coordinator_address, num_processes, process_id, **kwargs)
    else:
        jax.distributed.initialize(**kwargs)
    _INITIALIZED = True
    logging.info("process %d of %d: %d local devices, %d global", jax.process_index(),
                 jax.process_count(), jax.local_device_count(), jax.device_count())
    if jax.default_backend() == "cpu" and jax.config.jax_compilation_cache_dir:
        # jax 0.12.1: a CPU train step sharded over processes, read back from the persistent cache,
        # never finishes its first run (gloo); compiled afresh it does. Only process 0 finds its entry (the
        # key holds each process's topology), and a read-back program beside a fresh one waits forever
        # (bench/jax_cache_hang.py reproduces it)
        jax.config.update("jax_enable_compilation_cache", False)
        logging.warning("persistent compilation cache %s not used: CPU processes with gloo collectives "
                        "hang in programs read back from it", jax.config.jax_compilation_cache_dir)


def process_index() -> int:
    return jax.process_index()


def process_count() -> int:
    return jax.process_count()


def is_primary() -> bool:
    """Process 0 writes what is written once (metrics, summary, plot, exported folders)."""
    return jax.process_index() == 0


def share(n: int, what: str = "rollout.groups_per_step") -> tuple[int, int]:
    """[lo, hi): this process's contiguous share of n items (n must split evenly)."""
    p, i = jax.process_count(), jax.process_index()
    if n % p:
        raise ValueError(f"{what}={n} is not divisible by the {p} processes")
    k = n // p
    return i * k, (i + 1) * k


def uneven_share(n: int) -> tuple[int, int]:
    """[lo, hi): a contiguous share of n items when n need not split evenly (evaluation seeds)."""
    p, i = jax.process_count(), jax.process_index()
    return i * n // p, (i + 1) * n // p


def allgather_json(obj) -> list:
    """[obj of process 0, obj of process 1, ...] (JSON round trip; the same list on every process)."""
    if jax.process_count() == 1:
        return [json.loads(json.dumps(obj))]
    from jax.experimental import multihost_utils
    data = np.frombuffer(json.dumps(obj).encode(), np.uint8)
    sizes = multihost_utils.process_allgather(np.asarray([data.size], np.int64))
    padded = np.zeros(int(sizes.max()), np.uint8)
    padded[:data.size] = data
    every = multihost_utils.process_allgather(padded)
    return [json.loads(bytes(row[:int(n)]).decode()) for row, n in zip(every, sizes.reshape(-1))]


def barrier(name: str) -> None:
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices(name)


def check_layout(*, num_processes: int, num_devices: int, mesh: tuple[int, int, int],
                 groups_per_step: int) -> None:
    """ValueError naming both numbers when the mesh does not fit the global device count or the
    step's task groups do not split over the processes."""
    shape = list(mesh)
    bad = [f"{axis}={n}" for axis, n in zip(("data", "fsdp", "tensor"), shape) if n == 0 or n < -1]
    if bad:
        raise ValueError(f"mesh (data, fsdp, tensor) = {tuple(mesh)}: {', '.join(bad)}; each axis is a positive "
                         "device count, or -1 for the devices the others leave")
    if shape.count(-1) > 1:
        raise ValueError(f"mesh (data, fsdp, tensor) = {tuple(mesh)}: at most one axis may be -1")
    fixed = math.prod(s for s in shape if s != -1)
    if (-1 in shape and num_devices % fixed) or (-1 not in shape and fixed > num_devices) or (
            -1 not in shape and num_processes > 1 and fixed != num_devices):
        raise ValueError(f"mesh (data, fsdp, tensor) = {tuple(mesh)} does not divide the {num_devices} "
                         f"devices of the {num_processes} processes")
    if groups_per_step % num_processes:
        raise ValueError(f"rollout.groups_per_step={groups_per_step} is not divisible by the "
                         f"{num_processes} processes (each process plays an equal share)")
