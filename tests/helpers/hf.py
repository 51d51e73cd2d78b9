"""Tiny random Qwen3.5 checkpoints written by transformers (torch CPU), and transformers' logits and
greedy decoding of them: the references of the parity, conversion, sharding and generation tests."""

from __future__ import annotations

import json
import os

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from helpers.tiny import DIMS

TINY = dict(DIMS, vocab_size=96, hidden_size=64, intermediate_size=96, head_dim=16, linear_key_head_dim=16,
            linear_conv_kernel_dim=4, rms_norm_eps=1e-6, hidden_act="silu", max_position_embeddings=512,
            eos_token_id=1)
LOGPROB_TOL = 1e-4  # our logprobs vs transformers' and vs our own full forward
MIN_GAP = 1e-3  # HF's top-2 logit gap at every greedy step: below this the argmax is not well posed


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


def make_greedy_checkpoint(path, layer_types, tied, seed, **over):
    """A tiny random HF checkpoint whose greedy continuations are varied and well separated.

    Freshly initialised tiny models (tied ones especially) echo their input token forever; scaling
    the projections that write into the residual stream lets the layers, not the token embedding,
    decide the next token, and scaling the final norm spreads the logits.
    """
    model = make_text_checkpoint(path, layer_types, tied=tied, seed=seed, **over)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("down_proj.weight", "o_proj.weight", "out_proj.weight")):
                p.mul_(30.0)
        w = model.model.norm.weight
        w.copy_((1.0 + w) * 5.0 - 1.0)  # Qwen3.5 RMSNorm scales by (1 + w)
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


def word_tokenizer(path, vocab_size=TINY["vocab_size"]):
    """Saved at `path`: token id i <-> word 'w{i}' (0: <unk>, 1: <eos>, the eos token), whitespace-split;
    decode joins with spaces."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<eos>": 1, **{f"w{i}": i for i in range(2, vocab_size)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>",
                   "eos_token": "<eos>"}, f)


def hf_logits(model, tokens, mask=None, positions=None):
    with torch.no_grad():
        kw = {"use_cache": False}
        if mask is not None:
            kw["attention_mask"] = torch.tensor(np.asarray(mask))
        if positions is not None:
            kw["position_ids"] = torch.tensor(np.asarray(positions))
        out = model(input_ids=torch.tensor(np.asarray(tokens)), **kw)
    return out.logits.float().numpy()


def hf_greedy(model, prompt, n_new):
    """(new tokens, raw logits [n_new, V]) from HF greedy generate, batch 1, EOS disabled."""
    ids = torch.tensor(np.asarray(prompt, np.int64)[None])
    with torch.no_grad():  # explicit mask: else a prompt token equal to pad_token_id reads as padding
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=n_new, min_new_tokens=n_new, eos_token_id=None,
                             pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    tokens = out.sequences[0, len(prompt):].numpy()
    return tokens, torch.cat(out.logits).float().numpy()


def log_softmax_at(logits_NxV, tokens_N):
    """log softmax(logits)[n, tokens[n]] for each row n, in float64."""
    logits = np.asarray(logits_NxV, np.float64)
    m = logits.max(axis=-1, keepdims=True)
    logp = logits - m - np.log(np.exp(logits - m).sum(axis=-1, keepdims=True))
    return logp[np.arange(len(tokens_N)), tokens_N]


def read_config(path):
    with open(os.path.join(path, "config.json")) as f:
        return json.load(f)
