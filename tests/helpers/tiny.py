"""Tiny Qwen3.5 models: one set of small dimensions, which a test overrides where it needs another."""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx

from prover_jax.models import qwen3_5

LINEAR, FULL = qwen3_5.LINEAR, qwen3_5.FULL
DIMS = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
            head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
            linear_value_head_dim=8)


def tiny_config(layer_types=(LINEAR, FULL), **overrides) -> qwen3_5.Qwen3_5Config:
    """A Qwen3_5Config of DIMS (a linear then a full attention layer unless `layer_types`), any field
    overridden."""
    return qwen3_5.Qwen3_5Config(num_hidden_layers=len(layer_types), layer_types=tuple(layer_types),
                                 **{**DIMS, **overrides})


def tiny_model(cfg: qwen3_5.Qwen3_5Config | None = None, seed: int = 0, logit_scale: float | None = None,
               **kw) -> qwen3_5.Qwen3_5:
    """Random Qwen3_5(cfg or tiny_config()); logit_scale multiplies lm_head (30: logits of std ~3, so
    greedy choices are far from ties)."""
    model = qwen3_5.Qwen3_5(cfg or tiny_config(), rngs=nnx.Rngs(seed), **kw)
    if logit_scale is not None:
        model.lm_head.set_value(model.lm_head.get_value() * logit_scale)
    return model


def prompt(n: int, seed: int, vocab_size: int = DIMS["vocab_size"]) -> np.ndarray:
    """n random token ids below vocab_size, a fixed function of seed."""
    return np.asarray(jax.random.randint(jax.random.PRNGKey(100 + seed), (n,), 0, vocab_size))
