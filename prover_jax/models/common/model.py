"""The decoder scaffolding every family shares: token embedding, the forward in both modes (the layer loops,
unrolled or scanned, rematerialised per the runtime), the final norm, fp32 logits and the calls the trainer
and the sampling engine make (`sampling.model_api.DecodeModel`).

    class Qwen3(DecoderLM):
        cache_fns = (init_cache, cache_axes)     # the family's module-level cache functions of the config
        runtime_class = Runtime                  # its runtime (scan_layers, remat, attention, ...)
        def __init__(self, cfg, *, rngs, dtype=jnp.float32, param_dtype=jnp.float32, mesh=None, runtime=None):
            super().__init__(cfg, rngs=rngs, dtype=dtype, param_dtype=param_dtype, mesh=mesh, runtime=runtime,
                             layers=lambda: [...], norm=lambda: RMSNorm(...))

Two call modes (`__call__`, `hidden`):
    model(tokens_BxT, mask_BxT=None, positions_BxT=None, segment_ids_BxT=None) -> logits [B, T, V]
    model(tokens_BxT, cache=cache, valid_len_B=None) -> (logits, cache)
The cached mode appends the first valid_len_B[b] tokens of row b (right padding ignored) at position
cache.pos[b]. Packed rows (uncached): segment_ids_BxT (int32, >= 1 at real tokens, 0 at padding, each
maximal run of equal ids one sequence; `packing`), positions restarting at 0 in each sequence by default.

The layers' call contract: layer(h, *, positions, valid, key_valid, cache, write_pos, valid_len, runtime,
mesh, segments) -> (h, cache): positions [B, T]; valid [B, T] (real tokens); key_valid [B, T] uncached, [B, S]
over a cache with a length bound (None without one); cache the layer's entry of the cache (None uncached);
write_pos = cache.pos; valid_len [B]; segments = `packing.sequence_index` of packed rows, else None. A cache
is a dataclass of (layers: tuple of the layers' entries, pos: int32 [B]) with `max_length` (None: no bound).
`runtime` is part of the graph, static under jit. A config needs vocab_size, hidden_size, rms_norm_eps,
tie_word_embeddings.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, ClassVar

import jax
import jax.numpy as jnp
from flax import nnx

from prover_jax.models import packing
from prover_jax.models.common.attention import platform
from prover_jax.models.common.layers import dot_rows, f32_dot_outputs, flat_dots, normal, param
from prover_jax.sharding import constrain

ACT = ("batch", "length", "act_embed")
REMAT = ("none", "full", "dots")


def remat(fn, mode: str):
    """`fn` rematerialised in the backward pass: none (as is) | full (nothing saved) | dots (matmul
    outputs without batch dimensions saved)."""
    if mode == "none":
        return fn
    policy = (jax.checkpoint_policies.dots_with_no_batch_dims_saveable if mode == "dots"
              else jax.checkpoint_policies.nothing_saveable)
    return jax.checkpoint(fn, policy=policy)


def uncached_inputs(B: int, T: int, mask_BxT, positions_BxT, segment_ids_BxT):
    """(valid [B, T] bool, positions [B, T], segments or None) of an uncached call: mask_BxT (default all
    valid), positions_BxT (default 0..T-1, or restarting in each packed sequence); segment_ids_BxT
    (int32, 0 = padding) makes id 0 invalid and gives `packing.sequence_index` as segments."""
    valid = jnp.ones((B, T), bool) if mask_BxT is None else mask_BxT.astype(bool)
    steps = jnp.arange(T, dtype=jnp.int32)[None, :]
    positions = jnp.broadcast_to(steps, (B, T)) if positions_BxT is None else positions_BxT
    segments = None
    if segment_ids_BxT is not None:
        seg = jnp.asarray(segment_ids_BxT, jnp.int32)
        valid = valid & (seg > 0)
        segments = packing.sequence_index(seg)
        if positions_BxT is None:
            positions = packing.sequence_positions(seg)
    return valid, positions, segments


def cached_inputs(pos_B, B: int, T: int, valid_len_B, mask_BxT, positions_BxT, segment_ids_BxT):
    """(valid_len_B int32 [B] (default T), positions [B, T] = pos_B + 0..T-1) of a cached call; ValueError
    for the uncached-only arguments (mask_BxT, positions_BxT, segment_ids_BxT)."""
    if segment_ids_BxT is not None:
        raise ValueError("segment_ids_BxT (packed rows) is for the uncached forward only")
    if mask_BxT is not None or positions_BxT is not None:
        raise ValueError("mask_BxT / positions_BxT are for the uncached forward only; with a cache, rows "
                         "are right-padded (valid_len_B) and positions continue from cache.pos")
    valid_len_B = jnp.full((B,), T, jnp.int32) if valid_len_B is None else jnp.asarray(valid_len_B, jnp.int32)
    return valid_len_B, pos_B[:, None] + jnp.arange(T, dtype=jnp.int32)[None, :]


class DecoderLM(nnx.Module):
    """h = embed[tokens]; h = layers(h); logits = lm_head(norm(h)) (lm_head = embed^T when tied), fp32.
    `dtype` = compute dtype, `param_dtype` = storage dtype. Parameters are created in the order embedding,
    layers (`layers()`), final norm (`norm()`), untied head."""

    # the family's (init_cache(cfg, batch, max_length, dtype), cache_axes(cfg, tensor))
    cache_fns: ClassVar[tuple[Callable, Callable]]
    runtime_class: ClassVar[type]  # the family's runtime; runtime_class() is the default

    def __init__(self, cfg, *, rngs: nnx.Rngs, dtype, param_dtype, mesh, runtime, layers: Callable[[], list],
                 norm: Callable[[], nnx.Module]):
        self.config = cfg
        self.dtype = dtype
        self.mesh = mesh
        self.runtime = type(self).runtime_class() if runtime is None else runtime
        self.embed_tokens = param(rngs, normal(), (cfg.vocab_size, cfg.hidden_size), param_dtype, ("vocab", "embed"))
        self.layers = nnx.List(layers())
        self.norm = norm()
        if not cfg.tie_word_embeddings:
            self.lm_head = param(rngs, normal(), (cfg.hidden_size, cfg.vocab_size), param_dtype, ("embed", "vocab"))

    # The sampling engine's model contract (prover_jax.sampling.model_api.DecodeModel): the cache
    # functions below, `hidden` (cached mode) and `logits`.
    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    def init_cache(self, batch: int, max_length: int, dtype=jnp.float32):
        """An empty cache of `batch` rows of up to `max_length` tokens (the family's `init_cache`)."""
        return type(self).cache_fns[0](self.config, batch, max_length, dtype)

    def cache_axes(self, tensor: int = 1):
        """Logical axis names of `init_cache`'s arrays (the family's `cache_axes`)."""
        return type(self).cache_fns[1](self.config, tensor)

    @staticmethod
    def cache_lengths(cache) -> jax.Array:
        """int32 [B]: tokens already in each row of `cache`."""
        return cache.pos

    def scan_period(self) -> int:
        """Layers in the unit `runtime.scan_layers` scans over (the repeating block): 1 here."""
        return 1

    def hidden(self, tokens_BxT, *, mask_BxT=None, positions_BxT=None, cache=None, valid_len_B=None,
               segment_ids_BxT=None):
        """Final-norm hidden states [B, T, D] (and the new cache in cached mode). segment_ids_BxT:
        packed rows (module doc); id 0 is invalid, as mask_BxT = 0 is. mask_BxT, positions_BxT and
        segment_ids_BxT are uncached only (ValueError with a cache)."""
        B, T = tokens_BxT.shape
        kw = dict(runtime=self.runtime, mesh=self.mesh)
        if cache is None:
            valid, positions, segments = uncached_inputs(B, T, mask_BxT, positions_BxT, segment_ids_BxT)
            kw.update(positions=positions, valid=valid, key_valid=valid, cache=None, write_pos=None, valid_len=None,
                      segments=segments)
            period = self.scan_period() if self.runtime.scan_layers else 1
            return self.uncached(self.embed(tokens_BxT), period, lambda layer, h: layer(h, **kw)[0])
        valid_len_B, positions = cached_inputs(cache.pos, B, T, valid_len_B, mask_BxT, positions_BxT, segment_ids_BxT)
        key_valid = (None if cache.max_length is None else
                     jnp.arange(cache.max_length)[None, :] < (cache.pos + valid_len_B)[:, None])
        kw.update(positions=positions, valid=jnp.arange(T, dtype=jnp.int32)[None, :] < valid_len_B[:, None],
                  key_valid=key_valid, write_pos=cache.pos, valid_len=valid_len_B, segments=None)
        h, layers = self.cached(self.embed(tokens_BxT), cache.layers, lambda layer, h, c: layer(h, cache=c, **kw))
        return h, dataclasses.replace(cache, layers=layers, pos=cache.pos + valid_len_B)

    def embed(self, tokens_BxT) -> jax.Array:
        """The tokens' embeddings [B, T, D] in the compute dtype."""
        return constrain(self.embed_tokens[...].astype(self.dtype)[tokens_BxT], ACT, self.mesh)

    def uncached(self, h, period: int, call: Callable) -> jax.Array:
        """norm(layers(h)) without a cache, per `self.runtime`: unrolled, or one block of `period` layers
        under lax.scan over the blocks' stacked weights (matrices stacked in the compute dtype they are
        used in; runtime.scan_layers); each block (each layer when unrolled, period 1) rematerialised per
        `runtime.remat`. call(layer, h) -> h runs one layer."""
        rt = self.runtime
        n_blocks = len(self.layers) // period

        def block_fn(graphdefs):
            def run(h, states):
                for gd, st in zip(graphdefs, states):
                    h = constrain(call(nnx.merge(gd, st), h), ACT, self.mesh)
                return h
            return remat(run, rt.remat)

        split = [nnx.split(layer) for layer in self.layers]
        with flat_dots(platform(self.mesh) == "cpu"):
            if not rt.scan_layers or n_blocks == 1:
                for i in range(0, len(split), period):
                    h = block_fn([g for g, _ in split[i:i + period]])(h, [s for _, s in split[i:i + period]])
            else:
                cast = lambda x: x.astype(self.dtype) if x.ndim >= 2 else x  # noqa: E731
                stacked = [jax.tree.map(lambda *xs: jnp.stack([cast(x) for x in xs]),
                                        *[split[b * period + j][1] for b in range(n_blocks)]) for j in range(period)]
                body = block_fn([split[j][0] for j in range(period)])
                h, _ = jax.lax.scan(lambda h, states: (body(h, states), None), h, stacked)
            return self.norm(h)

    def cached(self, h, caches, call: Callable) -> tuple[jax.Array, tuple]:
        """(norm(h after every layer), the layers' new caches): call(layer, h, cache) -> (h, cache) runs
        one layer. Inference only: Linears return their fp32 accumulators rounded once (`f32_dot_outputs`)."""
        new = []
        with f32_dot_outputs(), flat_dots(platform(self.mesh) == "cpu"):
            for layer, c in zip(self.layers, caches):
                h, c = call(layer, h, c)
                h = constrain(h, ACT, self.mesh)
                new.append(c)
        return self.norm(h), tuple(new)

    @jax.named_scope("logits")
    def logits(self, h_BxTxD):
        """fp32 logits of hidden states. On CPU a 16-bit tied projection contracts the embedding's own
        last axis (XLA:CPU runs x @ E^T by converting the whole table to fp32 on every call: 1.1 -> 0.2
        ms for bench-small's 16 rows at bf16); fp32 and other backends keep the dot with E^T."""
        cpu, h = platform(self.mesh) == "cpu", h_BxTxD.astype(self.dtype)
        if self.config.tie_word_embeddings and cpu and jnp.dtype(self.dtype).itemsize == 2:
            E = self.embed_tokens[...].astype(self.dtype)
            out = jax.lax.dot_general(h, E, (((h.ndim - 1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        else:
            w = self.embed_tokens[...].T if self.config.tie_word_embeddings else self.lm_head[...]
            out = dot_rows(h, w.astype(self.dtype), cpu, preferred_element_type=jnp.float32)  # flat on CPU
        return constrain(out, ("batch", "length", "act_vocab"), self.mesh)

    def __call__(self, tokens_BxT, *, mask_BxT=None, positions_BxT=None, cache=None, valid_len_B=None,
                 segment_ids_BxT=None):
        """Logits [B, T, V] (uncached), or (logits, new cache) with a cache (`hidden`)."""
        out = self.hidden(tokens_BxT, mask_BxT=mask_BxT, positions_BxT=positions_BxT, cache=cache,
                          valid_len_B=valid_len_B, segment_ids_BxT=segment_ids_BxT)
        if cache is None:
            return self.logits(out)
        h, cache = out
        return self.logits(h), cache
