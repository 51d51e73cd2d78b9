"""bench/lever_train.py's levers do what their docstrings say."""

import os
import sys

import jax.numpy as jnp
import numpy as np

from prover_jax.training import optim
from prover_jax.training.config import default_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_freeze_embed_leaves_the_embedding_unchanged_under_weight_decay():
    """freeze_embed: the tied embedding gets no update, adamw's decoupled weight decay included, while
    the other matrices still move."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import lever_train
    assert lever_train.freeze_embed() == ["--config.optim.name=adamw_frozen_embed"]
    cfg = default_config().optim
    cfg.name, cfg.weight_decay, cfg.learning_rate = "adamw_frozen_embed", 0.1, 1e-2
    opt = optim.make_optimizer(cfg)
    params = {"embed_tokens": {"embedding": jnp.ones((3, 2))}, "w": jnp.ones((2, 2))}
    grads = {"embed_tokens": {"embedding": jnp.full((3, 2), 0.5)}, "w": jnp.full((2, 2), 0.5)}
    state = opt.init(params)
    for _ in range(2):
        updates, state = opt.update(grads, state, params)
        np.testing.assert_array_equal(updates["embed_tokens"]["embedding"], 0.0)
        assert np.all(np.asarray(updates["w"]) < 0)
