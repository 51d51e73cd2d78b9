"""PPO epochs in the train step: E passes over N mini-batches, one optimizer update each, in one call."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prover_jax.training.optim import make_optimizer
from prover_jax.training.step import grpo_objective, init_train_state, make_train_step

from test_step import host, loss_cfg, micro, new_model, optim_cfg, rollout_batch, with_old_logprobs
from test_step import sgd_runs  # noqa: F401 (the fixture `setup` builds on)


@pytest.fixture(scope="module")
def setup(sgd_runs):
    """test_step's SGD (lr 1) model and start, with an on-policy batch: the ratio is 1 at first."""
    batch = with_old_logprobs(rollout_batch(8, seed=3), sgd_runs["logprob_fn"], sgd_runs["init"].params)
    return dict(graphdef=sgd_runs["graphdef"], sgd=sgd_runs["opt"], init=sgd_runs["init"], batch=batch)


def run(setup, batch, m, **kw):
    step = make_train_step(setup["graphdef"], grpo_objective(loss_cfg()), setup["sgd"], **kw)
    return host(step(jax.tree.map(jnp.asarray, setup["init"]), micro(batch, m)))


def assert_params_close(a, b):
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params)):
        np.testing.assert_allclose(x, y, rtol=2e-5, atol=2e-6)


def test_mini_batches_equal_sequential_updates(setup):
    """N = 2 mini-batches in one call == one update on the first half, then one on the second."""
    b = setup["batch"]
    s_ppo, m_ppo = run(setup, b, 2, mini_batches=2)
    step = make_train_step(setup["graphdef"], grpo_objective(loss_cfg()), setup["sgd"])
    first = {k: v[:4] for k, v in b.items()}
    second = {k: v[4:] for k, v in b.items()}
    s1, m1 = step(jax.tree.map(jnp.asarray, setup["init"]), micro(first, 1))
    s2, m2 = host(step(s1, micro(second, 1)))
    assert_params_close(s_ppo, s2)
    assert int(s_ppo.step) == 1 and int(s2.step) == 2  # one RL step made of two updates
    assert int(m_ppo["updates"]) == 2 and int(m_ppo["skipped"]) == 0
    assert int(m_ppo["num_tokens"]) == int(b["loss_mask"].sum())
    np.testing.assert_allclose(m_ppo["loss"], (float(m1["loss"]) + float(m2["loss"])) / 2, rtol=1e-5)
    assert float(m2["ratio_mean"]) != 1.0  # the second half was scored by the moved policy


def test_second_epoch_moves_the_ratio_and_the_clip_engages(setup):
    b = setup["batch"]
    _, one = run(setup, b, 1)
    assert float(one["clip_frac"]) == 0.0 and float(one["ratio_mean"]) == pytest.approx(1.0, abs=1e-6)
    s_two, two = run(setup, b, 1, epochs=2)
    # mean of the two updates: the first has ratio 1 and no clip, so the second's clip_frac > 0
    assert float(two["clip_frac"]) > 0.0 and abs(float(two["ratio_mean"]) - 1.0) > 1e-3
    assert int(two["updates"]) == 2
    # == the one-update step applied twice to the same batch (behaviour log-probs unchanged)
    step = make_train_step(setup["graphdef"], grpo_objective(loss_cfg()), setup["sgd"])
    s, _ = step(jax.tree.map(jnp.asarray, setup["init"]), micro(b, 1))
    s, m = host(step(s, micro(b, 1)))
    assert_params_close(s_two, s)
    assert float(m["clip_frac"]) == pytest.approx(2 * float(two["clip_frac"]), rel=1e-5)


def test_padded_mini_batch_is_no_update(setup):
    """M = 1 micro-batch cut into N = 2: the second mini-batch is padding, not an update (SGD on a
    zero gradient would not move, Adam's momentum would): the result equals one plain update."""
    b = setup["batch"]
    adam = make_optimizer(optim_cfg(name="adam", learning_rate=1e-2, grad_clip=1.0))
    init = jax.tree.map(jnp.asarray, host(init_train_state(new_model(), adam)))
    plain = make_train_step(setup["graphdef"], grpo_objective(loss_cfg()), adam)
    split = make_train_step(setup["graphdef"], grpo_objective(loss_cfg()), adam, mini_batches=2)
    s_plain, _ = host(plain(jax.tree.map(jnp.copy, init), micro(b, 1)))
    s_split, m = host(split(init, micro(b, 1)))
    assert_params_close(s_split, s_plain)
    assert int(m["updates"]) == 1 and int(m["skipped"]) == 0 and int(s_split.opt_state.count) == 1
    with pytest.raises(ValueError, match="train.ppo_epochs"):
        make_train_step(setup["graphdef"], grpo_objective(loss_cfg()), adam, epochs=0)
