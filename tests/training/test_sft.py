"""SFT warm start pieces: the learning-rate schedule, and the step's loss is the masked mean NLL of the
demonstration's policy tokens and goes down on a fixed batch."""

import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx

from prover_jax.training.loss import token_logprobs
from prover_jax.training.sft import loss_positions, make_sft_step, sft_schedule

from helpers.tiny import tiny_model


def test_schedule_warms_up_then_decays_to_the_floor():
    c = ml_collections.ConfigDict(dict(steps=100, warmup_steps=10, learning_rate=1e-3, final_lr_frac=0.1))
    f = sft_schedule(c)
    assert float(f(0)) == 0.0 and np.isclose(float(f(10)), 1e-3)
    lrs = [float(f(i)) for i in range(10, 101)]
    assert all(a >= b - 1e-12 for a, b in zip(lrs, lrs[1:])) and np.isclose(lrs[-1], 1e-4)
    c.steps, c.warmup_steps = 1, 10  # a one-step run still trains at the peak rate
    assert np.isclose(float(sft_schedule(c)(0)), 1e-3)


def test_step_loss_is_masked_nll_and_decreases():
    model = tiny_model()
    graphdef, params = nnx.split(model)
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.integers(3, 64, (4, 24)), jnp.int32)
    valid = jnp.asarray(np.arange(24)[None, :] < np.array([24, 20, 16, 24])[:, None])
    mask = valid & jnp.asarray(rng.random((4, 24)) < 0.5) & (jnp.arange(24) > 0)[None, :]
    logp, _ = token_logprobs(model, tokens, valid)
    want = -float(jnp.sum(jnp.where(mask, logp, 0.0)) / jnp.sum(mask))
    opt = optax.adam(1e-2)
    step = make_sft_step(graphdef, opt)
    state = opt.init(params)
    at, at_valid = loss_positions(np.asarray(mask), multiple=8)
    assert at.shape == (4, 16) and at_valid.sum() == int(mask.sum())
    assert np.array_equal(np.asarray(tokens)[np.arange(4)[:, None], at][at_valid],
                          np.asarray(tokens)[np.asarray(mask)])
    losses = []
    for _ in range(15):
        params, state, loss = step(params, state, tokens, valid, at, at_valid)
        losses.append(float(loss))
    assert np.isclose(losses[0], want, rtol=1e-5)
    assert losses[-1] < 0.5 * losses[0]


def test_demonstrations_keep_successes_and_mask_the_slips(household_tokenizer):
    """Demonstrations played by the household demonstrator with slips (demo_noise): only successful
    episodes are kept, and the responses of invalid turns leave the policy mask while every valid
    response stays in it."""
    from prover_jax.envs.pool import EnvPool
    from prover_jax.rollout import Rollout, RolloutConfig
    from prover_jax.training.sft import demonstrations

    kw = dict(task_type="pick_and_place", max_turns=8, expert_turns=(3, 5), num_receptacles=4, num_objects=3,
              demo_noise=0.4, demo_confusion=0.5)
    pool = EnvPool("household", 8, kw)
    try:
        expert = Rollout(None, household_tokenizer, RolloutConfig())
        demos = demonstrations(expert, pool, list(range(16)), max_length=4096)
    finally:
        pool.close()
    assert 0 < len(demos) < 16 and all(t.success for t in demos)
    slips = 0
    for t in demos:
        for turn in t.turns:
            assert any(t.policy_mask[turn.start:turn.end]) == turn.valid
            slips += not turn.valid
    assert slips > 0
