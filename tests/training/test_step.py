"""Train step: exact micro-batch accumulation, learning, skipped non-finite steps, sharded == single."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from prover_jax import sharding
from prover_jax.models import qwen3_5
from prover_jax.training.config import default_config
from prover_jax.training.optim import make_optimizer
from prover_jax.training.logprobs import make_logprob_fn
from prover_jax.training.step import grpo_objective, init_train_state, make_train_step

from helpers.tiny import tiny_config, tiny_model

CFG = tiny_config()
L = 12


def optim_cfg(**kw):
    c = default_config().optim
    c.update(kw)
    return c


def loss_cfg(**kw):
    c = default_config().loss
    c.update(kw)
    return c


def new_model(mesh=None):
    m = tiny_model(CFG)
    return m if mesh is None else qwen3_5.shard_model(m, mesh)


def host(tree):
    return jax.tree.map(np.asarray, tree)


def rollout_batch(n, seed=0):
    """n right-padded sequences: a prompt, then policy tokens, then padding."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, CFG.vocab_size, (n, L)).astype(np.int32)
    lengths = rng.integers(6, L + 1, n)
    valid = np.arange(L)[None] < lengths[:, None]
    prompt = rng.integers(2, 5, n)
    loss_mask = valid & (np.arange(L)[None] >= prompt[:, None])
    return dict(tokens=tokens, valid=valid, loss_mask=loss_mask,
                advantages=(rng.normal(0, 1, (n, L)) * loss_mask).astype(np.float32))


def with_old_logprobs(batch, logprob_fn, params, jitter=0.0, seed=0):
    old = np.asarray(logprob_fn(params, batch["tokens"], batch["valid"]))
    old = old + np.random.default_rng(seed).normal(0, jitter, old.shape) * batch["loss_mask"]
    return dict(batch, old_logprobs=old.astype(np.float32))


def micro(batch, m):
    return {k: v.reshape(m, v.shape[0] // m, *v.shape[1:]) for k, v in batch.items()}


@pytest.fixture(scope="module")
def sgd_runs():
    """One SGD(lr=1) step on an 8-sequence batch, as M=1 x 8 and M=2 x 4 (single device)."""
    model = new_model()
    graphdef = nnx.graphdef(model)
    opt = make_optimizer(optim_cfg(name="sgd", learning_rate=1.0, grad_clip=0.0))
    init = host(init_train_state(model, opt))
    logprob_fn = make_logprob_fn(graphdef)
    batch = with_old_logprobs(rollout_batch(8), logprob_fn, init.params, jitter=0.3)
    step = make_train_step(graphdef, grpo_objective(loss_cfg()), opt)
    out = {m: host(step(jax.tree.map(jnp.asarray, init), micro(batch, m))) for m in (1, 2)}
    return dict(graphdef=graphdef, opt=opt, init=init, batch=batch, out=out, step=step,
                logprob_fn=logprob_fn)


def test_micro_batch_accumulation_equals_whole_batch(sgd_runs):
    (s1, m1), (s2, m2) = sgd_runs["out"][1], sgd_runs["out"][2]
    assert int(s1.step) == int(s2.step) == 1 and int(m1["skipped"]) == 0
    np.testing.assert_allclose(m2["loss"], m1["loss"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(m2["grad_norm"], m1["grad_norm"], rtol=1e-5)
    assert float(m1["clip_frac"]) > 0 and int(m1["num_tokens"]) == sgd_runs["batch"]["loss_mask"].sum()
    moved = 0.0
    for a, b, p0 in zip(jax.tree.leaves(s1.params), jax.tree.leaves(s2.params),
                        jax.tree.leaves(sgd_runs["init"].params)):
        np.testing.assert_allclose(b, a, atol=1e-5, rtol=1e-5)
        moved = max(moved, float(np.abs(a - p0).max()))
    assert moved > 1e-3


def test_learning_increases_logprob_of_rewarded_sequence(sgd_runs):
    # the fixture's compiled step and shapes (SGD, lr 1); Adam and warmup are tested below
    state = jax.tree.map(jnp.asarray, sgd_runs["init"])
    batch = rollout_batch(8, seed=1)
    batch["advantages"] = np.where(batch["loss_mask"], 1.0, 0.0).astype(np.float32)
    seq_logp = []
    for _ in range(4):
        b = with_old_logprobs(batch, sgd_runs["logprob_fn"], state.params)  # on-policy
        seq_logp.append(float((b["old_logprobs"] * batch["loss_mask"]).sum()))
        state, metrics = sgd_runs["step"](state, micro(b, 2))
        assert int(metrics["skipped"]) == 0
        np.testing.assert_allclose(metrics["ratio_mean"], 1.0, atol=1e-5)
        assert float(metrics["clip_frac"]) == 0
    assert int(state.step) == 4
    print("policy-token log-prob per step:", np.round(seq_logp, 2))
    assert seq_logp[-1] > seq_logp[0] + 1.0 and all(np.diff(seq_logp) > 0), seq_logp


def test_non_finite_advantages_skip_the_update(sgd_runs):
    step = sgd_runs["step"]
    bad = dict(sgd_runs["batch"], advantages=sgd_runs["batch"]["advantages"].copy())
    i, t = np.argwhere(bad["loss_mask"])[3]
    bad["advantages"][i, t] = np.nan
    init = sgd_runs["init"]
    state, metrics = step(jax.tree.map(jnp.asarray, init), micro(bad, 2))
    assert int(metrics["skipped"]) == 1 and not np.isfinite(float(metrics["loss"]))
    assert int(state.step) == int(init.step) == 0
    for a, b in zip(jax.tree.leaves(host(state)), jax.tree.leaves(init)):
        np.testing.assert_array_equal(a, b)
    # the same state still trains on a clean batch afterwards
    state, metrics = step(state, micro(sgd_runs["batch"], 2))
    assert int(metrics["skipped"]) == 0 and int(state.step) == 1


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")
def test_sharded_step_equals_single_device(sgd_runs):
    mesh = sharding.make_mesh((2, 2, 2))
    model = new_model(mesh)
    want_sh = {p: s.spec for p, s in qwen3_5.param_shardings(model, mesh).items()}
    state = init_train_state(model, sgd_runs["opt"])
    step = make_train_step(nnx.graphdef(model), grpo_objective(loss_cfg()), sgd_runs["opt"], mesh=mesh)
    state, metrics = step(state, micro(sgd_runs["batch"], 1))
    s_single, m_single = sgd_runs["out"][1]
    np.testing.assert_allclose(metrics["loss"], m_single["loss"], rtol=1e-5, atol=1e-7)
    assert int(state.step) == 1
    got = {".".join(map(str, k)): v for k, v in nnx.to_flat_state(state.params)}
    want = {".".join(map(str, k)): v for k, v in nnx.to_flat_state(s_single.params)}
    assert got.keys() == want.keys() == want_sh.keys()
    for name, var in got.items():
        value = var.get_value() if hasattr(var, "get_value") else var
        assert value.sharding.spec == want_sh[name], name
        w = want[name].get_value() if hasattr(want[name], "get_value") else want[name]
        np.testing.assert_allclose(np.asarray(value), w, atol=1e-5, rtol=1e-5, err_msg=name)
    assert want_sh["embed_tokens"] != jax.sharding.PartitionSpec(None, None)


def test_optimizer_warmup_and_decay_mask():
    opt = make_optimizer(optim_cfg(learning_rate=0.1, warmup_steps=4, weight_decay=0.5, grad_clip=1.0))
    params = {"w": jnp.ones((2, 2)), "norm": jnp.ones((2,))}
    state = opt.init(params)
    rates = []
    for _ in range(5):
        updates, state = opt.update(jax.tree.map(jnp.zeros_like, params), state, params)
        rates.append(float(state.hyperparams["learning_rate"]))
    np.testing.assert_allclose(rates, [0.025, 0.05, 0.075, 0.1, 0.1], rtol=1e-6)
    assert float(jnp.abs(updates["w"]).max()) > 0 and float(jnp.abs(updates["norm"]).max()) == 0
    with pytest.raises(ValueError, match="optimizer"):
        make_optimizer(optim_cfg(name="lion"))


def test_optimizer_decay_applies_its_rate_and_keeps_the_state_structure():
    """Cosine decay after a warmup: each update applies the schedule's rate; the optimizer state has
    the same structure under every schedule (a constant-rate checkpoint restores under a decaying one)."""
    params = {"w": jnp.ones((2, 2))}
    cfg = optim_cfg(name="sgd", learning_rate=1.0, warmup_steps=2, decay_steps=4, end_lr_frac=0.5, grad_clip=0.0)
    opt = make_optimizer(cfg)
    state = opt.init(params)
    assert jax.tree.structure(state) == jax.tree.structure(make_optimizer(optim_cfg(name="sgd", grad_clip=0.0)).init(params))
    moves = []
    for _ in range(7):
        updates, state = opt.update({"w": jnp.ones((2, 2))}, state, params)  # sgd: update = -rate * grad
        moves.append(-float(updates["w"][0, 0]))
    cos = [0.5 + 0.5 * (1 + np.cos(np.pi * s / 4)) / 2 for s in range(5)]
    np.testing.assert_allclose(moves, [0.5, 1.0] + cos, rtol=1e-6)
    assert float(state.hyperparams["learning_rate"]) == pytest.approx(0.5)


def test_precompiled_lengths_run_without_compiling(sgd_runs):
    """train_step.precompile compiles each length bucket ahead; steps of those shapes then run the
    executable (the jit cache stays empty) and give the jitted step's result."""
    from prover_jax.distributed import globalize
    from prover_jax.training.step import abstract_batch
    mesh = sharding.make_mesh((1, 2, 1), devices=jax.devices()[:2])
    model = new_model(mesh)
    state = globalize(init_train_state(model, sgd_runs["opt"]), mesh)  # as the trainer holds it
    step = make_train_step(nnx.graphdef(model), grpo_objective(loss_cfg()), sgd_runs["opt"], mesh=mesh)
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)
    assert step.precompile(abstract, [abstract_batch(mesh, 2, 4, n) for n in (L, 2 * L)]) == 2
    assert step.precompile(abstract, [abstract_batch(mesh, 2, 4, L)]) == 0  # already there
    state, metrics = step(state, micro(sgd_runs["batch"], 2))
    assert step.jitted(state, micro(sgd_runs["batch"], 2))._cache_size() == 0
    np.testing.assert_allclose(metrics["loss"], sgd_runs["out"][2][1]["loss"], rtol=1e-5, atol=1e-7)
    longer = {k: np.concatenate([v, np.zeros_like(v)], axis=1) for k, v in sgd_runs["batch"].items()}
    state, _ = step(state, micro(longer, 2))
    assert step.jitted(state, micro(longer, 2))._cache_size() == 0 and int(state.step) == 2


def test_step_layout_is_fixed_before_the_first_call(sgd_runs):
    """The jitted step's in_shardings are explicit: the state's own layout, every batch array's
    micro-batch sequences over the data axes (`batch_sharding`), whatever layout the caller's arrays
    had; the compiled program takes exactly those, and its output state keeps the state's layout."""
    from prover_jax.distributed import globalize
    from prover_jax.distributed.arrays import batch_sharding
    mesh = sharding.make_mesh((1, 2, 1), devices=jax.devices()[:2])
    model = new_model(mesh)
    state = globalize(init_train_state(model, sgd_runs["opt"]), mesh)
    step = make_train_step(nnx.graphdef(model), grpo_objective(loss_cfg()), sgd_runs["opt"], mesh=mesh)
    batch = micro(sgd_runs["batch"], 2)
    compiled = step.jitted(state, batch).lower(state, batch).compile()
    state_in, batch_in = compiled.input_shardings[0]
    for k, v in batch.items():
        assert batch_in[k].is_equivalent_to(batch_sharding(mesh, v.shape), v.ndim), k
    assert any(not s.is_fully_replicated for s in jax.tree.leaves(state_in.params))  # fsdp-sharded weights
    for want, got in zip(jax.tree.leaves(state), jax.tree.leaves(state_in)):
        assert got.is_equivalent_to(want.sharding, want.ndim)
    replicated = jax.device_put(batch, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
    new, _ = step(state, replicated)  # laid out again to the step's shardings, not recompiled for them
    for want, got in zip(jax.tree.leaves(state_in), jax.tree.leaves(new)):
        assert got.sharding.is_equivalent_to(want, got.ndim)


def test_a_batch_without_signal_moves_nothing():
    """Every advantage 0 (all groups uniform): the gradient is exactly 0 and, with skip_zero_grad (the
    default), weights and Adam's state stay as they were while the step counts; without it Adam's
    moments from the update before keep moving the weights."""
    model = new_model()
    graphdef = nnx.graphdef(model)
    opt = make_optimizer(optim_cfg(name="adam", learning_rate=1e-2))
    logprob_fn = make_logprob_fn(graphdef)
    init = jax.tree.map(jnp.asarray, host(init_train_state(model, opt)))
    signal = with_old_logprobs(rollout_batch(8), logprob_fn, init.params)
    silent = dict(signal, advantages=np.zeros_like(signal["advantages"]))
    moved = {}
    for skip in (True, False):
        step = make_train_step(graphdef, grpo_objective(loss_cfg()), opt, skip_zero_grad=skip)
        state, m = step(jax.tree.map(jnp.copy, init), micro(signal, 1))
        assert float(m["no_signal"]) == 0
        before = host(state)
        state, m = step(state, micro(silent, 1))
        after = host(state)
        assert float(m["grad_norm"]) == 0 and float(m["no_signal"]) == 1 and int(after.step) == 2
        moved[skip] = max(float(np.abs(a - b).max()) for a, b in zip(jax.tree.leaves(after.params),
                                                                       jax.tree.leaves(before.params)))
        if skip:
            for a, b in zip(jax.tree.leaves(after.opt_state), jax.tree.leaves(before.opt_state)):
                np.testing.assert_array_equal(a, b)
    assert moved[True] == 0.0 and moved[False] > 1e-4
