"""Cost-model terms of softmax attention shared by the families' cost models (their `Family` fields
attention_flops_per_token, full_attention_flops_per_token, decode_state_bytes). A config passed here
needs full_attention_layers, num_attention_heads, num_key_value_heads and head_dim."""

from __future__ import annotations


def full_attention_flops_per_token(cfg, context: int) -> float:
    """Forward flops per token of full attention's q k^T and p v over `context` keys on average."""
    return cfg.full_attention_layers * 4.0 * cfg.num_attention_heads * cfg.head_dim * context


def kv_cache_bytes(cfg, *, slots: float, length: int) -> float:
    """Bytes of the bf16 k / v caches of `slots` rows of `length` tokens over the full-attention layers."""
    return slots * length * cfg.full_attention_layers * 2 * cfg.num_key_value_heads * cfg.head_dim * 2
