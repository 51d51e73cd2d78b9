"""DAPO's dynamic sampling (training/dynamic.py) and overlong handling (credit/shaping.py) on
hand-built groups, and both inside the trainer's step."""

import numpy as np
import pytest

from prover_jax.credit.base import CreditOutput
from prover_jax.credit.shaping import overlong_penalty, overlong_shaping, trained_episodes
from prover_jax.credit.prover import MERGE as PROVER_MERGE
from prover_jax.rollout.trajectory import CONTEXT_LIMIT
from prover_jax.training import dynamic
from prover_jax.training.batch import pack

from helpers.credit import fake_traj

G = 2


def draw(outcomes, uid0, seeds):
    """A task batch of len(outcomes) groups (G episodes each), advantages R - mean on policy tokens."""
    trajs, advantages = [], []
    for g, group in enumerate(outcomes):
        ts = [fake_traj(2, bool(s), uid0 + g * G + j) for j, s in enumerate(group)]
        trajs += ts
        advantages.append([np.where(np.asarray(t.policy_mask), np.float32(s - np.mean(group)), 0)
                           for t, s in zip(ts, group)])
    return dynamic.Draw(seeds, trajs, CreditOutput(advantages, {"judge/calls": 1.0, "time/rollout_s": 2.0}), 0, G)


def uids(selected):
    return [[t.uid for t in g] for g in selected.credit.groups]


def test_off_drop_refill_select_whole_groups():
    d0 = draw([(0, 0), (1, 0), (1, 1)], 0, [10, 11, 12])
    d1 = draw([(0, 1), (1, 0), (0, 0)], 100, [13, 14, 15])
    off = dynamic.select([d0], "off", 3)
    assert off.credit is d0.credit and off.metrics == {} and off.context == set()
    drop = dynamic.select([d0], "drop", 3)
    assert uids(drop) == [[2, 3]] and drop.credit.advantages == [d0.credit.advantages[1]]
    assert drop.metrics == {"dynamic/draws": 1.0, "dynamic/kept_groups": 1.0, "dynamic/dropped_groups": 2.0,
                            "dynamic/extra_episodes": 0.0}
    assert not dynamic.wants_more([d0], "drop", 3, 3)
    assert dynamic.wants_more([d0], "refill", 3, 3) and not dynamic.wants_more([d0], "refill", 1, 3)
    assert not dynamic.wants_more([d0, d1], "refill", 3, 3)  # 1 + 2 informative groups
    refill = dynamic.select([d0, d1], "refill", 3, PROVER_MERGE)  # judge/calls: a count of the method
    assert uids(refill) == [[2, 3], [100, 101], [102, 103]]  # in draw order, each group whole
    for group, adv in zip(refill.credit.groups, refill.credit.advantages):
        assert len(group) == len(adv) == G and {t.uid // 100 for t in group} == {group[0].uid // 100}
    assert refill.seeds == [10, 11, 12, 13, 14, 15] and len(refill.played) == 12
    assert refill.metrics["dynamic/extra_episodes"] == 6.0 and refill.metrics["dynamic/dropped_groups"] == 3.0
    # credit metrics merged over the draws: counts and wall times summed
    assert refill.credit.metrics == {"judge/calls": 2.0, "time/rollout_s": 4.0}
    d2 = draw([(0, 1), (1, 0), (1, 0)], 200, [16, 17, 18])
    assert uids(dynamic.select([d0, d2], "refill", 3)) == [[2, 3], [200, 201], [202, 203]]  # the first 3 only


def test_nothing_informative_trains_on_the_first_batch():
    d0 = draw([(0, 0), (1, 1)], 0, [1, 2])
    s = dynamic.select([d0, draw([(0, 0), (0, 0)], 100, [3, 4])], "refill", 2)
    assert uids(s) == [[0, 1], [2, 3]] and s.metrics["dynamic/kept_groups"] == 0.0
    with pytest.raises(ValueError, match="rollout.dynamic_sampling"):
        dynamic.check_mode("filter", 3)
    with pytest.raises(ValueError, match="rollout.max_draws"):
        dynamic.check_mode("refill", 0)


def test_overlong_shaping_and_truncated_episodes():
    np.testing.assert_allclose(overlong_penalty([50, 80, 81, 90, 100, 130], 100, 20, 1.0),
                               [0, 0, -0.05, -0.5, -1.0, -1.0])
    assert not overlong_penalty([130], 100, 0, 1.0).any() and not overlong_penalty([130], 100, 20, 0.0).any()
    a, b = fake_traj(2, True, 0), fake_traj(6, False, 1)  # 4 + 2*2 + 3 = 11 and 4 + 6*2 + 5*3 = 31 tokens
    adv = [[np.where(np.asarray(t.policy_mask), np.float32(v), 0) for t, v in ((a, 0.5), (b, -0.5))]]
    out, mean = overlong_shaping([[a, b]], adv, max_length=30, buffer=10, coef=1.0)
    p = overlong_penalty([11, 31], 30, 10, 1.0)  # [0, -1]: b is over Lmax
    assert list(p) == [0.0, -1.0] and mean == -0.5
    for t, got, old, pi in zip((a, b), out[0], adv[0], p):
        m = np.asarray(t.policy_mask)
        np.testing.assert_allclose(got[m], old[m] + (pi - p.mean()))  # +0.5 / -0.5 on policy tokens
        assert not got[~m].any()
    same, zero = overlong_shaping([[a, b]], adv, 30, 0, 1.0)
    assert same[0][0] is adv[0][0] and zero == 0.0
    b.termination = CONTEXT_LIMIT
    assert trained_episodes([a, b], mask_truncated=True) == [True, False]
    assert trained_episodes([a, b], mask_truncated=False) == [True, True]
    rows = pack([a, b], adv[0], 2, trained=[True, False])
    assert rows["loss_mask"][0, 0].sum() == a.num_policy_tokens and not rows["loss_mask"][0, 1].any()
    assert rows["valid"][0, 1].sum() == len(b.tokens)  # still in the batch, as context


def test_refill_and_mask_truncated_in_the_trainer(tmp_path):
    """refill: the first task batch has no mixed group, so a second is drawn and trained on alone;
    mask_truncated: its episode cut at the context limit is in no loss token."""
    from helpers.demo_config import trainer_config
    from prover_jax.training import trainer as trainer_lib
    from test_trainer import expected_tasks

    c = trainer_config()
    c.sft.steps = 0
    c.credit.method = "grpo"
    c.rollout.dynamic_sampling = "refill"
    c.loss.mask_truncated = True
    t = trainer_lib.Trainer(c, str(tmp_path / "dyn"))
    real, played = t.run.pipeline.run, []

    def run(seeds, uids, group_size):
        trajs, _ = real(seeds, uids, group_size)
        for i, traj in enumerate(trajs):  # batch 1: every episode fails; batch 2: one success per group
            traj.success = bool(played) and i % group_size == 0
        if played:
            trajs[1].termination = CONTEXT_LIMIT
        played.append(trajs)
        groups = [trajs[g:g + group_size] for g in range(0, len(trajs), group_size)]
        return trajs, t.run.credit.assign(groups)

    t.run.pipeline.run = run
    try:
        row = t.rl_step()
        assert len(played) == 2 and t.batches_drawn == 2
        assert row["tasks"] == expected_tasks(c, 0) + expected_tasks(c, 1)
        assert row["dynamic/draws"] == 2 and row["dynamic/kept_groups"] == 2
        assert row["dynamic/dropped_groups"] == 2 and row["dynamic/extra_episodes"] == 4
        # the truncated one is masked: the loss sees 3
        assert row["episodes"] == 8 and row["trained_episodes"] == 3 and row["truncated_frac"] == 1 / 8
        assert row["success_rate"] == 2 / 8 and row["applied"]
        # the loss saw the second batch's policy tokens, less those of the truncated episode
        assert row["num_tokens"] == sum(x.num_policy_tokens for x in played[1]) - played[1][1].num_policy_tokens
    finally:
        t.close()
