"""The `oracle` judge and the `rules` critic on household episodes played by faulty demonstrators: the
judge proposes the success's turn at the pivot most failed runs first got wrong; the critic labels the
pivotal moves and nothing else."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.credit import play_actions
from prover_jax.credit.critic_rules import RulesCritic
from prover_jax.envs import make
from prover_jax.judges import NO_CANDIDATE, make_judge, needs_env

KW = dict(task_type="pick_heat_then_place", num_receptacles=6, num_objects=2, num_decoys=1, max_turns=15,
          expert_turns=(6, 10), target_types=("apple", "tomato", "mug", "cup"))


def _actions(seed, **faults):
    env = make("household", **KW, **faults)
    env.reset(seed)
    out, done = [], False
    while not done:
        a = env.expert_action()
        out.append(a)
        done = env.step(a)[2]
    return out


def _task():
    """A task where both the heater and the latch fault fail the demonstrator."""
    env = make("household", **KW, demo_scorch=1.0, demo_latch=1.0)
    for seed in range(300):
        env.reset(seed)
        if env.faults.of(env.layout) == {"scorch", "latch"}:
            return seed
    raise AssertionError("no task with both faults")


def _group(seed, faults):
    env = make("household", **KW)
    trajs = [play_actions(env, seed, _actions(seed, **f), uid=i)[0] for i, f in enumerate(faults)]
    assert [t.success for t in trajs] == [not f for f in faults]
    return trajs


def _judge():
    assert needs_env("oracle") and not needs_env("contrastive")
    return make_judge("oracle", None, env_name="household", env_kwargs=KW)


def test_the_most_common_first_mistake_decides():
    seed = _task()
    success, *fails = _group(seed, [{}, {"demo_scorch": 1.0}, {"demo_scorch": 1.0}, {"demo_latch": 1.0}])
    p = _judge().propose(success, fails, max_segment_turns=4, rng=np.random.default_rng(0))
    assert p.ok, p.rationale
    t = p.segment[0]
    assert p.segment == (t, t) and success.turns[t].action.startswith("heat ") and "microwave" in success.turns[t].action
    assert "2 of 3" in p.rationale


def test_a_class_the_success_has_no_turn_for_falls_to_the_next():
    """Latch failures are the majority, but the expert never stood at the open target receptacle: the
    judge takes the heater, the next class."""
    seed = _task()
    success, *fails = _group(seed, [{}, {"demo_latch": 1.0}, {"demo_latch": 1.0}, {"demo_scorch": 1.0}])
    p = _judge().propose(success, fails, max_segment_turns=4, rng=np.random.default_rng(0))
    assert p.ok and "microwave" in success.turns[p.segment[0]].action


def test_no_mistake_no_candidate():
    seed = _task()
    success, fail = _group(seed, [{}, {"demo_latch": 1.0}])
    idle = play_actions(make("household", **KW), seed, ["look"] * KW["max_turns"], uid=9)[0]
    p = _judge().propose(success, [idle], max_segment_turns=4, rng=np.random.default_rng(0))
    assert p.reason == NO_CANDIDATE and "none of the 1 failed runs" in p.rationale


def test_the_oracle_judge_refuses_an_env_without_rules():
    with pytest.raises(ValueError, match="judge.name='oracle'"):
        make_judge("oracle", None, env_name="searchqa", env_kwargs={})
    with pytest.raises(ValueError, match="env_name"):
        make_judge("oracle", None)


def test_rules_critic_labels_the_pivots_only():
    seed = _task()
    group = _group(seed, [{}, {"demo_scorch": 1.0}, {"demo_latch": 1.0}])
    critic = RulesCritic("household", KW)
    labels = critic.label(group)
    actions = [[turn.action for turn in t.turns] for t in group]
    good, scorch, latch = labels
    heat = lambda acts, where: next(i for i, a in enumerate(acts) if a.startswith("heat ") and where in a)
    assert good[heat(actions[0], "microwave")] == 1 and good[-1] == 1  # heated right; committed
    assert min(good) == 0
    assert scorch[heat(actions[1], "stoveburner")] == -1 and scorch.count(-1) == 2  # scorched; committed ruined
    closes = [i for i, a in enumerate(actions[2]) if a.startswith("close ")]
    assert [latch[i] for i in closes] == [-1]
    assert sum(x != 0 for x in good) <= 3  # routine turns stay 0
    with pytest.raises(ValueError, match="credit.critic.name='rules'"):
        RulesCritic("searchqa", {})
