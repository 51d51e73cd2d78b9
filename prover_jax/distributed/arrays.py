"""Global arrays from host data, the training batch from host-local rollouts, and the weights
copied from the train mesh onto each host's engine.

    x = to_global(x_np, sharding)                       # the same host data on every process
    batch = global_batch(rows, mesh, micro_batch_size)  # rows [B_local, L] -> global [M, mb, L]
    sync = WeightSync(train_params, engine_mesh(train_mesh, tensor), dtype=jnp.bfloat16)
    engine_params = sync(train_state.params)            # after every update; same shapes, no recompile
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from prover_jax.sharding import MESH_AXES, fit_spec, named_sharding, place

HOSTS = "hosts"


def to_global(x, sharding: NamedSharding) -> jax.Array:
    """A global array of host data `x` that every process holds identically."""
    return place(np.asarray(x), sharding)


def globalize(tree, mesh: Mesh):
    """Leaves not yet on `mesh` (optimizer counters, the step) -> replicated global arrays."""
    replicated = NamedSharding(mesh, P())

    def put(x):
        s = getattr(x, "sharding", None)
        return x if isinstance(s, NamedSharding) and s.mesh == mesh else to_global(x, replicated)

    return jax.tree.map(put, tree)


def batch_sharding(mesh: Mesh, shape) -> NamedSharding:
    """[M, mb, L...]: the micro-batch's sequences over the logical "batch" axes."""
    return named_sharding((None, "batch") + (None,) * (len(shape) - 2), mesh, shape)


def _rows_by_process(sharding: NamedSharding, shape) -> dict[int, list[int]] | None:
    """Sequence indices (axis 1) each process holds, or None when some sequence lives on several
    processes (the row axis is replicated across hosts)."""
    owner: dict[int, int] = {}
    rows: dict[int, set[int]] = {}
    for device, index in sharding.devices_indices_map(tuple(shape)).items():
        p = device.process_index
        for r in range(*index[1].indices(shape[1])):
            if owner.setdefault(r, p) != p:
                return None
            rows.setdefault(p, set()).add(r)
    return {p: sorted(r) for p, r in rows.items()}


def global_batch(rows: dict[str, np.ndarray], mesh: Mesh, micro_batch_size: int) -> dict[str, jax.Array]:
    """This process's packed sequences `rows[k]` [B_local, L] (B_local and L equal on every process)
    -> global arrays [M, mb, L], M = ceil(P * B_local / mb), padding sequences all-zero (invalid).

    When the mesh splits every micro-batch's sequences over the processes, each process supplies
    only its own sequences (`jax.make_array_from_process_local_data`, no host traffic); otherwise
    (sequences replicated across hosts) the rows are all-gathered first. The loss is a sum over
    sequences, so where a sequence lands in the batch does not change it. Split rows interleave the
    processes' sequences within each micro-batch, so the micro-batches (and, with train.mini_batches
    > 1, the PPO mini-batches, each an optimizer step) hold other sequences than on one host.
    """
    mb = int(micro_batch_size)
    n_proc = jax.process_count()
    first = next(iter(rows.values()))
    B_local, L = first.shape[:2]
    M = max(-(-(B_local * n_proc) // mb), 1)
    shape = (M, mb, L)
    sharding = batch_sharding(mesh, shape)
    owned = _rows_by_process(sharding, shape) if n_proc > 1 else None
    out = {}
    if owned is not None and all(len(owned.get(p, ())) * n_proc == mb for p in range(n_proc)):
        width = mb // n_proc  # this process's sequences per micro-batch
        for k, v in rows.items():
            local = np.zeros((M * width,) + v.shape[1:], v.dtype)
            local[:B_local] = v
            out[k] = jax.make_array_from_process_local_data(
                sharding, local.reshape((M, width) + v.shape[1:]), (M, mb) + v.shape[1:])
        return out
    for k, v in rows.items():
        every = v if n_proc == 1 else _allgather_rows(v)
        full = np.zeros((M * mb,) + v.shape[1:], v.dtype)
        full[:every.shape[0]] = every
        out[k] = jax.make_array_from_process_local_data(
            sharding, full.reshape((M, mb) + v.shape[1:]), (M, mb) + v.shape[1:])
    return out


def _allgather_rows(v: np.ndarray) -> np.ndarray:
    from jax.experimental import multihost_utils
    return np.asarray(multihost_utils.process_allgather(v, tiled=True))


def engine_mesh(train_mesh: Mesh, tensor: int = 1, devices=None) -> Mesh:
    """The mesh a host's engine decodes on: this host's devices as (data, fsdp=1, tensor), tensor =
    gcd(tensor, local devices); tensor = -1 (a config's "the devices the others leave") is the train
    mesh's tensor size. Slots split over data; the weights are whole on every data shard
    (split only over tensor), so a decode step reads its weights locally instead of all-gathering
    FSDP shards. A train mesh that already has that form is returned as is (one process).
    `devices`: whose host (default: this process's)."""
    if jax.process_count() == 1 and devices is None and train_mesh.shape["fsdp"] == 1:
        return train_mesh
    host_major = _host_major(train_mesh, tensor)
    index = jax.process_index() if devices is None else sorted({d.process_index for d in devices})[0]
    hosts = sorted({d.process_index for d in train_mesh.devices.flat})
    return Mesh(host_major.devices[hosts.index(index)], MESH_AXES)


def _host_major(train_mesh: Mesh, tensor: int) -> Mesh:
    """All devices of `train_mesh` as (hosts, data, fsdp=1, tensor): host h's devices in row h."""
    by_process: dict[int, list] = {}
    for d in train_mesh.devices.flat:
        by_process.setdefault(d.process_index, []).append(d)
    counts = {len(v) for v in by_process.values()}
    if len(counts) != 1:
        raise ValueError(f"every process must hold the same number of mesh devices, got "
                         f"{ {p: len(v) for p, v in by_process.items()} }")
    n_local = counts.pop()
    t = math.gcd(int(tensor) if int(tensor) > 0 else train_mesh.shape["tensor"], n_local)
    grid = np.array([by_process[p] for p in sorted(by_process)], dtype=object)
    return Mesh(grid.reshape(len(by_process), n_local // t, 1, t), (HOSTS,) + MESH_AXES)


class WeightSync:
    """train params (global mesh, param dtype) -> the engine's params (each host's engine mesh, the
    engine dtype). With the train mesh as the engine's (one process, fsdp = 1) and the same dtype it
    is the identity (the engine reads the train state's buffers); otherwise a jitted cast on the
    train mesh, then a reshard that leaves on each host's devices exactly that host's engine shards,
    which become a host-local array.
    Shapes, dtypes and shardings are the same after every update, so the engine never recompiles.
    """

    def __init__(self, train_params, train_mesh: Mesh, engine: Mesh, dtype=None, tensor: int = 1):
        self.dtype = None if dtype is None else jnp.dtype(dtype)
        self.engine_mesh = engine
        leaves = jax.tree.leaves(train_params)
        same_dtype = self.dtype is None or all(x.dtype == self.dtype for x in leaves)
        self.identity = engine is train_mesh and same_dtype
        if self.identity:
            return
        specs = jax.tree.map(lambda x: fit_spec(x.sharding.spec, x.shape, engine), train_params)
        self._local = jax.tree.map(lambda s: NamedSharding(engine, s), specs, is_leaf=_is_spec)
        host_major = None if engine is train_mesh else _host_major(train_mesh, tensor)
        self._spread = None if host_major is None else jax.tree.map(
            lambda s: NamedSharding(host_major, s), specs, is_leaf=_is_spec)
        self._cast = jax.jit(lambda t: jax.tree.map(
            lambda x: x if self.dtype is None else x.astype(self.dtype), t))

    def __call__(self, params):
        if self.identity:
            return params
        cast = self._cast(params)
        if self._spread is None:  # one process, another dtype: same mesh
            return jax.tree.map(jax.device_put, cast, self._local)

        def to_local(x, spread, local):
            shards = [s.data for s in jax.device_put(x, spread).addressable_shards]
            return jax.make_array_from_single_device_arrays(x.shape, local, shards)

        return jax.tree.map(to_local, cast, self._spread, self._local)


def _is_spec(x) -> bool:
    return isinstance(x, P)
