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

`model.runtime` (a constructor argument) is Qwen3.5's `Runtime` (part of the graph, static under jit):
scan_layers runs ONE traced layer under lax.scan over the stacked layer weights, remat (none | full |
dots) recomputes each layer in the backward pass, attention picks the uncached kernel (dense | blocked |
splash | cudnn | xla, see `common.flash`); the gdn_* fields have no effect here. The cached mode always
attends densely. The scaffolding (embedding, layer loops, logits, the engine's calls) is
`common.model.DecoderLM`.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from prover_jax.models.common.model import DecoderLM
from prover_jax.models.qwen3.config import Qwen3Config
from prover_jax.models.qwen3.layers import MLP, Attention, KVCache, RMSNorm
from prover_jax.models.qwen3_5.model import Runtime


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
                 mesh=None, segments=None, valid=None, valid_len=None):
        """`common.model.DecoderLM`'s layer contract; valid / valid_len are for stateful mixers (none here)."""
        with jax.named_scope("attention"):
            y, cache = self.self_attn(self.input_layernorm(h), positions, key_valid, cache, write_pos,
                                      impl=runtime.attention if cache is None else "dense", mesh=mesh,
                                      segment_ids_BxT=segments)
        h = h + y
        with jax.named_scope("mlp"):
            h = h + self.mlp(self.post_attention_layernorm(h))
        return h, cache


class Qwen3(DecoderLM):
    """Qwen3 dense model. `dtype` = compute dtype, `param_dtype` = storage dtype; the scaffolding (embedding,
    both call modes, layer loops, logits, the engine's calls) is `common.model.DecoderLM`."""

    cache_fns = (init_cache, cache_axes)
    runtime_class = Runtime

    def __init__(self, cfg: Qwen3Config, *, rngs: nnx.Rngs, dtype=jnp.float32, param_dtype=jnp.float32,
                 mesh: Mesh | None = None, runtime: Runtime | None = None):
        kw = dict(rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        super().__init__(cfg, **kw, mesh=mesh, runtime=runtime,
                         layers=lambda: [DecoderLayer(cfg, **kw) for _ in range(cfg.num_hidden_layers)],
                         norm=lambda: RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=param_dtype))
