"""Sampling at ties and at tiny temperatures: the kept set is transformers' TopKLogitsWarper then
TopPLogitsWarper (ties at the k-th logit kept; a top-p cut through tied logits keeps the highest ids),
and a temperature below GREEDY_TEMPERATURE is argmax (logits / temperature would overflow)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

from prover_jax.sampling import SamplingParams, kept_mask, sample
from prover_jax.sampling.sampler import GREEDY_TEMPERATURE


def hf_kept(logits_V, top_k, top_p):
    """bool [V]: the tokens HF's top-k then top-p warpers leave finite."""
    s = torch.tensor(np.asarray(logits_V, np.float32))[None]
    if top_k > 0:
        s = TopKLogitsWarper(top_k)(None, s)
    if top_p < 1.0:
        s = TopPLogitsWarper(top_p)(None, s)
    return torch.isfinite(s)[0].numpy()


def test_kept_set_equals_hf_warpers_with_ties():
    rng = np.random.default_rng(0)
    B, V = 600, 10
    logits = (rng.integers(-3, 4, (B, V)) * 0.5).astype(np.float32)  # many ties
    logits[::3] = rng.normal(size=(B // 3, V)) * 2  # and rows without
    top_k = rng.integers(0, V + 2, B)
    top_p = rng.choice([1.0, 0.95, 0.9, 0.7, 0.5, 0.3, 0.1], B)
    got = np.asarray(kept_mask(jnp.asarray(logits), jnp.asarray(top_k, jnp.int32),
                               jnp.asarray(top_p, jnp.float32)))
    for b in range(B):
        np.testing.assert_array_equal(got[b], hf_kept(logits[b], int(top_k[b]), float(top_p[b])),
                                      err_msg=f"row {b}: {logits[b]} k={top_k[b]} p={top_p[b]}")


@pytest.mark.parametrize("logits_V,temperature,top_k,top_p", [
    ([0.0, 0.0, 2.0, 2.0], 1.0, 3, 0.9),  # top-k keeps both 0s (tie at the 3rd); top-p then one of them
    ([1.0, 0.0, -3.0, -1.0, 2.0, -2.0, 3.0, 1.0, 0.0], 0.7, 5, 0.9),  # tie at the 5th logit
], ids=["tie-at-k", "tie-at-k-and-p"])
def test_tied_top_k_draws_hf_distribution(logits_V, temperature, top_k, top_p):
    """Draws follow softmax(logits / T) over HF's kept set (top-p mass over everything top-k keeps)."""
    logits_V = np.asarray(logits_V, np.float32)
    n, V = 20000, len(logits_V)
    tokens, _ = sample(jnp.broadcast_to(jnp.asarray(logits_V), (n, V)), jax.random.PRNGKey(0),
                       jnp.full((n,), temperature), jnp.full((n,), top_k, jnp.int32), jnp.full((n,), top_p))
    counts = np.bincount(np.asarray(tokens), minlength=V)
    keep = hf_kept(logits_V / temperature, top_k, top_p)
    assert counts[~keep].sum() == 0, (counts, keep)
    p = np.exp(logits_V[keep] / temperature - (logits_V[keep] / temperature).max())
    expected = n * p / p.sum()
    chi2 = np.sum((counts[keep] - expected) ** 2 / expected)
    assert chi2 < 16.27, (chi2, counts, expected)  # df <= 3, p = 0.001


def test_tiny_temperatures_are_greedy():
    """Below GREEDY_TEMPERATURE a row is argmax (its logits / temperature would be -inf or overflow),
    on the device as for SamplingParams.greedy; at it, the row samples."""
    logits = jnp.asarray([[-300.0, -200.0, -250.0], [5.0, 7.0, 6.0]] * 2, jnp.float32)
    for t in (1e-37, 1e-40, 1e-6, 0.0):
        assert SamplingParams(temperature=t).greedy
        for seed in range(3):
            tokens, _ = sample(logits, jax.random.PRNGKey(seed), jnp.full((4,), t), jnp.zeros((4,), jnp.int32),
                               jnp.ones((4,)))
            np.testing.assert_array_equal(tokens, [1, 1, 1, 1])
    assert not SamplingParams(temperature=GREEDY_TEMPERATURE).greedy
    flat = jnp.zeros((64, 3), jnp.float32)  # sampled at GREEDY_TEMPERATURE: ties drawn at random
    tokens, _ = sample(flat, jax.random.PRNGKey(0), jnp.full((64,), GREEDY_TEMPERATURE),
                       jnp.zeros((64,), jnp.int32), jnp.ones((64,)))
    assert len(set(np.asarray(tokens).tolist())) == 3
