"""Config errors found before anything is built (`wiring.check`): each names its field, where the run
would otherwise crash after its first step, delete its checkpoints, or train at a rate the config
does not say."""

import numpy as np
import pytest

from prover_jax.training import optim, sft
from prover_jax.training.wiring import check

from helpers.demo_config import trainer_config


@pytest.mark.parametrize("field,value", [("checkpoint_every", 0), ("keep_checkpoints", 0), ("micro_batch_size", 0),
                                         ("length_multiple", 0), ("eval_every", -1)])
def test_train_counts_are_checked(field, value):
    c = trainer_config()
    check(c)
    c.train[field] = value
    with pytest.raises(ValueError, match=f"train.{field} = {value} must be >= "):
        check(c)


@pytest.mark.parametrize("field,value,message", [
    ("steps", -1, "sft.steps = -1"), ("batch_size", 0, "sft.batch_size = 0"), ("episodes", 0, "sft.episodes = 0"),
    ("warmup_steps", -5, "sft.warmup_steps = -5"), ("final_lr_frac", 2.0, "sft.final_lr_frac = 2.0"),
    ("optim.name", "adamx", "sft.optim.name: unknown optimizer 'adamx'")])
def test_sft_fields_are_checked_by_their_own_names(field, value, message):
    c = trainer_config()
    c.sft.steps = 10
    check(c)
    section, _, name = field.rpartition(".")
    (c.sft[section] if section else c.sft)[name] = value
    with pytest.raises(ValueError, match=message):
        check(c)
    c.sft.steps, c.sft.batch_size = 0, 0  # no warm start: its other fields are not used
    check(c)


def test_warmup_cosine_needs_a_decay_length():
    """decay_steps = 0 (the default) gave the peak rate at update 0 and 0 at every later one."""
    c = trainer_config()
    c.optim.update(schedule="warmup_cosine", learning_rate=0.1, warmup_steps=4, decay_steps=0)
    for bad in (lambda: optim.schedule(c.optim), lambda: check(c)):
        with pytest.raises(ValueError, match="optim.decay_steps >= 1"):
            bad()
    c.optim.decay_steps = 10
    check(c)
    f = optim.schedule(c.optim)
    assert [float(f(t)) for t in (0, 2, 4, 10)] == pytest.approx([0.0, 0.05, 0.1, 0.0], abs=1e-7)
    # SFT's one-step run still trains at the peak rate
    assert np.isclose(float(optim.schedule(sft.sft_optim(sft_section(steps=1)))(0)), 1e-3)


def sft_section(**kw):
    s = trainer_config().sft
    s.update(dict(learning_rate=1e-3, warmup_steps=10, **kw))
    return s


@pytest.mark.parametrize("off_policy,tis_cap,kl", [(0, 0.0, 0.0), (1, 2.0, 0.1), (1, 0.0, 0.0)])
def test_precompile_has_the_batch_keys_of_the_steps(off_policy, tis_cap, kl):
    """The precompiled batches carry the keys `Trainer.rl_step` adds (ref_logprobs with kl_coef > 0,
    prox_logprobs off-policy with tis_cap > 0), so its steps run an executable compiled ahead."""
    import jax
    import jax.numpy as jnp

    from prover_jax.sharding import make_mesh
    from prover_jax.training.wiring import precompile

    class Recorder:
        def precompile(self, state, batches, frozen=None):
            self.batches = batches
            return len(batches)

    c = trainer_config()
    c.rollout.off_policy_steps, c.loss.tis_cap, c.loss.kl_coef = off_policy, tis_cap, kl
    step = Recorder()
    precompile(c, make_mesh((1, 1, 1), devices=jax.devices()[:1]), step, {"w": jnp.zeros(2)}, None)
    want = {"ref_logprobs": kl > 0, "prox_logprobs": bool(off_policy) and tis_cap > 0}
    assert step.batches and all({k: k in b for k in want} == want for b in step.batches)
