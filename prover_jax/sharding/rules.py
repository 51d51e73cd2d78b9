"""The project's single logical-axis rules table and the helpers that apply it.

Every parameter carries logical axis names (`nnx.Param(..., axes=(...))`) and block-boundary
activations are constrained with logical names too; `LOGICAL_RULES` alone decides which mesh axes
(`data`, `fsdp`, `tensor`) each name maps to. A dimension that a mesh axis does not divide stays
replicated along it (so a tiny test model shards on any mesh).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import jax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

MESH_AXES = ("data", "fsdp", "tensor")

# logical name -> mesh axis / axes (in priority order) or None (replicated).
LOGICAL_RULES: tuple[tuple[str, str | tuple[str, ...] | None], ...] = (
    # activations
    ("batch", ("data", "fsdp")),
    ("length", None),
    ("act_embed", None),
    ("act_vocab", "tensor"),
    # parameters
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("mlp", "tensor"),
    ("q_heads", "tensor"),  # full attention: heads x head_dim (x2 with the gate), flattened
    ("kv_heads", "tensor"),
    ("qkv", "tensor"),  # Gated DeltaNet fused q|k|v channels
    ("lin_heads", "tensor"),  # Gated DeltaNet value heads (x dv when flattened)
    ("head_dim", None),
    ("conv", None),
    ("norm", None),
    # decode caches
    ("cache_batch", ("data", "fsdp")),
    ("cache_slots", ("data", "fsdp", "tensor")),  # KV caches whose heads do not split over tensor
    ("cache_length", None),
    ("cache_heads", "tensor"),
)


def make_mesh(shape: Mapping[str, int] | Sequence[int] = (1, -1, 1),
              devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A (data, fsdp, tensor) mesh; one entry may be -1 to take the remaining devices.

    Axis types are passed explicitly (Auto) so behaviour is the same on jax 0.10 and 0.12.
    """
    devices = list(jax.devices() if devices is None else devices)
    if isinstance(shape, Mapping):
        unknown = set(shape) - set(MESH_AXES)
        if unknown:
            raise ValueError(f"unknown mesh axes {sorted(unknown)}; expected {MESH_AXES}")
        shape = [shape.get(a, 1) for a in MESH_AXES]
    shape = list(shape)
    if len(shape) != len(MESH_AXES):
        raise ValueError(f"mesh shape {shape} must have {len(MESH_AXES)} entries {MESH_AXES}")
    bad = [f"{a}={n}" for a, n in zip(MESH_AXES, shape) if n == 0 or n < -1]
    if bad:
        raise ValueError(f"mesh shape {shape}: {', '.join(bad)}; each axis is a positive device count, "
                         "or -1 for the devices the others leave")
    if shape.count(-1) > 1:
        raise ValueError(f"mesh shape {shape}: at most one axis may be -1")
    if -1 in shape:
        rest = math.prod(s for s in shape if s != -1)
        if len(devices) % rest:
            raise ValueError(f"{len(devices)} devices do not split into mesh {shape}")
        shape[shape.index(-1)] = len(devices) // rest
    if math.prod(shape) != len(devices):
        raise ValueError(f"mesh {dict(zip(MESH_AXES, shape))} needs {math.prod(shape)} devices, "
                         f"{len(devices)} available")
    return jax.make_mesh(tuple(shape), MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES),
                         devices=devices)


def logical_to_spec(axes: Sequence[str | None], mesh: Mesh, shape: Sequence[int] | None = None,
                    rules=LOGICAL_RULES) -> P:
    """PartitionSpec for logical `axes` on `mesh`: each mesh axis used at most once, size-1 axes
    dropped, and (given `shape`) axes that do not divide the dimension dropped. ValueError when `axes`
    names more dimensions than `shape` has."""
    if shape is not None and len(axes) > len(shape):
        raise ValueError(f"logical axes {tuple(axes)} name {len(axes)} dimensions; the array has shape "
                         f"{tuple(shape)}")
    table = dict(rules)
    used: set[str] = set()
    out = []
    for i, name in enumerate(axes):
        if name is not None and name not in table:
            raise KeyError(f"logical axis {name!r} has no rule in LOGICAL_RULES")
        target = None if name is None else table[name]
        picked = _fit_axes(target, None if shape is None else shape[i], mesh, used)
        used.update(picked)
        out.append(None if not picked else (picked[0] if len(picked) == 1 else tuple(picked)))
    return P(*out)


def _fit_axes(target, dim: int | None, mesh: Mesh, used=()) -> list[str]:
    """The mesh axes of `target` (a name, a tuple of names or None) that shard a dimension of size
    `dim` on `mesh`: unused, of size > 1, and (given dim) dividing it together."""
    targets = () if target is None else ((target,) if isinstance(target, str) else tuple(target))
    picked, size = [], 1
    for ax in targets:
        n = mesh.shape.get(ax, 1)
        if ax in used or n == 1 or (dim is not None and dim % (size * n)):
            continue
        picked.append(ax)
        size *= n
    return picked


def fit_spec(spec: P, shape, mesh: Mesh) -> P:
    """`spec` (e.g. another mesh's) on `mesh`: axes that do not divide their dimension there dropped."""
    out = []
    for i, entry in enumerate(tuple(spec) + (None,) * (len(shape) - len(spec))):
        picked = _fit_axes(entry, shape[i], mesh)
        out.append(None if not picked else (picked[0] if len(picked) == 1 else tuple(picked)))
    return P(*out)


def named_sharding(axes, mesh: Mesh, shape=None) -> NamedSharding:
    return NamedSharding(mesh, logical_to_spec(axes, mesh, shape))


def _is_axes(x) -> bool:
    return isinstance(x, tuple) and all(isinstance(e, (str, type(None))) for e in x)


def tree_shardings(axes_tree, abstract_tree, mesh: Mesh):
    """NamedSharding per leaf of `abstract_tree` (arrays or ShapeDtypeStructs) from the logical axes
    tuple at the same place in `axes_tree` (same structure, axes tuples as leaves)."""
    return jax.tree.map(lambda ax, a: named_sharding(ax, mesh, a.shape), axes_tree, abstract_tree,
                        is_leaf=_is_axes)


def place(x, sharding: NamedSharding) -> jax.Array:
    """`x` (host data or an array, identical on every process) placed with `sharding`; across
    processes each one fills only its addressable shards from its own copy."""
    if sharding.is_fully_addressable:
        return jax.device_put(x, sharding)
    import numpy as np
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def constrain(x: jax.Array, axes: Sequence[str | None], mesh: Mesh | None) -> jax.Array:
    """with_sharding_constraint by logical names; a no-op without a mesh."""
    if mesh is None:
        return x
    return jax.lax.with_sharding_constraint(x, named_sharding(axes, mesh, x.shape))
