"""One-row caches and their stacking: the layout every prefill input row shares.

    rows = CacheRows(model, max_target_length, cache_dtype, mesh)
    cache_R = rows.stack([prefix_a, None, prefix_b], R=4)   # rows a, empty, b, empty: one jitted call

A batched prefill takes an R-row cache: row b continues existing prefix b (its one cache row) or starts
empty. Rows are laid out alike (the model's `cache_axes` on the mesh), so the prefill and
the stacking compile once per R whatever mix of fresh and continued rows comes (mixed layouts made a
compile for each pattern). `Engine.extract` emits its rows in that layout (`prefix_shardings`), so
stacking them moves nothing first; other rows are put there (a device_put per row: ~0.5 ms of host time).
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from prover_jax.sampling.engine_types import Prefix
from prover_jax.sharding import tree_shardings


class CacheRows:
    """An engine's cache rows on its mesh: their layout, empty rows, and stacking (module docstring)."""

    def __init__(self, model: Any, max_target_length: int, cache_dtype: Any, mesh: Mesh | None):
        self._model, self._length, self._dtype, self._mesh = model, int(max_target_length), cache_dtype, mesh
        self._sh = None
        if mesh is not None:
            abstract = jax.eval_shape(lambda: model.init_cache(1, self._length, cache_dtype))
            self._sh = tree_shardings(model.cache_axes(mesh.shape.get("tensor", 1)), abstract, mesh)
        self._sh_leaves = jax.tree.leaves(self._sh)  # what a row's leaves are compared with in `stack`
        self._empty: dict[int, Any] = {}
        self._concat = jax.jit(lambda rows: jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0), *rows),
                               out_shardings=self._sh)

    def prefix_shardings(self):
        """A one-row Prefix's layout: the cache in the row layout, its [1] arrays replicated (None: no mesh)."""
        return None if self._sh is None else Prefix(self._sh, *[NamedSharding(self._mesh, PartitionSpec())] * 7)

    def empty(self, rows: int):
        """An empty cache of `rows` rows in the row layout (built once per row count)."""
        if rows not in self._empty:
            cache = self._model.init_cache(rows, self._length, self._dtype)
            self._empty[rows] = cache if self._sh is None else jax.device_put(cache, self._sh)
        return self._empty[rows]

    def stack(self, prefixes: Sequence[Prefix | None], R: int):
        """Cache of R rows: row b = prefixes[b]'s cache (or empty), padding rows empty."""
        if all(p is None for p in prefixes):
            return self.empty(R)
        rows = [self.empty(1) if p is None else p.cache for p in prefixes]
        rows += [self.empty(1)] * (R - len(rows))
        if self._sh is not None:
            rows = [r if all(x.sharding == s for x, s in zip(jax.tree.leaves(r), self._sh_leaves))
                    else jax.device_put(r, self._sh) for r in rows]
        return self._concat(rows)
