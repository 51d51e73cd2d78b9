"""Packed rows: several sequences one after another in one row, told apart by segment ids.

segment_ids [B, T] int32: >= 1 at real tokens, 0 at padding; each maximal run of equal ids is one
sequence (a run of 0s is padding). The model turns them into run indices (`sequence_index`), ids that
are equal exactly within one run, which is what its layers compare.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def sequence_starts(segment_ids_BxT: jax.Array) -> jax.Array:
    """bool [B, T]: True at t = 0 and wherever the id differs from the previous token's."""
    s = jnp.asarray(segment_ids_BxT)
    return jnp.pad(s[:, 1:] != s[:, :-1], ((0, 0), (1, 0)), constant_values=True)


def sequence_index(segment_ids_BxT: jax.Array) -> jax.Array:
    """int32 [B, T]: 1 + the number of sequence starts before t (runs numbered 1, 2, ... per row)."""
    return jnp.cumsum(sequence_starts(segment_ids_BxT).astype(jnp.int32), axis=1)


def sequence_positions(segment_ids_BxT: jax.Array) -> jax.Array:
    """int32 [B, T]: t - (start of t's run), positions restarting at 0 in every sequence."""
    starts = sequence_starts(segment_ids_BxT)
    t = jnp.broadcast_to(jnp.arange(starts.shape[1], dtype=jnp.int32), starts.shape)
    return t - lax.cummax(jnp.where(starts, t, 0), axis=1)
