"""The chunked delta rule equals the token recurrence; padding positions leave the state alone."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prover_jax.models.qwen3_5 import delta_rule


def inputs(T, B=2, H=3, dk=8, dv=4, seed=0):
    ks = jax.random.split(jax.random.PRNGKey(seed), 6)
    q = delta_rule.l2norm(jax.random.normal(ks[0], (B, T, H, dk))) * dk ** -0.5
    k = delta_rule.l2norm(jax.random.normal(ks[1], (B, T, H, dk)))
    v = jax.random.normal(ks[2], (B, T, H, dv))
    g = -jax.nn.softplus(jax.random.normal(ks[3], (B, T, H)))
    beta = jax.nn.sigmoid(jax.random.normal(ks[4], (B, T, H)))
    s0 = jax.random.normal(ks[5], (B, H, dk, dv))
    return q, k, v, g, beta, s0


@pytest.mark.parametrize("T,chunk", [(1, 64), (5, 4), (64, 64), (100, 64), (129, 64), (37, 16)])
def test_chunked_equals_recurrent(T, chunk):
    q, k, v, g, beta, s0 = inputs(T)
    for state in (None, s0):
        o_r, s_r = delta_rule.recurrent(q, k, v, g, beta, state)
        o_c, s_c = jax.jit(delta_rule.chunked, static_argnames="chunk_size")(
            q, k, v, g, beta, state, chunk_size=chunk)
        np.testing.assert_allclose(o_c, o_r, atol=2e-5, rtol=1e-4)
        np.testing.assert_allclose(s_c, s_r, atol=2e-5, rtol=1e-4)


def test_step_is_one_token_of_recurrence():
    q, k, v, g, beta, s0 = inputs(3)
    o_r, s_r = delta_rule.recurrent(q, k, v, g, beta, s0)
    s = s0
    for t in range(3):
        o, s = delta_rule.step(q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t], s)
        np.testing.assert_allclose(o, o_r[:, t], atol=1e-5)
    np.testing.assert_allclose(s, s_r, atol=1e-5)


def test_zero_beta_and_decay_skip_positions():
    q, k, v, g, beta, s0 = inputs(70)
    keep = jnp.arange(70) < 50  # the last 20 positions are padding
    g_m, b_m = jnp.where(keep[None, :, None], g, 0.0), jnp.where(keep[None, :, None], beta, 0.0)
    _, s_pad = delta_rule.chunked(q, k, v, g_m, b_m, s0)
    _, s_ref = delta_rule.recurrent(q[:, :50], k[:, :50], v[:, :50], g[:, :50], beta[:, :50], s0)
    np.testing.assert_allclose(s_pad, s_ref, atol=2e-5, rtol=1e-4)
