"""Qwen3.5 building blocks in Flax NNX: zero-centred RMSNorm, gated full attention (`common.attention`'s
module, gated), Gated DeltaNet (the SwiGLU MLP, Linear and RoPE are `common.layers`', the attention
kernels and the KV cache `common.attention`'s). Parameters are stored in `param_dtype`, matmuls run in
`dtype`; norms, softmax and the delta-rule state run in fp32. Every parameter carries logical axis names
(see prover_jax.sharding).

Kernels are stored (in, out), the transpose of torch's Linear weight.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx
from jax import lax

from prover_jax.models import packing
from prover_jax.models.common import attention, layers
from prover_jax.models.common.attention import KVCache
from prover_jax.models.common.layers import MLP, Linear, normal, param
from prover_jax.models.qwen3_5 import delta_rule
from prover_jax.models.qwen3_5.config import Qwen3_5Config
from prover_jax.models.qwen3_5.delta_rule import GDN_CHUNK  # the delta rule's chunk length (see there)

Array = jax.Array

__all__ = ["MLP", "Attention", "GDNCache", "GatedDeltaNet", "GatedRMSNorm", "KVCache", "Linear", "RMSNorm"]

# Zero-centred RMSNorm: y = x * rsqrt(mean(x^2) + eps) * (1 + w), in fp32, cast back. w init 0.
RMSNorm = functools.partial(layers.RMSNorm, zero_centred=True)


class GDNCache(NamedTuple):
    """Gated DeltaNet decode cache: conv [B, K-1, C] last pre-conv q|k|v columns (compute dtype),
    state [B, Hv, dk, dv] fp32 recurrent state."""

    conv: Array
    state: Array


class Attention(attention.Attention):
    """Gated full attention (`common.attention.Attention`, gated): q_proj gives per head [query (hd) | gate
    (hd)]; out = o_proj(softmax(q k^T / sqrt(hd)) v * sigmoid(gate)), zero-centred q / k norms, partial RoPE."""

    def __init__(self, cfg: Qwen3_5Config, *, rngs, dtype, param_dtype):
        super().__init__(cfg, rngs=rngs, dtype=dtype, param_dtype=param_dtype, norm=RMSNorm, gated=True)


class GatedRMSNorm(nnx.Module):
    """y = w * rmsnorm(o) * silu(z) per head over dv; ONE weight (dv,), plain w (init 1)."""

    def __init__(self, dim, eps, *, param_dtype):
        self.weight = nnx.Param(jnp.ones((dim,), param_dtype), axes=("head_dim",))
        self.eps = eps

    def __call__(self, o, z):
        of = o.astype(jnp.float32)
        y = (of * lax.rsqrt(jnp.mean(of * of, axis=-1, keepdims=True) + self.eps)).astype(o.dtype)
        y = self.weight[...].astype(jnp.float32) * y * jax.nn.silu(z.astype(jnp.float32))
        return y.astype(o.dtype)


class GatedDeltaNet(nnx.Module):
    """Gated DeltaNet mixer:
    qkv = conv_silu(in_proj_qkv x); z = in_proj_z x; beta = sigmoid(in_proj_b x);
    g = -exp(A_log) softplus(in_proj_a x + dt_bias); o = delta_rule(l2n(q)/sqrt(dk), l2n(k), v, g, beta);
    out = out_proj(GatedRMSNorm(o, z)). Value head j reads key head j // (Hv / Hk)."""

    def __init__(self, cfg: Qwen3_5Config, *, rngs, dtype, param_dtype):
        kw = dict(rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        D, Hv, C, K = cfg.hidden_size, cfg.linear_num_value_heads, cfg.conv_dim, cfg.linear_conv_kernel_dim
        self.in_proj_qkv = Linear(D, C, ("embed", "qkv"), **kw)
        self.in_proj_z = Linear(D, cfg.linear_value_dim, ("embed", "lin_heads"), **kw)
        self.in_proj_b = Linear(D, Hv, ("embed", "lin_heads"), **kw)
        self.in_proj_a = Linear(D, Hv, ("embed", "lin_heads"), **kw)
        self.conv_weight = param(rngs, normal(0.2), (C, K), param_dtype, ("qkv", "conv"))
        self.dt_bias = nnx.Param(jnp.ones((Hv,), param_dtype), axes=("lin_heads",))
        a = jax.random.uniform(rngs.params(), (Hv,), jnp.float32, 0.01, 16.0)
        self.A_log = nnx.Param(jnp.log(a).astype(param_dtype), axes=("lin_heads",))
        self.norm = GatedRMSNorm(cfg.linear_value_head_dim, cfg.rms_norm_eps, param_dtype=param_dtype)
        self.out_proj = Linear(cfg.linear_value_dim, D, ("lin_heads", "embed"), **kw)
        self.cfg = cfg
        self.dtype = dtype

    def __call__(self, x_BxTxD, valid_BxT, cache: GDNCache | None = None, valid_len_B=None,
                 chunk_size: int = GDN_CHUNK, matmul_dtype: str | None = None,
                 inverse_block: int | None = None, segment_ids_BxT: Array | None = None):
        """valid_BxT: which positions are real tokens. Padding leaves the state untouched (beta = g = 0)
        and, without a cache, is zeroed at the input as in the reference implementation.
        segment_ids_BxT (no cache; int32, equal ids <=> same sequence, e.g. `packing.sequence_index`):
        the conv reads zeros in place of inputs from another sequence (conv tap s of token t needs
        id_{t-s} = id_t), and the delta-rule state restarts from zero where the id changes."""
        if segment_ids_BxT is not None and cache is not None:
            raise ValueError("segment_ids_BxT (packed rows) is for the uncached forward only")
        cfg = self.cfg
        B, T, _ = x_BxTxD.shape
        Hk, Hv, dk, dv = (cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_key_head_dim,
                          cfg.linear_value_head_dim)
        K = cfg.linear_conv_kernel_dim
        x = x_BxTxD * valid_BxT[..., None].astype(x_BxTxD.dtype)
        qkv = self.in_proj_qkv(x)  # [B, T, C]
        prev = (jnp.zeros((B, K - 1, qkv.shape[-1]), qkv.dtype) if cache is None
                else cache.conv.astype(qkv.dtype))
        padded = jnp.concatenate([prev, qkv], axis=1)  # [B, K-1+T, C]
        w = self.conv_weight[...].astype(self.dtype)  # [C, K]
        seg = segment_ids_BxT
        ids = None if seg is None else jnp.pad(seg, ((0, 0), (K - 1, 0)), constant_values=-1)

        def tap(k):  # the inputs at t - (K - 1 - k), zero where from another sequence
            cols = padded[:, k:k + T]
            return cols if ids is None else jnp.where((ids[:, k:k + T] == seg)[..., None], cols, 0)

        conv = sum(tap(k) * w[:, k] for k in range(K))
        conv = jax.nn.silu(conv)
        kd = cfg.linear_key_dim
        # q and k heads side by side: one l2norm over [B, T, 2 Hk, dk] instead of two.
        qk = delta_rule.l2norm(conv[..., :2 * kd].reshape(B, T, 2 * Hk, dk).astype(jnp.float32))
        q, k = qk[:, :, :Hk], qk[:, :, Hk:]
        v = conv[..., 2 * kd:].reshape(B, T, Hv, dv)
        z = self.in_proj_z(x).reshape(B, T, Hv, dv)
        beta = jax.nn.sigmoid(self.in_proj_b(x).astype(jnp.float32))
        a = self.in_proj_a(x).astype(jnp.float32)
        g = -jnp.exp(self.A_log[...].astype(jnp.float32)) * jax.nn.softplus(
            a + self.dt_bias[...].astype(jnp.float32))
        keep = valid_BxT[..., None]
        beta, g = jnp.where(keep, beta, 0.0), jnp.where(keep, g, 0.0)
        rep = Hv // Hk
        q, k = jnp.repeat(q, rep, axis=2), jnp.repeat(k, rep, axis=2)
        q = q * dk ** -0.5
        v = v.astype(jnp.float32)
        state = None if cache is None else cache.state
        if cache is not None and T == 1:
            with jax.named_scope("delta_rule_step"):
                o, state = delta_rule.step(q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], state)
            o = o[:, None]
        else:
            reset = None if segment_ids_BxT is None else packing.sequence_starts(segment_ids_BxT)
            o, state = delta_rule.chunked(q, k, v, g, beta, state, chunk_size=chunk_size,
                                          matmul_dtype=matmul_dtype and jnp.dtype(matmul_dtype),
                                          inverse_block=inverse_block, reset_BxT=reset)
        new_cache = None
        if cache is not None:
            # last K-1 valid pre-conv columns: padded rows [len, len + K - 1).
            if T == 1:  # the window moves by one column iff the row's token is valid
                window = jnp.where(valid_len_B[:, None, None] > 0, padded[:, 1:], padded[:, :K - 1])
            else:
                take = jax.vmap(lambda p, n: lax.dynamic_slice_in_dim(p, n, K - 1, axis=0))
                window = take(padded, valid_len_B)
            new_cache = GDNCache(window.astype(cache.conv.dtype), state)
        o = self.norm(o.astype(self.dtype), z)
        return self.out_proj(o.reshape(B, T, Hv * dv)), new_cache
