"""Qwen3.5 text model (hybrid Gated DeltaNet + gated full attention) in Flax NNX.

Public API:
    model = qwen3_5.load_hf(path, dtype=jnp.float32, mesh=None)
    logits = model(tokens)                       # int32 [B, T] -> float32 [B, T, V]
    logits, cache = model(tokens, cache=cache)   # decode with qwen3_5.init_cache(...)
    logits = model(tokens, segment_ids_BxT=seg)  # packed rows (models.packing)
    qwen3_5.save_hf(model, out_dir, dtype=None)
"""

from prover_jax.models import packing
from prover_jax.models.qwen3_5 import delta_rule
from prover_jax.models.qwen3_5.config import CONFIGS, FULL, LINEAR, Qwen3_5Config, layer_pattern
from prover_jax.models.qwen3_5.model import Cache, Qwen3_5, Runtime, cache_axes, init_cache, resolve_runtime
from prover_jax.models.qwen3_5.params import (HFSource, abstract_model, export_tensors, load_hf,
                                              param_shardings, save_hf, shard_model)

__all__ = ["CONFIGS", "FULL", "LINEAR", "Cache", "HFSource", "Qwen3_5", "Qwen3_5Config",
           "abstract_model", "cache_axes", "delta_rule", "export_tensors", "init_cache", "layer_pattern",
           "load_hf", "packing", "param_shardings", "resolve_runtime", "Runtime", "save_hf",
           "shard_model"]
