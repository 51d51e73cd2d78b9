"""The credit-hard demonstrator (`household.demonstrator`): each fault fails the task at its own pivot, the
late ones only at the end, failures play on to the turn limit, idle turns change nothing; the pivot
rules (`household.pivots`) label the right and the wrong choice at each rule."""

from __future__ import annotations

import dataclasses
import os
import statistics

import pytest

from prover_jax.envs import make
from prover_jax.envs.base import split_seed
from prover_jax.envs.household.demonstrator import Faults, faulty_command
from prover_jax.envs.household.world import apply, commands
from prover_jax.training.config import load_config_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

KW = dict(task_type="pick_heat_then_place", num_receptacles=6, num_objects=2, num_decoys=1, max_turns=15,
          expert_turns=(6, 10), target_types=("apple", "tomato", "mug", "cup"))
FAULT_CLASS = {"confused": "object", "scorch": "process", "premature": "process", "latch": "latch"}


def _episode(env, seed):
    """[(snapshot before, action)] of the env's demonstrator on task `seed`, and its success."""
    env.reset(seed)
    out, done, info = [], False, {}
    while not done:
        before, action = env.snapshot(), env.expert_action()
        _, _, done, info = env.step(action)
        out.append((before, action))
    return out, bool(info["success"])


def _alone(layout, fault):
    """Whether the demonstrator with only this fault (drawn for every task) fails the task."""
    state = layout.init
    for _ in range(layout.max_turns):
        state, _ = apply(layout, state, commands(layout, state)[faulty_command(layout, state, frozenset([fault]))])
        if state.done:
            return not state.success
    return True


@pytest.mark.parametrize("fault", ["scorch", "premature", "latch", "confused"])
def test_each_fault_fails_where_it_applies_and_first_errs_at_its_pivot(fault):
    kwarg = "demo_confusion" if fault == "confused" else f"demo_{fault}"
    env = make("household", **KW, **{kwarg: 1.0})
    rules = make("household", **KW)
    failed = 0
    for i in range(60):
        steps, success = _episode(env, split_seed(i, "eval"))
        lay = env.layout
        applies = fault in env.faults.of(lay)
        assert success == (not applies or not _alone(lay, fault)), (fault, i)
        if success:
            continue
        failed += 1
        assert len(steps) == KW["max_turns"]  # failures play on to the turn limit
        labels = [rules.pivot(s, a) for s, a in steps]
        first = next(p for p in labels if p is not None and p[0] < 0)
        assert first[1] == FAULT_CLASS[fault]
        t_mistake = labels.index(first)
        if fault in ("scorch", "latch"):  # late: the demonstrator plays its plan on for turns after it
            assert sum(a != "look" for _, a in steps[t_mistake + 1:]) >= 2
    assert failed >= (15 if fault != "confused" else 10)


def test_fault_shares_are_checked_and_scorch_keeps_to_its_types():
    with pytest.raises(ValueError, match="demo_latch"):
        make("household", **KW, demo_latch=1.5)
    with pytest.raises(ValueError, match="demo_idle"):
        make("household", **KW, demo_idle=1.0)
    env = make("household", **KW, demo_scorch=1.0, demo_scorch_types=("apple",))
    for i in range(40):
        env.reset(i)
        assert ("scorch" in env.faults.of(env.layout)) == (env.layout.target_type == "apple")
    lamp_task = _reset(make("household", task_type="look_at_obj_in_light"), 0)  # no target receptacle
    assert Faults(latch=1.0, scorch=1.0).of(lamp_task) == frozenset()


def _reset(env, seed):
    env.reset(seed)
    return env.layout


def test_idle_turns_are_admissible_no_ops_never_twice_in_a_row():
    env = make("household", **KW, demo_idle=0.2)
    idles = wins = 0
    for i in range(40):
        steps, success = _episode(env, i)
        wins += success  # the expert mostly still wins within the limit
        for (s, a), (s2, _) in zip(steps, steps[1:]):
            idle = a in ("look", "inventory") or (a.startswith("examine") and s2.loc == s.loc)
            if idle:
                assert dataclasses.replace(s2, turn=s.turn) == s  # changes nothing but the turn
                idles += 1
        assert _episode(env, i) == (steps, success)  # deterministic in the seed
    assert idles > 30 and wins >= 36


def test_pivot_labels_of_hand_played_moves():
    env = make("household", **KW)
    seed = next(i for i in range(200) if _reset(env, i).goal >= 0 and (_reset(env, i).latching >> _reset(env, i).goal) & 1)
    lay = _reset(env, seed)
    s = lay.init
    goal = lay.receptacles[lay.goal]
    assert env.pivot(s, "go to " + goal) is None
    env.step("go to " + goal)
    s1 = env.snapshot()
    assert env.pivot(s1, "open " + goal) is None
    env.step("open " + goal)
    s2 = env.snapshot()
    assert env.pivot(s2, "close " + goal) == (-1, "latch")
    other = next(r for r in lay.receptacles if r != goal)
    assert env.pivot(s2, "go to " + other) == (+1, "latch")
    assert env.pivot(s2, "fly away") is None  # inadmissible
    # the objects: a lookalike and the task object, wherever they lie
    target = lay.obj_types.index(lay.target_type)
    decoy = lay.obj_types.index(lay.decoy_type)
    hold = lambda o: dataclasses.replace(lay.init, loc=lay.init.obj_loc[o], opened=(1 << 12) - 1,
                                         seen=(1 << 12) - 1)
    take = lambda o: f"take {lay.objects[o]} from {lay.receptacles[lay.init.obj_loc[o]]}"
    assert env.pivot(hold(decoy), take(decoy)) == (-1, "object")
    assert env.pivot(hold(target), take(target)) == (+1, "object")
    carrying = dataclasses.replace(lay.init, obj_loc=tuple(-1 if o == target else at for o, at in enumerate(lay.init.obj_loc)))
    burner = next(r for r, k in enumerate(lay.kinds) if k == "stoveburner")
    micro = next(r for r, k in enumerate(lay.kinds) if k == "microwave")
    obj = lay.objects[target]
    at = lambda r, st=carrying: dataclasses.replace(st, loc=r, opened=(1 << 12) - 1)
    assert env.pivot(at(burner), f"heat {obj} with {lay.receptacles[burner]}") == (-1, "process")
    assert env.pivot(at(micro), f"heat {obj} with {lay.receptacles[micro]}") == (+1, "process")
    assert env.pivot(at(lay.goal), f"put {obj} in/on {goal}") == (-1, "process")  # not heated yet
    hot = dataclasses.replace(carrying, obj_flags=tuple(2 if o == target else f for o, f in enumerate(carrying.obj_flags)))
    assert env.pivot(at(lay.goal, hot), f"put {obj} in/on {goal}") == (+1, "commit")


def test_credit_hard_demonstrations():
    """configs/credit_hard.py's demonstrations: the expert's 6-10 turns, the demonstrator's success near
    .4 with every fault class among its failures, and a greedy imitator's start (the tasks where no
    fault drawn for more than half of its tasks fails the task) in .15-.45."""
    kw = load_config_file(os.path.join(ROOT, "configs", "credit_hard.py")).env.kwargs.to_dict()
    env = make("household", **kw)
    wins, classes, expert, greedy = 0, set(), [], 0
    shares = {"confused": kw["demo_confusion"], "scorch": kw["demo_scorch"], "latch": kw["demo_latch"]}
    for i in range(150):
        steps, success = _episode(env, split_seed(i, "eval"))
        lay = env.layout
        wins += success
        state = lay.init
        for n in range(lay.max_turns):
            state, _ = apply(lay, state, commands(lay, state)[faulty_command(lay, state, frozenset())])
            if state.done:
                break
        expert.append(n + 1)
        majority = {f for f, q in shares.items() if q > 0.5}
        greedy += not any(_alone(lay, f) for f in Faults(**{f: 1.0 for f in majority},
                                                          scorch_types=kw["demo_scorch_types"]).of(lay))
        if not success:
            labels = [env.pivot(s, a) for s, a in steps]
            classes.add(next(p[1] for p in labels if p is not None and p[0] < 0))
    assert 6 <= min(expert) and max(expert) <= 10 and statistics.mean(expert) > 7
    assert 0.25 <= wins / 150 <= 0.55, wins
    assert classes == {"object", "process", "latch"}
    assert 0.15 <= greedy / 150 <= 0.45, greedy


def test_a_demonstrator_that_gives_up_waits_out_the_limit_with_masked_turns():
    """demo_give_up: once the task is lost the demonstrator plays the inadmissible `wait` (SFT masks
    invalid turns), never before; the episode still runs to the turn limit."""
    env = make("household", **KW, demo_scorch=1.0, demo_latch=1.0, demo_give_up=True)
    gave_up = 0
    for i in range(30):
        steps, success = _episode(env, split_seed(i, "eval"))
        waits = [t for t, (_, a) in enumerate(steps) if a == "wait"]
        if success:
            assert not waits
            continue
        assert len(steps) == KW["max_turns"] and waits and waits == list(range(waits[0], len(steps)))
        labels = [env.pivot(s, a) for s, a in steps]
        assert any(p is not None and p[0] < 0 for p in labels[:waits[0]])  # the mistake came first
        gave_up += 1
    assert gave_up >= 10
