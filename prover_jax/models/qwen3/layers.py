"""Qwen3 building blocks in Flax NNX: its attention (`common.attention.Attention`, ungated: per-head q / k
RMSNorm, full-width RoPE, biases iff attention_bias) and the biased Linear. RMSNorm (y = w * x / rms(x)),
Linear, the SwiGLU MLP and RoPE are `common.layers`', the attention kernels, the KV cache and the CPU
decode layouts `common.attention`'s. Parameters are stored in `param_dtype`, matmuls run in `dtype`; norms and softmax
in fp32. Every parameter carries logical axis names (see prover_jax.sharding). Kernels are stored
(in, out), the transpose of torch's Linear weight.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from prover_jax.models.common import attention
from prover_jax.models.common.attention import KVCache
from prover_jax.models.common.layers import MLP, Linear, RMSNorm
from prover_jax.models.qwen3.config import Qwen3Config

Array = jax.Array

__all__ = ["MLP", "Attention", "BiasedLinear", "KVCache", "Linear", "RMSNorm"]


class BiasedLinear(Linear):
    """y = x @ kernel + bias (a `Linear`, so LoRA targets it alike); bias [out] init 0, axes (out axis,)."""

    def __init__(self, d_in, d_out, axes, *, rngs, dtype, param_dtype):
        super().__init__(d_in, d_out, axes, rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        self.bias = nnx.Param(jnp.zeros((d_out,), param_dtype), axes=axes[1:])

    def __call__(self, x: Array) -> Array:
        return super().__call__(x) + self.bias[...].astype(self.dtype)


class Attention(attention.Attention):
    """`common.attention.Attention`: q = rope(q_norm(q_proj x)), k = rope(k_norm(k_proj x)) per head,
    v = v_proj x; out = o_proj(softmax(q k^T / sqrt(hd)) v), GQA head h -> kv head h // (H / Hkv). The
    projections have biases iff cfg.attention_bias."""

    def __init__(self, cfg: Qwen3Config, *, rngs, dtype, param_dtype):
        super().__init__(cfg, rngs=rngs, dtype=dtype, param_dtype=param_dtype, norm=RMSNorm,
                         linear=BiasedLinear if cfg.attention_bias else Linear)
