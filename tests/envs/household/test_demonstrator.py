"""The household demonstrator's levers: a restricted set of task object types, a demonstrator who
confuses lookalikes in a share of the tasks, DART-style slips it recovers from, and SFT's mask that
keeps the slips out of the loss."""

from __future__ import annotations

import pytest

from prover_jax.envs import make
from prover_jax.envs.household.gen import LOOKALIKE
from prover_jax.envs.household.world import COMMITTED
from prover_jax.envs.testing import play_demonstrator

KW = dict(task_type="pick_and_place", max_turns=8, expert_turns=(3, 5), num_receptacles=4, num_objects=3)
PAIRS = ("mug", "cup", "pen", "pencil")


def test_target_types_restrict_the_task_objects_and_are_checked():
    env = make("household", target_types=PAIRS, **KW)
    for seed in range(50):
        env.reset(seed)
        assert env.layout.target_type in PAIRS and env.layout.decoy_type == LOOKALIKE[env.layout.target_type]
    with pytest.raises(ValueError, match="env.kwargs.target_types"):
        make("household", target_types=("moon",), **KW)


@pytest.mark.parametrize("q", [0.0, 0.5, 1.0])
def test_a_confused_demonstrator_commits_the_lookalike_in_its_share_of_tasks(q):
    """Confused tasks (a share q, drawn from the seed) fail exactly when the lookalike is met before the
    target: then the demonstrator commits it; elsewhere it plays the expert, which always succeeds.
    info["expert"] stays the true expert throughout."""
    env = make("household", target_types=PAIRS, demo_confusion=q, **KW)
    confused = failed = 0
    for seed in range(120):
        success, steps = play_demonstrator(env, seed)
        is_confused = env.confused(env.layout.seed)
        confused += is_confused
        if not success:
            failed += 1
            assert is_confused
            committed = [o for o, f in enumerate(env.snapshot().obj_flags) if f & COMMITTED]
            assert [env.layout.obj_types[o] for o in committed] == [env.layout.decoy_type]
        _, info = env.reset(seed)
        assert env.step(info["expert"])[3]["valid"]
    assert confused == 0 if q == 0 else abs(confused / 120 - q) < 0.15
    assert (failed > 0) == (q > 0)
    with pytest.raises(ValueError, match="demo_confusion"):
        make("household", demo_confusion=1.5, **KW)


def test_slips_are_inadmissible_never_twice_in_a_row_and_recovered_from():
    env = make("household", target_types=PAIRS, demo_noise=0.3, **KW)
    slips = wins = 0
    for seed in range(100):
        success, steps = play_demonstrator(env, seed)
        wins += success
        slips += sum(not v for _, v in steps)
        assert all(a or b for (_, a), (_, b) in zip(steps, steps[1:]))  # no two slips in a row
        assert play_demonstrator(env, seed) == (success, steps)  # deterministic in the seed
    assert slips > 50 and wins >= 90  # the expert recovers from its slips within the turn limit
    with pytest.raises(ValueError, match="demo_noise"):
        make("household", demo_noise=1.0, **KW)
