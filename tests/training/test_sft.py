"""SFT warm start pieces: the learning-rate schedule, and the RL update's own train step with SFT's
objective: its loss is the masked mean NLL of the demonstration's policy tokens and goes down on a
fixed batch."""

import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from prover_jax.training.config import default_config
from prover_jax.training.loss import token_logprobs
from prover_jax.training.sft import loss_positions, sft_optim
from prover_jax.training.optim import make_optimizer, schedule
from prover_jax.training.step import TrainState, init_train_state, make_train_step, nll_objective

from helpers.tiny import tiny_model


def _sft(**kw):
    c = default_config().sft
    c.update(kw)
    return c


def test_schedule_warms_up_then_decays_to_the_floor():
    f = schedule(sft_optim(_sft(steps=100, warmup_steps=10, learning_rate=1e-3, final_lr_frac=0.1)))
    assert float(f(0)) == 0.0 and np.isclose(float(f(10)), 1e-3)
    lrs = [float(f(i)) for i in range(10, 101)]
    assert all(a >= b - 1e-12 for a, b in zip(lrs, lrs[1:])) and np.isclose(lrs[-1], 1e-4)
    # a one-step run still trains at the peak rate
    assert np.isclose(float(schedule(sft_optim(_sft(steps=1, warmup_steps=10, learning_rate=1e-3)))(0)), 1e-3)


def test_sft_optimizer_comes_from_its_config():
    c = _sft(steps=50, warmup_steps=0, learning_rate=1e-3)
    c.optim.name, c.optim.grad_clip = "sgd", 0.0
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    _, params = nnx.split(model, nnx.Param)
    opt = make_optimizer(sft_optim(c))
    grads = {"kernel": jnp.full((3, 2), 10.0), "bias": jnp.zeros(2)}
    updates, _ = opt.update(nnx.State(grads), opt.init(params), params)
    # plain sgd at the peak rate, no clip: -lr * g
    assert np.allclose(np.asarray(updates["kernel"]), -1e-2)
    c.optim.name = "lion"
    with np.testing.assert_raises_regex(ValueError, "lion"):
        make_optimizer(sft_optim(c))


def test_step_loss_is_masked_nll_and_decreases():
    """SFT through the RL update's train step (`nll_objective`), a micro-batch axis of 1."""
    model = tiny_model()
    graphdef = nnx.graphdef(model)
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.integers(3, 64, (4, 24)), jnp.int32)
    valid = jnp.asarray(np.arange(24)[None, :] < np.array([24, 20, 16, 24])[:, None])
    mask = valid & jnp.asarray(rng.random((4, 24)) < 0.5) & (jnp.arange(24) > 0)[None, :]
    logp, _ = token_logprobs(model, tokens, valid)
    want = -float(jnp.sum(jnp.where(mask, logp, 0.0)) / jnp.sum(mask))
    at, at_valid = loss_positions(np.asarray(mask), multiple=8)
    assert at.shape == (4, 16) and at_valid.sum() == int(mask.sum())
    assert np.array_equal(np.asarray(tokens)[np.arange(4)[:, None], at][at_valid],
                          np.asarray(tokens)[np.asarray(mask)])
    opt = make_optimizer(ml_collections.ConfigDict(dict(name="adam", learning_rate=1e-2, b1=0.9, b2=0.999, eps=1e-8,
                                                        grad_clip=0.0, warmup_steps=0, decay_steps=0, end_lr_frac=0.0)))
    step = make_train_step(graphdef, nll_objective(), opt)
    state = init_train_state(model, opt)
    batch = dict(tokens=tokens[None], valid=valid[None], loss_mask=mask[None], policy_at=jnp.asarray(at)[None])
    losses = []
    for _ in range(15):
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
    assert isinstance(state, TrainState) and int(state.step) == 15
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
