"""What the sampling engine needs from a model: the `DecodeModel` protocol.

The engine knows nothing of a model's layers or cache layout. It needs an `nnx.Module` (split once
into a graph and weights; the weights are what `Engine.load_params` returns and what prefill /
generate take, merged back inside the jitted programs) with:

    model.vocab_size                           # logits width; token ids are checked against it
    model.dtype                                # compute dtype: the default cache dtype
    model.mesh                                 # default mesh of the decode state (None: one device)
    model.init_cache(batch, max_length, dtype) # an empty cache pytree of `batch` rows
    model.cache_axes(tensor)                   # logical axis names of init_cache's leaves (same tree)
    model.cache_lengths(cache)                 # int32 [rows]: tokens already in each row
    model.hidden(tokens_BxT, cache=, valid_len_B=) -> (h_BxTxD, cache)
    model.logits(h_BxTxD)                      # fp32 [B, T, V]

The cache is opaque to the engine but for one rule: EVERY leaf has the row axis first. That is how a
prefilled row is copied into a decode slot, rows are stacked for a batched prefill and a slot is
extracted, leaf by leaf. `hidden` appends the first valid_len_B[b] tokens of row b (the rest is
right padding; 0 = the row is untouched) after the cache_lengths(cache)[b] tokens already there, and
returns the final hidden states and the cache with those lengths advanced. `logits` maps hidden
states to fp32 logits; prefill applies it to each row's last valid position only. `cache_axes` uses
the names of the sharding rules table (prover_jax.sharding; "cache_batch" for the row axis) and is
only asked for when the engine has a mesh, whose "tensor" axis size it receives.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import jax
from flax import nnx


@runtime_checkable
class DecodeModel(Protocol):
    """The model contract of `Engine` (see the module docstring)."""

    @property
    def vocab_size(self) -> int: ...

    dtype: Any
    mesh: Any

    def init_cache(self, batch: int, max_length: int, dtype) -> Any: ...

    def cache_axes(self, tensor: int = 1) -> Any: ...

    def cache_lengths(self, cache) -> jax.Array: ...

    def hidden(self, tokens_BxT: jax.Array, *, cache, valid_len_B) -> tuple[jax.Array, Any]: ...

    def logits(self, h_BxTxD: jax.Array) -> jax.Array: ...


MEMBERS = tuple(sorted({n for n in vars(DecodeModel) if not n.startswith("_")}
                       | set(DecodeModel.__annotations__)))


def check_model(model) -> None:
    """TypeError unless `model` is an nnx.Module with every member of `DecodeModel`."""
    if not isinstance(model, nnx.Module):
        raise TypeError(f"the engine needs an nnx.Module, got {type(model).__name__}")
    missing = [m for m in MEMBERS if not hasattr(model, m)]
    if missing:
        raise TypeError(f"{type(model).__name__} is not a DecodeModel (prover_jax.sampling.model_api): "
                        f"it lacks {missing}")
