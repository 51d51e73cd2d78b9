"""Tiny random Qwen3 (dense) checkpoints written by transformers (torch CPU): the references of the Qwen3
parity, decode and conversion tests. transformers' logits: `helpers.hf.hf_logits`."""

from __future__ import annotations

import torch

TINY3 = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6, hidden_act="silu", max_position_embeddings=512,
             eos_token_id=1)


def hf_config(tied=True, rope_theta=10000.0, **over):
    """transformers' Qwen3Config of TINY3 (any field overridden), default RoPE of `rope_theta`."""
    from transformers import Qwen3Config

    return Qwen3Config(**{**TINY3, **over}, tie_word_embeddings=tied,
                       rope_parameters={"rope_type": "default", "rope_theta": rope_theta})


def make_checkpoint(path, tied=True, seed=0, dtype=torch.float32, rope_theta=10000.0, **over):
    """A random Qwen3ForCausalLM saved at `path` (and returned, eval mode, in `dtype`): norm weights moved
    off 1 and biases (attention_bias) off 0, so a wrong (1 + w) or a dropped bias shows in the logits."""
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(hf_config(tied, rope_theta, **over)).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.3 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
    model = model.to(dtype)
    model.save_pretrained(path)
    return model
