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


def test_precompile_covers_the_policy_widths_of_the_batches():
    """With train.logits = policy the trainer's batches carry policy_at [M, mb, P]; precompile compiled
    none (its batches had no policy_at), so every new length compiled inside an RL step. Now every
    batch `global_batch` builds from episodes within the turn limit has a precompiled shape."""
    import jax

    from helpers.credit import fake_traj
    from prover_jax.sharding import make_mesh
    from prover_jax.training.assemble import global_batch
    from prover_jax.training.batch import policy_width, policy_widths
    from prover_jax.training.wiring import precompile

    assert [policy_width(n, 512) for n in (0, 128, 129, 300, 600)] == [128, 128, 256, 512, 512]
    assert policy_widths(384, 300) == [128, 256, 384] and policy_widths(1024, 24) == [128]

    class Recorder:
        def precompile(self, state, batches, frozen=None):
            self.shapes = [{k: (v.shape, v.dtype) for k, v in b.items()} for b in batches]
            return len(batches)

    c = trainer_config()
    c.train.logits, c.rollout.max_action_tokens, turns = "policy", 100, 3
    mesh, step = make_mesh((1, 1, 1), devices=jax.devices()[:1]), Recorder()
    precompile(c, mesh, step, {"w": jax.numpy.zeros(2)}, None, max_policy_tokens=turns * c.rollout.max_action_tokens)
    seen = set()
    for n_turns, act_len, obs_len in [(1, 5, 3), (3, 50, 3), (3, 100, 3), (3, 100, 100), (2, 70, 400)]:
        trajs = [fake_traj(n_turns, k % 2 == 0, uid=k, act_len=act_len, obs_len=obs_len)
                 for k in range(c.rollout.groups_per_step * c.rollout.group_size)]
        _, batch = global_batch(c, mesh, trajs, [np.zeros(len(t.tokens), np.float32) for t in trajs],
                                [True] * len(trajs))
        shapes = {k: (v.shape, v.dtype) for k, v in batch.items()}
        assert "policy_at" in shapes and shapes in step.shapes, shapes
        seen.add(shapes["policy_at"][0][-1])
    assert seen == {128, 256, 512}  # the cases reach three widths
