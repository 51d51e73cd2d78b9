"""Cached decode equals the full forward, for both layer kinds, with ragged rows."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from prover_jax.models import qwen3_5

from helpers.tiny import tiny_config

L, A = qwen3_5.LINEAR, qwen3_5.FULL
CFG = tiny_config((L, A, L, A), vocab_size=80, hidden_size=48, intermediate_size=64, head_dim=16)


def model_and_tokens(T=90, B=3, seed=0):
    model = qwen3_5.Qwen3_5(CFG, rngs=nnx.Rngs(seed))
    # random norm / gate parameters so every term matters
    for path, var in nnx.to_flat_state(nnx.state(model)):
        if path[-1] in ("weight", "dt_bias", "A_log"):
            var.set_value(var.get_value() + 0.3 * jax.random.normal(jax.random.PRNGKey(len(path)),
                                                                     var.get_value().shape))
    tokens = jax.random.randint(jax.random.PRNGKey(seed + 1), (B, T), 0, CFG.vocab_size)
    return model, tokens


def test_prefill_then_steps_equals_full_forward():
    model, tokens = model_and_tokens()
    full = model(tokens)
    P = 70  # prefill crosses the 64-token chunk
    cache = qwen3_5.init_cache(CFG, tokens.shape[0], 128)
    logits, cache = model(tokens[:, :P], cache=cache)
    np.testing.assert_allclose(logits, full[:, :P], atol=1e-4)
    step = nnx.jit(lambda m, t, c: m(t, cache=c))
    for t in range(P, tokens.shape[1]):
        logits, cache = step(model, tokens[:, t:t + 1], cache)
        np.testing.assert_allclose(logits[:, 0], full[:, t], atol=1e-4)
    assert list(cache.pos) == [tokens.shape[1]] * tokens.shape[0]


def test_ragged_prefill_and_extension():
    """Rows with different true lengths (right padding) then a multi-token extension."""
    model, tokens = model_and_tokens(T=60)
    lens = jnp.array([20, 45, 3], jnp.int32)
    cache = qwen3_5.init_cache(CFG, 3, 128)
    _, cache = model(tokens[:, :48], cache=cache, valid_len_B=lens)  # padded block of 48
    ext = jax.random.randint(jax.random.PRNGKey(9), (3, 12), 0, CFG.vocab_size)
    logits, cache = model(ext, cache=cache)
    for b in range(3):
        n = int(lens[b])
        seq = jnp.concatenate([tokens[b, :n], ext[b]])[None]
        ref = model(seq)[0, n:]
        np.testing.assert_allclose(logits[b], ref, atol=1e-4)
    np.testing.assert_array_equal(cache.pos, lens + 12)


def test_gdn_cache_state_is_fp32_with_bf16_compute():
    model = qwen3_5.Qwen3_5(CFG, rngs=nnx.Rngs(0), dtype=jnp.bfloat16)
    cache = qwen3_5.init_cache(CFG, 1, 16, dtype=jnp.bfloat16)
    logits, cache = model(jnp.ones((1, 5), jnp.int32), cache=cache)
    assert logits.dtype == jnp.float32
    assert cache.layers[0].state.dtype == jnp.float32 and cache.layers[1].k.dtype == jnp.bfloat16


def test_linear_only_model_decodes_with_cache():
    cfg = CFG.replace(num_hidden_layers=2, layer_types=(L, L))
    model = qwen3_5.Qwen3_5(cfg, rngs=nnx.Rngs(0))
    tokens = jax.random.randint(jax.random.PRNGKey(3), (2, 12), 0, cfg.vocab_size)
    full = model(tokens)
    cache = qwen3_5.init_cache(cfg, 2, 16)
    assert cache.max_length is None
    logits, cache = model(tokens[:, :10], cache=cache)
    for t in range(10, 12):
        step, cache = model(tokens[:, t:t + 1], cache=cache)
        np.testing.assert_allclose(step[:, 0], full[:, t], atol=1e-4)
    np.testing.assert_allclose(logits, full[:, :10], atol=1e-4)
