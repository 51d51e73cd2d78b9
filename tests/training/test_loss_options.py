"""grpo_loss's GRPO options against NumPy: KL estimators (value and gradient), GSPO's sequence-level
ratio (rows and packed runs); the defaults change nothing. (DAPO's overlong handling is host-side:
tests/training/test_dynamic_sampling.py.)"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prover_jax.training.config import default_config
from prover_jax.training.loss import KL_ESTIMATORS, grpo_loss
from prover_jax.training.step import _loss_kwargs

B, L = 3, 6
EPS = dict(eps_low=0.1, eps_high=0.15)


def inputs(seed, scale=0.3):
    rng = np.random.default_rng(seed)
    mask = rng.random((B, L)) < 0.75
    mask[:, 0] = False
    old = (-rng.random((B, L)) * 2).astype(np.float32)
    logp = (old + rng.normal(0, scale, (B, L))).astype(np.float32)
    ref = (logp + rng.normal(0, 0.5, (B, L))).astype(np.float32)
    adv = rng.normal(0, 1, (B, L)).astype(np.float32)
    return dict(logp=logp, old=old, ref=ref, adv=adv, mask=mask)


def value_and_grad(d, **kw):
    """(loss, metrics), d loss / d logp of grpo_loss on d's arrays."""
    j = {k: jnp.asarray(v) for k, v in d.items()}
    fn = lambda lp: grpo_loss(lp, j["old"], j["adv"], j["mask"], **EPS, **kw)  # noqa: E731
    (loss, metrics), grad = jax.value_and_grad(fn, has_aux=True)(j["logp"])
    return float(loss), {k: float(v) for k, v in metrics.items()}, np.asarray(grad)


# ------------------------------------------------------------------------------------ KL estimators

def np_kl(logp, ref, name):
    """(kl, d kl / d logp) per token."""
    x = logp.astype(np.float64) - ref
    d = np.clip(-x, -20, 20)
    raw = np.exp(d) - d - 1  # k3 is clamped to 10 (spec, verl), with no gradient past the clamp
    k3, g3 = np.minimum(raw, 10.0), np.where(raw < 10, 1 - np.exp(d), 0.0)
    return {"k1": (x, np.ones_like(x)), "k2": (0.5 * x**2, x), "k3": (k3, g3), "k3+": (k3, x)}[name]


@pytest.mark.parametrize("name", ["k1", "k2", "k3", "k3+"])
def test_kl_estimator_value_and_gradient(name):
    d = inputs(0)
    d["adv"][:] = 0.0  # the policy term is 0 with a 0 gradient: the loss is the KL term alone
    d["ref"][1, 3], d["mask"][1, 3] = d["logp"][1, 3] + 12.0, True  # k3 far past its clamp
    d["ref"][0, 2], d["mask"][0, 2] = d["logp"][0, 2] + 3.0, True  # k3 = 16.1 before the clamp of 10
    ref = jnp.asarray(d["ref"])
    loss, metrics, grad = value_and_grad(d, kl_coef=1.0, ref_logprobs=ref, kl_estimator=name)
    m, n = d["mask"], d["mask"].sum()
    kl, g = np_kl(d["logp"], d["ref"], name)
    np.testing.assert_allclose(loss, kl[m].sum() / n, rtol=1e-5)
    np.testing.assert_allclose(metrics["kl"], kl[m].sum() / n, rtol=1e-5)
    np.testing.assert_allclose(grad, np.where(m, g / n, 0.0), rtol=1e-5, atol=1e-7)
    if name == "k3+":  # exactly k3's value, exactly k2's gradient
        _, m3, _ = value_and_grad(d, kl_coef=1.0, ref_logprobs=ref, kl_estimator="k3")
        _, _, g2 = value_and_grad(d, kl_coef=1.0, ref_logprobs=ref, kl_estimator="k2")
        assert metrics["kl"] == m3["kl"]
        np.testing.assert_array_equal(grad, g2)


def test_unknown_names_fail_naming_the_field():
    d = {k: jnp.asarray(v) for k, v in inputs(0).items()}
    with pytest.raises(ValueError, match=r"loss\.kl_estimator.*k1, k2, k3, k3\+"):
        grpo_loss(d["logp"], d["old"], d["adv"], d["mask"], **EPS, kl_estimator="k4")
    with pytest.raises(ValueError, match=r"loss\.ratio_level.*sequence, token"):
        grpo_loss(d["logp"], d["old"], d["adv"], d["mask"], **EPS, ratio_level="group")
    assert KL_ESTIMATORS.names() == ["k1", "k2", "k3", "k3+"]


# --------------------------------------------------------------------------- sequence ratio (GSPO)

def np_gspo(d, seq_BxL):
    """(token-mean loss, ratio_mean, clip_frac, gradient) of GSPO-token; seq_BxL numbers the sequences."""
    m, a = d["mask"], d["adv"].astype(np.float64)
    lr = np.where(m, d["logp"].astype(np.float64) - d["old"], 0.0)
    s = np.ones((B, L))
    for i in np.unique(seq_BxL):
        at = seq_BxL == i
        if m[at].any():
            s[at] = np.exp(lr[at].sum() / m[at].sum())
    pg1, pg2 = -a * s, -a * np.clip(s, 1 - EPS["eps_low"], 1 + EPS["eps_high"])
    clipped, n = pg2 > pg1, m.sum()
    grad = np.where(m & ~clipped, -a * s / n, 0.0)  # d r_it / d logp_it = s_i; the clipped branch is flat
    return np.maximum(pg1, pg2)[m].sum() / n, s[m].mean(), clipped[m].mean(), grad


@pytest.mark.parametrize("packed", [False, True])
def test_sequence_ratio(packed):
    d = inputs(1, scale=0.4)
    seg = None
    seq = np.repeat(np.arange(B)[:, None], L, axis=1)  # a sequence per row
    if packed:  # row 0: two sequences and a padding run; row 1: two; row 2: one
        seg = np.array([[1, 1, 1, 2, 2, 0], [3, 3, 4, 4, 4, 4], [5, 5, 5, 5, 5, 5]])
        d["mask"] &= seg > 0
        d["mask"][0, 3] = d["mask"][1, 2] = True  # a policy token in every sequence
        seq = seg
    loss, metrics, grad = value_and_grad(d, ratio_level="sequence",
                                         segment_ids=None if seg is None else jnp.asarray(seg))
    want, ratio_mean, clip_frac, want_grad = np_gspo(d, seq)
    assert 0 < clip_frac < 1  # both branches are exercised
    np.testing.assert_allclose(loss, want, rtol=1e-5)
    np.testing.assert_allclose(metrics["ratio_mean"], ratio_mean, rtol=1e-5)
    np.testing.assert_allclose(metrics["clip_frac"], clip_frac, rtol=1e-6)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-7)
    token_loss, *_ = value_and_grad(d, segment_ids=None if seg is None else jnp.asarray(seg))
    assert token_loss != loss


# ------------------------------------------------------------------------------------- defaults

def test_defaults_are_bit_identical():
    d = inputs(3)
    j = {k: jnp.asarray(v) for k, v in d.items()}
    kw = dict(EPS, kl_coef=0.1, ref_logprobs=j["ref"], aggregation="seq-mean-token-mean")
    defaults = dict(kl_estimator="k3", ratio_level="token")

    def run(**extra):
        fn = lambda lp: grpo_loss(lp, j["old"], j["adv"], j["mask"], **kw, **extra)  # noqa: E731
        g = jax.value_and_grad(fn, has_aux=True)
        return str(jax.make_jaxpr(g)(j["logp"])), g(j["logp"])

    (jaxpr0, out0), (jaxpr1, out1) = run(), run(**defaults)
    assert jaxpr0 == jaxpr1
    for a, b in zip(jax.tree.leaves(out0), jax.tree.leaves(out1)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_config_defaults_reach_the_loss():
    c = default_config().loss
    assert (c.kl_estimator, c.ratio_level) == ("k3", "token")
    kw = _loss_kwargs(c)
    assert (kw["kl_estimator"], kw["ratio_level"]) == ("k3", "token")
    for field, value in (("kl_estimator", "k5"), ("ratio_level", "group")):
        bad = default_config().loss
        bad[field] = value
        with pytest.raises(ValueError, match=f"loss.{field}"):
            _loss_kwargs(bad)
