"""Qwen3 dense decoder (Qwen3ForCausalLM: GQA attention with per-head q / k RMSNorm, SwiGLU MLP) in Flax NNX.

Public API:
    model = qwen3.load_hf(path, dtype=jnp.float32, mesh=None)
    logits = model(tokens)                       # int32 [B, T] -> float32 [B, T, V]
    logits, cache = model(tokens, cache=cache)   # decode with qwen3.init_cache(...)
    logits = model(tokens, segment_ids_BxT=seg)  # packed rows (models.packing)
    qwen3.save_hf(model, out_dir, dtype=None)
"""

from prover_jax.models.qwen3 import cost
from prover_jax.models.qwen3.config import CONFIGS, MODEL_TYPE, Qwen3Config
from prover_jax.models.qwen3.model import Cache, Qwen3, cache_axes, init_cache
from prover_jax.models.qwen3.params import (abstract_model, export_tensors, load_hf, param_shardings, path_to_hf,
                                            save_hf, shard_model)
from prover_jax.models.qwen3_5.model import Runtime, resolve_runtime  # one runtime for both (its gdn_* unused)

# the Linear modules LoRA may adapt (models.lora; model.lora.targets): every projection but the head
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

__all__ = ["CONFIGS", "LORA_TARGETS", "MODEL_TYPE", "Cache", "Qwen3", "Qwen3Config", "Runtime", "abstract_model",
           "cache_axes", "cost", "export_tensors", "init_cache", "load_hf", "param_shardings", "path_to_hf",
           "resolve_runtime", "save_hf", "shard_model"]
