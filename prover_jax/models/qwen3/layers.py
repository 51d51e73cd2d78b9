"""Qwen3 building blocks in Flax NNX: RMSNorm (y = w * x / rms(x)), and GQA attention with per-head
q / k RMSNorm and full-width RoPE. Linear, the SwiGLU MLP, RoPE, the KV cache entry and the attention
kernels (dense / blocked / splash / dot_product_attention, the CPU decode layouts) are Qwen3.5's
(`qwen3_5.layers`, `qwen3_5.flash`), the same functions. Parameters are stored in `param_dtype`,
matmuls run in `dtype`; norms and softmax in fp32. Every parameter carries logical axis names (see
prover_jax.sharding). Kernels are stored (in, out), the transpose of torch's Linear weight.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jax import lax

from prover_jax.models.qwen3.config import Qwen3Config
from prover_jax.models.qwen3_5 import flash
from prover_jax.models.qwen3_5.layers import (MLP, KVCache, Linear, _attend, _mask, _platform, _windows, _write_at,
                                              rope)

Array = jax.Array

__all__ = ["MLP", "Attention", "BiasedLinear", "KVCache", "Linear", "RMSNorm"]


class RMSNorm(nnx.Module):
    """y = w * x * rsqrt(mean(x^2) + eps), in fp32, cast back to x's dtype. w init 1."""

    def __init__(self, dim, eps, *, param_dtype, axes=("norm",)):
        self.weight = nnx.Param(jnp.ones((dim,), param_dtype), axes=axes)
        self.eps = eps

    def __call__(self, x: Array) -> Array:
        xf = x.astype(jnp.float32)
        y = xf * lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + self.eps)
        return (y * self.weight[...].astype(jnp.float32)).astype(x.dtype)


class BiasedLinear(Linear):
    """y = x @ kernel + bias (a `Linear`, so LoRA targets it alike); bias [out] init 0, axes (out axis,)."""

    def __init__(self, d_in, d_out, axes, *, rngs, dtype, param_dtype):
        super().__init__(d_in, d_out, axes, rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        self.bias = nnx.Param(jnp.zeros((d_out,), param_dtype), axes=axes[1:])

    def __call__(self, x: Array) -> Array:
        return super().__call__(x) + self.bias[...].astype(self.dtype)


class Attention(nnx.Module):
    """q = rope(q_norm(q_proj x)), k = rope(k_norm(k_proj x)) per head, v = v_proj x;
    out = o_proj(softmax(q k^T / sqrt(hd)) v), GQA head h -> kv head h // (H / Hkv). The projections
    have biases iff cfg.attention_bias."""

    def __init__(self, cfg: Qwen3Config, *, rngs, dtype, param_dtype):
        kw = dict(rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        lin = BiasedLinear if cfg.attention_bias else Linear
        D, H, Hkv, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = lin(D, H * hd, ("embed", "q_heads"), **kw)
        self.k_proj = lin(D, Hkv * hd, ("embed", "kv_heads"), **kw)
        self.v_proj = lin(D, Hkv * hd, ("embed", "kv_heads"), **kw)
        self.o_proj = lin(H * hd, D, ("q_heads", "embed"), **kw)
        self.q_norm = RMSNorm(hd, cfg.rms_norm_eps, param_dtype=param_dtype, axes=("head_dim",))
        self.k_norm = RMSNorm(hd, cfg.rms_norm_eps, param_dtype=param_dtype, axes=("head_dim",))
        self.cfg = cfg

    def __call__(self, x_BxTxD, positions_BxT, key_valid_BxS, cache: KVCache | None = None,
                 write_pos_B: Array | None = None, impl: str = "dense", mesh=None,
                 segment_ids_BxT: Array | None = None):
        """-> (out [B, T, D], cache). Without cache, keys are this call's tokens and key_valid_BxS is
        [B, T]; segment_ids_BxT (int32, equal ids <=> same sequence) restricts packed rows to their own
        sequence; impl picks the kernel (`flash`: dense | blocked | splash | cudnn | xla). With a cache
        (always dense), this call's k / v are written at write_pos_B.. and key_valid_BxS masks the
        whole cache [B, S]."""
        if segment_ids_BxT is not None and cache is not None:
            raise ValueError("segment_ids_BxT (packed rows) is for the uncached forward only")
        cfg = self.cfg
        B, T, _ = x_BxTxD.shape
        H, Hkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        q = rope(self.q_norm(self.q_proj(x_BxTxD).reshape(B, T, H, hd)), positions_BxT, cfg)
        k = rope(self.k_norm(self.k_proj(x_BxTxD).reshape(B, T, Hkv, hd)), positions_BxT, cfg)
        v = self.v_proj(x_BxTxD).reshape(B, T, Hkv, hd)
        if cache is None:
            if impl == "dense":
                out = _attend(q, k, v, _mask(positions_BxT, positions_BxT, key_valid_BxS, segment_ids_BxT), mesh,
                              cached=False)
            else:
                out = flash.attention(q, k, v, key_valid_BxS, segment_ids_BxT=segment_ids_BxT, impl=impl,
                                      mesh=mesh if impl == "splash" else None,
                                      interpret=_platform(mesh) != "tpu").reshape(B, T, H * hd)
            return self.o_proj(out), None
        bits = _platform(mesh) == "cpu"
        cache = KVCache(_write_at(cache.k, k.astype(cache.k.dtype), write_pos_B, bits),
                        _write_at(cache.v, v.astype(cache.v.dtype), write_pos_B, bits))
        return self.o_proj(_attend_cache(q, cache, positions_BxT, key_valid_BxS, write_pos_B, mesh)), cache


def _attend_cache(q_BxTxHxd, cache: KVCache, positions_BxT, key_valid_BxS, write_pos_B, mesh) -> Array:
    """Attention of this call's queries over the cache's first W positions -> [B, T, H * hd]: on CPU W
    is the smallest of `qwen3_5.layers._windows(S)` holding every row's keys (chosen on the device),
    elsewhere the whole cache S (as Qwen3.5's attention)."""
    S, T = cache.k.shape[1], q_BxTxHxd.shape[1]
    windows = _windows(S) if _platform(mesh) == "cpu" else [S]
    idx = jnp.minimum(jnp.searchsorted(jnp.asarray(windows), jnp.max(write_pos_B) + T), len(windows) - 1)

    def window(W):
        def attend(q, k_all, v_all, pos, valid):
            mask = _mask(jnp.arange(W)[None, :], pos, valid[:, :W], None)
            return _attend(q, k_all[:, :W], v_all[:, :W], mask, mesh, cached=True)
        return attend

    return lax.switch(idx, [window(W) for W in windows], q_BxTxHxd, cache.k, cache.v, positions_BxT,
                      key_valid_BxS)
