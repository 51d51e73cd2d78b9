"""Qwen3's cost model (its `Family` fields; prover-aot's model flops, `aot.gpu_memory`'s estimate):
every layer is full softmax attention (`common.cost`)."""

from __future__ import annotations

from prover_jax.models.common.cost import full_attention_flops_per_token, kv_cache_bytes
from prover_jax.models.qwen3.config import Qwen3Config

__all__ = ["attention_flops_per_token", "decode_state_bytes", "full_attention_flops_per_token",
           "mixer_activation_bytes"]


def attention_flops_per_token(cfg: Qwen3Config, context: int) -> float:
    """Forward flops per token of attention beyond its projections: q k^T and p v over `context` keys
    on average, in every layer."""
    return full_attention_flops_per_token(cfg, context)


def mixer_activation_bytes(cfg: Qwen3Config, runtime=None) -> float:
    """Bytes per token per layer of attention's working set in a recomputed block (values and their
    gradients, bf16, no T x T scores: cuDNN / splash): 2 x 2 x (2 H hd + 2 Hkv hd) (q, output; k, v).
    The runtime changes nothing here."""
    H, Hkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    return 2 * 2 * (2 * H * hd + 2 * Hkv * hd)


def decode_state_bytes(cfg: Qwen3Config, *, slots: float, length: int) -> dict[str, float]:
    """Bytes of the decode cache of `slots` rows of up to `length` tokens: "kv" (bf16 k / v, every layer)."""
    return {"kv": kv_cache_bytes(cfg, slots=slots, length=length)}
