"""GRPO loss against a NumPy reference; masking; segment-bonus gradients; chunked log-probs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from prover_jax.aot.flops import equations
from prover_jax.models import qwen3_5
from prover_jax.training.loss import AGGREGATIONS, aggregate, grpo_loss, token_logprobs

from helpers.tiny import tiny_config, tiny_model

# one full-attention layer (log-prob chunking does not depend on the layers; it compiles fast);
# vocab 80 is a width no other activation has, so logits are recognisable by shape
CFG = tiny_config((qwen3_5.FULL,), vocab_size=80)
B, L = 5, 12
EPS = dict(eps_low=0.2, eps_high=0.28)


def make_inputs(seed, log_ratio_scale):
    rng = np.random.default_rng(seed)
    mask = rng.random((B, L)) < 0.6
    mask[:, 0] = False
    mask[3] = False  # a sequence without policy tokens
    old = -rng.random((B, L)) * 3
    logp = old + rng.normal(0, log_ratio_scale, (B, L))
    adv = rng.normal(0, 1, (B, L))
    ref = old + rng.normal(0, 0.5, (B, L))
    ent = rng.random((B, L)) * 2
    return dict(logp=logp, old=old, adv=adv, mask=mask, ref=ref, ent=ent)


def np_agg(x, m, mode):
    m = m.astype(np.float64)
    n_i = m.sum(1)
    seqs = n_i > 0
    if mode == "token-mean":
        return (x * m).sum() / m.sum()
    if mode == "seq-mean-token-mean":
        return np.mean([(x[i] * m[i]).sum() / n_i[i] for i in np.flatnonzero(seqs)])
    return (x * m).sum() / (seqs.sum() * x.shape[1])


def np_loss(d, *, eps_low, eps_high, dual_clip=0.0, aggregation="token-mean", kl_coef=0.0,
            entropy_coef=0.0):
    r = np.exp(d["logp"] - d["old"])
    a = d["adv"]
    pg1, pg2 = -a * r, -a * np.clip(r, 1 - eps_low, 1 + eps_high)
    pg = np.maximum(pg1, pg2)
    if dual_clip > 1:
        pg = np.where(a < 0, np.minimum(pg, -a * dual_clip), pg)
    dk = np.clip(d["ref"] - d["logp"], -20, 20)
    kl = np.minimum(np.exp(dk) - dk - 1, 10.0)  # k3, clamped to 10 (spec, verl)
    loss = (np_agg(pg, d["mask"], aggregation) + kl_coef * np_agg(kl, d["mask"], aggregation)
            - entropy_coef * np_agg(d["ent"], d["mask"], aggregation))
    m = d["mask"]
    return loss, dict(clip_frac=(pg2 > pg1)[m].mean(), ratio_mean=r[m].mean(),
                      approx_kl=(0.5 * (d["logp"] - d["old"]) ** 2)[m].mean())


def jx_loss(d, **kw):
    f = {k: jnp.asarray(v, jnp.float32) for k, v in d.items() if k != "mask"}
    return grpo_loss(f["logp"], f["old"], f["adv"], jnp.asarray(d["mask"]), ref_logprobs=f["ref"],
                     entropy=f["ent"], **kw)


def check(d, **kw):
    loss, metrics = jx_loss(d, **kw)
    want, want_m = np_loss(d, **kw)
    np.testing.assert_allclose(float(loss), want, rtol=1e-5, atol=1e-6)
    for k, v in want_m.items():
        np.testing.assert_allclose(float(metrics[k]), v, rtol=1e-5, atol=1e-6, err_msg=k)
    assert int(metrics["num_tokens"]) == d["mask"].sum()
    return metrics


def test_no_clip_active():
    d = make_inputs(0, 0.02)
    metrics = check(d, **EPS)
    assert float(metrics["clip_frac"]) == 0.0


def test_clip_active_both_sides():
    d = make_inputs(1, 0.6)
    r, a, m = np.exp(d["logp"] - d["old"]), d["adv"], d["mask"]
    assert (m & (a > 0) & (r > 1.28)).any() and (m & (a < 0) & (r < 0.8)).any()
    metrics = check(d, **EPS)
    assert 0 < float(metrics["clip_frac"]) < 1


def test_dual_clip():
    d = make_inputs(2, 1.5)
    assert (d["mask"] & (d["adv"] < 0) & (np.exp(d["logp"] - d["old"]) > 3)).any()
    metrics = check(d, **EPS, dual_clip=3.0)
    assert float(metrics["dual_clip_frac"]) > 0
    loss_off, _ = jx_loss(d, **EPS)
    assert float(jx_loss(d, **EPS, dual_clip=3.0)[0]) < float(loss_off)


def test_truncated_importance_weights():
    """pg weighted by min(pi_old / pi_behaviour, cap); without behaviour log-probs or cap, unchanged."""
    d = make_inputs(3, 0.3)
    behav = d["old"] + np.random.default_rng(3).normal(0, 0.5, d["old"].shape).astype(np.float32)
    f = {k: jnp.asarray(v, jnp.float32) for k, v in d.items() if k != "mask"}
    m = jnp.asarray(d["mask"])
    plain, pm = grpo_loss(f["logp"], f["old"], f["adv"], m, **EPS)
    assert float(pm["tis_weight_mean"]) == 1.0
    same, _ = grpo_loss(f["logp"], f["old"], f["adv"], m, behavior_logprobs=jnp.asarray(behav), **EPS)
    assert float(same) == float(plain)  # tis_cap = 0: off
    got, gm = grpo_loss(f["logp"], f["old"], f["adv"], m, behavior_logprobs=jnp.asarray(behav), tis_cap=1.5, **EPS)
    w = np.minimum(np.exp(d["old"] - behav), 1.5)
    r = np.exp(d["logp"] - d["old"])
    a = d["adv"]
    pg = np.maximum(-a * r, -a * np.clip(r, 1 - EPS["eps_low"], 1 + EPS["eps_high"]))
    mask = d["mask"]
    np.testing.assert_allclose(float(got), (pg * w)[mask].sum() / mask.sum(), rtol=1e-5)
    np.testing.assert_allclose(float(gm["tis_weight_mean"]), w[mask].mean(), rtol=1e-5)
    assert w[mask].max() == 1.5 and w[mask].min() < 1.0


def test_kl_and_entropy_terms():
    d = make_inputs(3, 0.3)
    d["ref"][1, 5] = d["logp"][1, 5] + 30.0  # k3 far beyond its clamp of 10
    d["mask"][1, 5] = True
    base = check(d, **EPS)
    with_kl = check(d, **EPS, kl_coef=0.1)
    check(d, **EPS, entropy_coef=0.01)
    assert float(with_kl["kl"]) > 0 and np.isfinite(float(with_kl["kl"]))
    assert float(base["entropy"]) > 0
    with pytest.raises(ValueError, match="ref_logprobs"):
        grpo_loss(*(jnp.zeros((B, L)),) * 3, jnp.ones((B, L), bool), **EPS, kl_coef=0.1)


@pytest.mark.parametrize("aggregation", AGGREGATIONS.names())
def test_aggregations(aggregation):
    d = make_inputs(4, 0.5)
    check(d, **EPS, dual_clip=3.0, aggregation=aggregation, kl_coef=0.05, entropy_coef=0.01)


@pytest.mark.parametrize("aggregation", AGGREGATIONS.names())
def test_partial_sums_with_global_normalisers_add_up(aggregation):
    d = make_inputs(5, 0.5)
    kw = dict(**EPS, aggregation=aggregation, kl_coef=0.05, entropy_coef=0.01)
    whole, whole_m = jx_loss(d, **kw)
    m = d["mask"]
    glob = dict(num_tokens=m.sum(), num_seqs=m.any(1).sum())
    parts = [jx_loss({k: v[rows] for k, v in d.items()}, **kw, **glob) for rows in ([0, 1], [2, 3, 4])]
    np.testing.assert_allclose(sum(float(p[0]) for p in parts), float(whole), rtol=1e-5, atol=1e-7)
    for k in ("pg_loss", "kl", "entropy", "clip_frac", "approx_kl", "num_tokens"):
        np.testing.assert_allclose(sum(float(p[1][k]) for p in parts), float(whole_m[k]), rtol=1e-5,
                                   atol=1e-7, err_msg=k)


def test_masked_positions_change_nothing():
    d = make_inputs(6, 0.5)
    kw = dict(**EPS, dual_clip=3.0, kl_coef=0.05, entropy_coef=0.01)

    def loss_and_grad(d):
        f = {k: jnp.asarray(v, jnp.float32) for k, v in d.items() if k != "mask"}
        fn = lambda lp: grpo_loss(lp, f["old"], f["adv"], jnp.asarray(d["mask"]),  # noqa: E731
                                  ref_logprobs=f["ref"], entropy=f["ent"], **kw)[0]
        return jax.value_and_grad(fn)(f["logp"])

    loss, grad = loss_and_grad(d)
    e = {k: v.copy() for k, v in d.items()}
    off = ~d["mask"]
    rng = np.random.default_rng(7)
    for k in ("logp", "old", "adv", "ref", "ent"):
        e[k][off] = rng.normal(0, 50, off.sum())
    e["adv"][off & (rng.random((B, L)) < 0.5)] = np.nan
    e["logp"][off & (rng.random((B, L)) < 0.3)] = -np.inf
    loss2, grad2 = loss_and_grad(e)
    assert float(loss2) == float(loss)
    np.testing.assert_array_equal(np.asarray(grad2), np.asarray(grad))
    assert np.all(np.asarray(grad)[off] == 0)


def test_segment_bonus_changes_gradient_only_on_its_tokens():
    d = make_inputs(8, 0.0)  # logp == old: ratio 1
    m = d["mask"]
    d["adv"] = np.where(m, 0.5 + np.abs(d["adv"]), 0.0)
    seg = np.zeros_like(m)
    seg[0, 4:8] = True
    seg &= m
    assert seg.sum() >= 2
    bonus = d["adv"] + 0.7 * seg
    n = m.sum()

    def grad(adv):
        fn = lambda lp: grpo_loss(lp, jnp.asarray(d["old"], jnp.float32),  # noqa: E731
                                  jnp.asarray(adv, jnp.float32), jnp.asarray(m), **EPS)[0]
        return np.asarray(jax.grad(fn)(jnp.asarray(d["logp"], jnp.float32)))

    g0, g1 = grad(d["adv"]), grad(bonus)
    np.testing.assert_array_equal(g0 != 0, m)
    np.testing.assert_allclose(g0, np.where(m, -d["adv"] / n, 0), rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(g1 - g0 != 0, seg)
    np.testing.assert_allclose(g1 - g0, np.where(seg, -0.7 / n, 0), rtol=1e-5, atol=1e-9)


def test_aggregate_rejects_unknown_mode():
    with pytest.raises(ValueError, match="aggregation"):
        aggregate(jnp.zeros((2, 3)), jnp.ones((2, 3), bool), "seq-sum")


@pytest.fixture(scope="module")
def model():
    m = tiny_model(CFG, logit_scale=10.0)  # a peakier distribution than at init
    return m


def test_token_logprobs_chunked_equals_full_forward(model):
    tokens = jax.random.randint(jax.random.PRNGKey(1), (3, 10), 0, CFG.vocab_size)
    valid = jnp.arange(10)[None, :] < jnp.array([[10], [7], [4]])
    graphdef, params = nnx.split(model)

    @jax.jit
    def run(params):
        mdl = nnx.merge(graphdef, params)
        full = token_logprobs(mdl, tokens, valid)
        chunked = token_logprobs(mdl, tokens, valid, chunk=4)  # 9 predicting positions: padded
        logits = mdl(tokens, mask_BxT=valid)
        return full, chunked, logits

    (lp, ent), (lp_c, ent_c), logits = run(params)
    logp_all = jax.nn.log_softmax(logits[:, :-1], axis=-1)
    want = jnp.take_along_axis(logp_all, tokens[:, 1:, None], axis=-1)[..., 0]
    want = np.concatenate([np.zeros((3, 1)), np.where(valid[:, 1:], want, 0)], axis=1)
    want_ent = -(jnp.exp(logp_all) * logp_all).sum(-1)
    want_ent = np.concatenate([np.zeros((3, 1)), np.where(valid[:, 1:], want_ent, 0)], axis=1)
    np.testing.assert_allclose(lp, want, atol=1e-6)
    np.testing.assert_allclose(ent, want_ent, atol=1e-6)
    np.testing.assert_allclose(lp_c, lp, atol=1e-6)
    np.testing.assert_allclose(ent_c, ent, atol=1e-6)
    assert np.all(np.asarray(lp)[~np.asarray(valid)] == 0) and np.all(np.asarray(lp)[:, 0] == 0)

    w = jax.random.normal(jax.random.PRNGKey(2), (3, 10))

    @jax.jit
    def grads(params):
        def f(p, chunk):
            out = token_logprobs(nnx.merge(graphdef, p), tokens, valid, chunk=chunk)
            return jnp.sum(w * out[0]) + jnp.sum(out[1])
        return jax.grad(f)(params, None), jax.grad(lambda p: f(p, 4))(params)

    g_full, g_chunk = grads(params)
    for a, b in zip(jax.tree.leaves(g_full), jax.tree.leaves(g_chunk)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)


def test_chunked_logprobs_never_hold_full_logits(model):
    tokens = jnp.zeros((2, 13), jnp.int32)
    valid = jnp.ones((2, 13), bool)
    graphdef, params = nnx.split(model)

    def loss(p, chunk):
        return token_logprobs(nnx.merge(graphdef, p), tokens, valid, chunk=chunk)[0].sum()

    def logit_shapes(chunk):
        jaxpr = jax.make_jaxpr(jax.grad(lambda p: loss(p, chunk)))(params)
        return {tuple(v.aval.shape) for eqn in equations(jaxpr) for v in eqn.outvars
                if len(v.aval.shape) == 3 and v.aval.shape[-1] == CFG.vocab_size}

    assert (2, 12, CFG.vocab_size) in logit_shapes(None)
    assert logit_shapes(4) == {(2, 4, CFG.vocab_size)}


def test_entropy_only_when_asked(model):
    """with_entropy=False: the same log-probs, zero entropy, and no exp over the vocabulary."""
    tokens = jnp.asarray(np.random.RandomState(0).randint(0, CFG.vocab_size, (2, 13)), jnp.int32)
    valid = jnp.ones((2, 13), bool)
    logp, ent = token_logprobs(model, tokens, valid, chunk=4)
    logp2, ent2 = token_logprobs(model, tokens, valid, chunk=4, with_entropy=False)
    np.testing.assert_allclose(logp2, logp, rtol=1e-6, atol=1e-6)
    assert float(jnp.abs(ent).sum()) > 0 and float(jnp.abs(ent2).sum()) == 0

    def vocab_exps(with_entropy):
        jaxpr = jax.make_jaxpr(lambda t: token_logprobs(model, t, valid, with_entropy=with_entropy))(tokens)
        return sum(1 for e in equations(jaxpr) if e.primitive.name == "exp"
                   and e.outvars[0].aval.shape[-1:] == (CFG.vocab_size,))

    assert vocab_exps(False) < vocab_exps(True)
