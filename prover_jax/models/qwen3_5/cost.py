"""Qwen3.5's cost model (its `Family` fields; prover-aot's model flops, `aot.gpu_memory`'s estimate):
gated full attention (softmax over the context, `common.cost`) and Gated DeltaNet (a fixed-size state
per value head, read and written once a token)."""

from __future__ import annotations

from prover_jax.models.common.cost import full_attention_flops_per_token, kv_cache_bytes
from prover_jax.models.qwen3_5.config import Qwen3_5Config

__all__ = ["attention_flops_per_token", "decode_state_bytes", "full_attention_flops_per_token",
           "mixer_activation_bytes"]


def attention_flops_per_token(cfg: Qwen3_5Config, context: int) -> float:
    """Forward flops per token of the sequence mixers beyond their projections: full attention
    (causal context of `context` tokens on average) and the delta rule's state reads/writes
    (~3 dk x dv products per value head)."""
    lin = cfg.num_hidden_layers - cfg.full_attention_layers
    gdn = 6.0 * cfg.linear_num_value_heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim
    return full_attention_flops_per_token(cfg, context) + lin * gdn


def mixer_activation_bytes(cfg: Qwen3_5Config, runtime) -> float:
    """Bytes per token of the sequence mixers' working set in a recomputed block (values and their
    gradients), averaged over the layers: per attention layer 2 x 2 x (3 H hd + 2 Hkv hd) (q, gate,
    output; k, v; bf16, no T x T scores: cuDNN / splash), per delta-rule layer 2 x (2 x 2 x (2 C_conv +
    Hv dv) + 4 x (2 Hv dk + 2 Hv dv + Hv c)) with c = runtime.gdn_chunk (its in-chunk matrices in fp32)."""
    H, Hkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    Hv, dk, dv = cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
    per_full = 2 * 2 * (3 * H * hd + 2 * Hkv * hd)
    per_lin = 2 * (2 * 2 * (2 * cfg.conv_dim + Hv * dv) + 4 * (2 * Hv * dk + 2 * Hv * dv + Hv * runtime.gdn_chunk))
    frac_full = cfg.full_attention_layers / cfg.num_hidden_layers
    return frac_full * per_full + (1 - frac_full) * per_lin


def decode_state_bytes(cfg: Qwen3_5Config, *, slots: float, length: int) -> dict[str, float]:
    """Bytes of the decode cache of `slots` rows of up to `length` tokens: "kv" (bf16 k / v of the
    full-attention layers), "delta_state" (per delta-rule layer the fp32 state Hv dk dv and the bf16 conv
    window (K - 1) x C_conv)."""
    n_lin = cfg.num_hidden_layers - cfg.full_attention_layers
    Hv, dk, dv = cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
    return {"kv": kv_cache_bytes(cfg, slots=slots, length=length),
            "delta_state": slots * n_lin * (Hv * dk * dv * 4 + (cfg.linear_conv_kernel_dim - 1) * cfg.conv_dim * 2)}
