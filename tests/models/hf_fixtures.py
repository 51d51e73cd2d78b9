"""Tiny random Qwen3.5 checkpoints written by transformers (torch CPU) for parity tests."""

from __future__ import annotations

import json
import os

import numpy as np
import torch
from safetensors.torch import load_file, save_file

TINY = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=16, linear_value_head_dim=8, linear_conv_kernel_dim=4,
            rms_norm_eps=1e-6, hidden_act="silu", max_position_embeddings=512, eos_token_id=1)


def text_config(layer_types, tied=True, **over):
    from transformers import Qwen3_5TextConfig

    kw = dict(TINY)
    kw.update(over)
    rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
            "mrope_section": [1, 1, 0], "mrope_interleaved": True}
    return Qwen3_5TextConfig(num_hidden_layers=len(layer_types), layer_types=list(layer_types),
                             tie_word_embeddings=tied, rope_parameters=rope, **kw)


def perturb_(model, seed=0):
    """Moves norm weights, dt_bias and A_log away from their init values (else (1+w) traps hide)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("norm.weight", "dt_bias", "A_log")):
                p.add_(0.3 * torch.randn(p.shape, generator=g))


def make_text_checkpoint(path, layer_types, tied=True, seed=0, dtype=torch.float32, **over):
    from transformers import Qwen3_5ForCausalLM

    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(text_config(layer_types, tied, **over)).eval()
    perturb_(model, seed)
    model = model.to(dtype)
    with torch.no_grad():  # official files keep these two in fp32
        for layer in model.model.layers:
            if hasattr(layer, "linear_attn"):
                layer.linear_attn.A_log.data = layer.linear_attn.A_log.data.float()
                layer.linear_attn.norm.weight.data = layer.linear_attn.norm.weight.data.float()
    model.save_pretrained(path)
    return model


def make_multimodal_checkpoint(path, layer_types, tied=True, seed=0):
    """The released layout: model.language_model.*, model.visual.*, an mtp.* head, text_config nested."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    torch.manual_seed(seed)
    tc = text_config(layer_types, tied).to_dict()
    vc = dict(depth=1, hidden_size=16, num_heads=2, intermediate_size=32, out_hidden_size=64,
              patch_size=4, temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=16)
    cfg = Qwen3_5Config(text_config=tc, vision_config=vc, tie_word_embeddings=tied)
    model = Qwen3_5ForConditionalGeneration(cfg).eval()
    perturb_(model, seed)
    model.save_pretrained(path)
    files = [f for f in os.listdir(path) if f.endswith(".safetensors")]
    assert len(files) == 1, files
    tensors = load_file(os.path.join(path, files[0]))
    tensors["mtp.fc.weight"] = torch.randn(64, 128)
    save_file(tensors, os.path.join(path, files[0]), metadata={"format": "pt"})
    return model


def hf_logits(model, tokens, mask=None, positions=None):
    with torch.no_grad():
        kw = {"use_cache": False}
        if mask is not None:
            kw["attention_mask"] = torch.tensor(np.asarray(mask))
        if positions is not None:
            kw["position_ids"] = torch.tensor(np.asarray(positions))
        out = model(input_ids=torch.tensor(np.asarray(tokens)), **kw)
    return out.logits.float().numpy()


def read_config(path):
    with open(os.path.join(path, "config.json")) as f:
        return json.load(f)
