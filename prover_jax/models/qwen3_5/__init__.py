"""Qwen3.5 text model (hybrid Gated DeltaNet + gated full attention) in Flax NNX.

Public API:
    model = qwen3_5.load_hf(path, dtype=jnp.float32, mesh=None)
    logits = model(tokens)                       # int32 [B, T] -> float32 [B, T, V]
    logits, cache = model(tokens, cache=cache)   # decode with qwen3_5.init_cache(...)
    logits = model(tokens, segment_ids_BxT=seg)  # packed rows (models.packing)
    qwen3_5.save_hf(model, out_dir, dtype=None)
"""

from prover_jax.models import packing
from prover_jax.models.qwen3_5 import cost, delta_rule
from prover_jax.models.qwen3_5.config import CONFIGS, FULL, LINEAR, Qwen3_5Config, layer_pattern
from prover_jax.models.qwen3_5.model import Cache, Qwen3_5, Runtime, cache_axes, init_cache, resolve_runtime
from prover_jax.models.qwen3_5.params import (HFSource, abstract_model, export_tensors, load_hf,
                                              param_shardings, path_to_hf, save_hf, shard_model)

# the Linear modules LoRA may adapt (models.lora; model.lora.targets): every projection but the head
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a",
                "out_proj", "gate_proj", "up_proj", "down_proj")

__all__ = ["CONFIGS", "FULL", "LINEAR", "LORA_TARGETS", "Cache", "HFSource", "Qwen3_5", "Qwen3_5Config",
           "abstract_model", "cache_axes", "cost", "delta_rule", "export_tensors", "init_cache", "layer_pattern",
           "load_hf", "packing", "param_shardings", "path_to_hf", "resolve_runtime", "Runtime", "save_hf",
           "shard_model"]
