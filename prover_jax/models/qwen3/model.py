"""The Qwen3 dense decoder and its decode cache.

    h = embed[tokens]; for each layer: h += attn(norm_in(h)); h += mlp(norm_post(h))
    logits = lm_head(norm(h))   (lm_head = embed^T when tied), fp32

The same calls as `qwen3_5.Qwen3_5` (the engine's `sampling.model_api.DecodeModel` and the trainer's
forward), so the sampler and the trainer run either family unchanged:
    model(tokens_BxT, mask_BxT=None, positions_BxT=None, segment_ids_BxT=None) -> logits [B, T, V]
    model(tokens_BxT, cache=cache, valid_len_B=None) -> (logits, cache)
The cached mode appends the first valid_len_B[b] tokens of row b (right padding ignored) at position
cache.pos[b]; prefill of T tokens followed by N one-token steps equals one forward over T + N tokens.
Packed rows (uncached): segment_ids_BxT (int32, >= 1 at real tokens, 0 at padding, each maximal run of
equal ids one sequence; see `packing`) restricts attention to the token's own run, and positions_BxT
defaults to positions restarting at 0 in each sequence: each sequence's outputs equal running it alone.

`model.runtime` is Qwen3.5's `Runtime` (part of the graph, static under jit): scan_layers runs ONE traced
layer under lax.scan over the stacked layer weights, remat (none | full | dots) recomputes each layer in
the backward pass, attention picks the uncached kernel (dense | blocked | splash | cudnn | xla, see
`qwen3_5.flash`); the gdn_* fields have no effect here. The cached mode always attends densely.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from prover_jax.models import packing
from prover_jax.models.qwen3.config import Qwen3Config
from prover_jax.models.qwen3.layers import MLP, Attention, KVCache, RMSNorm
from prover_jax.models.qwen3_5.layers import _normal, _param, _platform, dot_rows, f32_dot_outputs, flat_dots
from prover_jax.models.qwen3_5.model import Runtime, _remat
from prover_jax.sharding import constrain

ACT = ("batch", "length", "act_embed")


@flax.struct.dataclass
class Cache:
    """Decode cache with a slot (batch) axis first on every leaf.

    layers: per layer a KVCache (k, v [B, S, Hkv, hd], after k_norm + RoPE, in the cache dtype).
    pos: [B] int32, number of tokens already in each row (= position of the next token).
    """

    layers: tuple
    pos: jax.Array

    @property
    def max_length(self) -> int:
        return self.layers[0].k.shape[1]


def cache_axes(cfg: Qwen3Config, tensor: int = 1) -> Cache:
    """Logical axis names of every cache array (same structure as `init_cache`). When the KV heads do
    not split over a `tensor` axis of that size, the caches split their slots over it instead
    ("cache_slots") rather than being copied onto every tensor shard."""
    slots = "cache_batch" if cfg.num_key_value_heads % max(tensor, 1) == 0 else "cache_slots"
    ax = (slots, "cache_length", "cache_heads", "head_dim")
    return Cache(layers=tuple(KVCache(ax, ax) for _ in range(cfg.num_hidden_layers)), pos=("cache_batch",))


def init_cache(cfg: Qwen3Config, batch: int, max_length: int, dtype=jnp.float32) -> Cache:
    """Empty cache for `batch` rows of up to `max_length` tokens, k / v in `dtype`."""
    shape = (batch, max_length, cfg.num_key_value_heads, cfg.head_dim)
    return Cache(layers=tuple(KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype))
                              for _ in range(cfg.num_hidden_layers)), pos=jnp.zeros((batch,), jnp.int32))


class DecoderLayer(nnx.Module):
    def __init__(self, cfg: Qwen3Config, *, rngs, dtype, param_dtype):
        kw = dict(rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        self.self_attn = Attention(cfg, **kw)
        self.mlp = MLP(cfg, **kw)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=param_dtype)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=param_dtype)

    def __call__(self, h, *, positions, key_valid, cache=None, write_pos=None, runtime: Runtime = Runtime(),
                 mesh=None, segments=None):
        with jax.named_scope("attention"):
            y, cache = self.self_attn(self.input_layernorm(h), positions, key_valid, cache, write_pos,
                                      impl=runtime.attention if cache is None else "dense", mesh=mesh,
                                      segment_ids_BxT=segments)
        h = h + y
        with jax.named_scope("mlp"):
            h = h + self.mlp(self.post_attention_layernorm(h))
        return h, cache


class Qwen3(nnx.Module):
    """Qwen3 dense model. `dtype` = compute dtype, `param_dtype` = storage dtype."""

    def __init__(self, cfg: Qwen3Config, *, rngs: nnx.Rngs, dtype=jnp.float32, param_dtype=jnp.float32,
                 mesh: Mesh | None = None, runtime: Runtime | None = None):
        kw = dict(rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        self.config = cfg
        self.dtype = dtype
        self.mesh = mesh
        self.runtime = Runtime() if runtime is None else runtime
        self.embed_tokens = _param(rngs, _normal(), (cfg.vocab_size, cfg.hidden_size), param_dtype,
                                   ("vocab", "embed"))
        self.layers = nnx.List([DecoderLayer(cfg, **kw) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=param_dtype)
        if not cfg.tie_word_embeddings:
            self.lm_head = _param(rngs, _normal(), (cfg.hidden_size, cfg.vocab_size), param_dtype,
                                  ("embed", "vocab"))

    # The sampling engine's model contract (prover_jax.sampling.model_api.DecodeModel).
    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    def init_cache(self, batch: int, max_length: int, dtype=jnp.float32) -> Cache:
        """An empty `Cache` of `batch` rows of up to `max_length` tokens (module-level `init_cache`)."""
        return init_cache(self.config, batch, max_length, dtype)

    def cache_axes(self, tensor: int = 1) -> Cache:
        """Logical axis names of `init_cache`'s arrays (module-level `cache_axes`)."""
        return cache_axes(self.config, tensor)

    @staticmethod
    def cache_lengths(cache: Cache) -> jax.Array:
        """int32 [B]: tokens already in each row of `cache`."""
        return cache.pos

    def hidden(self, tokens_BxT, *, mask_BxT=None, positions_BxT=None, cache: Cache | None = None,
               valid_len_B=None, segment_ids_BxT=None):
        """Final-norm hidden states [B, T, D] (and the new cache in cached mode). segment_ids_BxT:
        packed rows (module doc); id 0 is invalid, as mask_BxT = 0 is. mask_BxT, positions_BxT and
        segment_ids_BxT are uncached only (ValueError with a cache)."""
        B, T = tokens_BxT.shape
        steps = jnp.arange(T, dtype=jnp.int32)[None, :]
        h = constrain(self.embed_tokens[...].astype(self.dtype)[tokens_BxT], ACT, self.mesh)
        cpu = _platform(self.mesh) == "cpu"
        if cache is None:
            valid = jnp.ones((B, T), bool) if mask_BxT is None else mask_BxT.astype(bool)
            positions = jnp.broadcast_to(steps, (B, T)) if positions_BxT is None else positions_BxT
            segments = None
            if segment_ids_BxT is not None:
                seg = jnp.asarray(segment_ids_BxT, jnp.int32)
                valid = valid & (seg > 0)
                segments = packing.sequence_index(seg)
                if positions_BxT is None:
                    positions = packing.sequence_positions(seg)
            with flat_dots(cpu):
                return self.norm(self._uncached_layers(h, positions, valid, segments))
        if segment_ids_BxT is not None:
            raise ValueError("segment_ids_BxT (packed rows) is for the uncached forward only")
        if mask_BxT is not None or positions_BxT is not None:
            raise ValueError("mask_BxT / positions_BxT are for the uncached forward only; with a cache, rows "
                             "are right-padded (valid_len_B) and positions continue from cache.pos")
        valid_len_B = jnp.full((B,), T, jnp.int32) if valid_len_B is None else jnp.asarray(valid_len_B, jnp.int32)
        positions = cache.pos[:, None] + steps
        key_valid = jnp.arange(cache.max_length)[None, :] < (cache.pos + valid_len_B)[:, None]
        new_layers = []
        with f32_dot_outputs(), flat_dots(cpu):  # inference only (f32_dot_outputs)
            for layer, c in zip(self.layers, cache.layers):
                h, c = layer(h, positions=positions, key_valid=key_valid, cache=c, write_pos=cache.pos,
                             runtime=self.runtime, mesh=self.mesh)
                h = constrain(h, ACT, self.mesh)
                new_layers.append(c)
        return self.norm(h), Cache(layers=tuple(new_layers), pos=cache.pos + valid_len_B)

    def _uncached_layers(self, h, positions, valid, segments=None):
        """All layers without a cache, per `self.runtime`: unrolled, or one layer under lax.scan over the
        stacked layer weights (matrices stacked in the compute dtype); each layer rematerialised per
        `runtime.remat`."""
        rt = self.runtime

        def layer_fn(graphdef):
            def run(h, state):
                h, _ = nnx.merge(graphdef, state)(h, positions=positions, key_valid=valid, runtime=rt,
                                                  mesh=self.mesh, segments=segments)
                return constrain(h, ACT, self.mesh)
            return _remat(run, rt.remat)

        split = [nnx.split(layer) for layer in self.layers]
        if not rt.scan_layers or len(split) == 1:
            for graphdef, state in split:
                h = layer_fn(graphdef)(h, state)
            return h
        cast = lambda x: x.astype(self.dtype) if x.ndim >= 2 else x  # noqa: E731
        stacked = jax.tree.map(lambda *xs: jnp.stack([cast(x) for x in xs]), *[s for _, s in split])
        body = layer_fn(split[0][0])
        h, _ = jax.lax.scan(lambda h, state: (body(h, state), None), h, stacked)
        return h

    @jax.named_scope("logits")
    def logits(self, h_BxTxD):
        """fp32 logits of hidden states. On CPU a 16-bit tied projection contracts the embedding's own
        last axis (XLA:CPU would convert the whole table to fp32 for x @ E^T on every call; see
        `qwen3_5.Qwen3_5.logits`); otherwise the dot with E^T or lm_head."""
        cpu, h = _platform(self.mesh) == "cpu", h_BxTxD.astype(self.dtype)
        if self.config.tie_word_embeddings and cpu and jnp.dtype(self.dtype).itemsize == 2:
            E = self.embed_tokens[...].astype(self.dtype)
            out = jax.lax.dot_general(h, E, (((h.ndim - 1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        else:
            w = self.embed_tokens[...].T if self.config.tie_word_embeddings else self.lm_head[...]
            out = dot_rows(h, w.astype(self.dtype), cpu, preferred_element_type=jnp.float32)
        return constrain(out, ("batch", "length", "act_vocab"), self.mesh)

    def __call__(self, tokens_BxT, *, mask_BxT=None, positions_BxT=None, cache: Cache | None = None,
                 valid_len_B=None, segment_ids_BxT=None):
        out = self.hidden(tokens_BxT, mask_BxT=mask_BxT, positions_BxT=positions_BxT, cache=cache,
                          valid_len_B=valid_len_B, segment_ids_BxT=segment_ids_BxT)
        if cache is None:
            return self.logits(out)
        h, cache = out
        return self.logits(h), cache
