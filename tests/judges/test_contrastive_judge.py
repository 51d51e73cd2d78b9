"""The contrastive judge's rule on hand-built trajectories and on real household rollouts."""

import dataclasses

import numpy as np
import pytest

from prover_jax import envs
from prover_jax.envs.pool import EnvPool
from prover_jax.judges import NO_CANDIDATE, make_judge, validate_segment
from prover_jax.rollout import Rollout, env_corpus, train_tokenizer
from prover_jax.rollout.trajectory import DONE, TURN_LIMIT, Trajectory, Turn


def make_traj(actions, states, valid=None, obs=None, success=False, task="same task"):
    """states[t] = snapshot before turn t (len(actions) + 1 of them)."""
    assert len(states) == len(actions) + 1
    valid = valid or [True] * len(actions)
    obs = obs or [f"obs {s}" for s in states[1:]]
    turns = [Turn(0, 0, f"<action>{a}</action>", a if v else None, v, o, 0.0, "stop")
             for a, v, o in zip(actions, valid, obs)]
    return Trajectory(env="toy", seed=0, uid=0, task=task, turns=turns, snapshots=list(states),
                      success=success, termination="done")


def propose(success, failures, k=4, **kw):
    return make_judge("contrastive", None, **kw).propose(success, failures, max_segment_turns=k,
                                                         rng=np.random.default_rng(0))


SUCCESS = make_traj(list("abcde"), ["s0", "s1", "s2", "s3", "s4", "win"], success=True)


def test_earliest_turn_no_failure_followed():
    f1 = make_traj(["a", "x", "y"], ["s0", "s1", "z1", "z2"])  # followed the success for one turn
    f2 = make_traj(["q", "r"], ["s0", "w1", "w2"])  # left at once
    p = propose(SUCCESS, [f1, f2])
    # turn 0: f1 made the same move from s0, so turn 0 did not make the difference; at turn 1 the only
    # failed run that reached s1 went elsewhere
    assert p.ok and p.segment == (1, 1) and "'b'" in p.rationale and "'x'" in p.rationale
    assert propose(SUCCESS, [f2]).segment == (0, 0)


def test_loose_rule_when_every_move_was_also_made():
    f1 = make_traj(["a", "b"], ["s0", "s1", "s2"])  # made the success's moves, then stopped in s2
    f2 = make_traj(["q"], ["s0", "w1"])
    assert propose(SUCCESS, [f1, f2]).segment == (0, 0)


def test_no_shared_state_uses_the_common_action_prefix():
    f1 = make_traj(["a", "b", "q"], ["t0", "t1", "t2", "t3"])
    f2 = make_traj(["a", "p"], ["u0", "u1", "u2"])
    assert propose(SUCCESS, [f1, f2]).segment == (2, 2)
    # a departure at the terminal turn falls back to the nearest earlier valid turn
    f3 = make_traj(["a", "b", "c", "d", "zz"], ["v0", "v1", "v2", "v3", "v4", "v5"])
    assert propose(SUCCESS, [f3]).segment == (3, 3)
    bad = make_traj(list("abcde"), ["s0", "s1", "s2", "s3", "s4", "win"], valid=[True, True, True, False, True])
    assert propose(bad, [f3]).segment == (2, 2)


def test_no_candidates():
    assert propose(SUCCESS, []).reason == NO_CANDIDATE
    one = make_traj(["a"], ["s0", "win"], success=True)
    assert propose(one, [make_traj(["q"], ["s0", "w"])]).reason == NO_CANDIDATE
    invalid = make_traj(["a", "b"], ["s0", "s0", "win"], valid=[False, True], success=True)
    assert propose(invalid, [make_traj(["q"], ["s0", "w"])]).reason == NO_CANDIDATE


@dataclasses.dataclass(frozen=True)
class Pos:
    pos: int
    turn: int


def test_turn_counter_is_not_part_of_the_state():
    succ = make_traj(["a", "b", "c"], [Pos(0, 0), Pos(1, 1), Pos(2, 2), Pos(3, 3)], success=True)
    # the failed run wastes a turn (invalid action), then takes the success's first move one turn late
    fail = make_traj(["zz", "a", "d"], [Pos(0, 0), Pos(0, 1), Pos(1, 2), Pos(9, 3)], valid=[False, True, True])
    assert propose(succ, [fail]).segment == (1, 1)
    # counting turns in the state, the failed run's wasted turn would be the departure
    assert propose(succ, [fail], ignore_fields=()).segment == (0, 0)


class Opaque:
    """A snapshot that cannot be compared (forces the observation-history fallback)."""
    __hash__ = None

    def __eq__(self, other):
        raise RuntimeError("not comparable")


def test_observation_history_fallback():
    obs_s = ["o1", "o2", "o3", "o4", "o5"]
    succ = make_traj(list("abcde"), [Opaque()] * 6, obs=obs_s, success=True)
    f1 = make_traj(list("axy"), [Opaque()] * 4, obs=["o1", "o2", "p3"])  # same first two observations
    f2 = make_traj(list("qr"), [Opaque()] * 3, obs=["n1", "n2"])
    p = propose(succ, [f1, f2])
    assert p.segment == (2, 2) and "observation-history" in p.rationale
    # missing snapshots fall back the same way
    f1.snapshots = []
    assert propose(succ, [f1, f2]).segment == (2, 2)


# ------------------------------------------------------------------------------ real household rollouts

def random_failure(seed: int, follow: int, rng: np.random.Generator, max_turns: int = 30) -> Trajectory:
    """Follows the household expert for `follow` turns, then random admissible non-expert commands."""
    env = envs.make("household")
    obs, info = env.reset(seed)
    traj = Trajectory(env="household", seed=seed, uid=100 + follow, task=obs, snapshots=[env.snapshot()])
    done = False
    while not done and traj.num_turns < max_turns:
        expert = env.expert_action()
        if traj.num_turns < follow:
            action = expert
        else:
            options = [a for a in info["admissible"] if a != expert]
            action = options[int(rng.integers(len(options)))]
        obs, reward, done, info = env.step(action)
        traj.turns.append(Turn(0, 0, env.render_action(action), action, info["valid"], obs, reward, "stop"))
        traj.snapshots.append(env.snapshot())
        traj.success = info["success"]
    traj.termination = DONE if done else TURN_LIMIT
    return traj


@pytest.fixture(scope="module")
def expert_runs():
    tokenizer = train_tokenizer(env_corpus("household", range(3)), vocab_size=400)
    seeds = [11, 12, 13]
    with EnvPool("household", len(seeds)) as pool:
        return Rollout(None, tokenizer).run(pool, seeds, expert=True)


def test_household_expert_vs_random_failures(expert_runs):
    judge = make_judge("contrastive")
    rng = np.random.default_rng(0)
    checked = 0
    for success in expert_runs:
        assert success.success and success.num_turns >= 8
        # failures that leave the expert's path at once: the departure is the first turn
        failures = [random_failure(success.seed, 0, rng) for _ in range(4)]
        failures = [f for f in failures if not f.success]
        p = judge.propose(success, failures, max_segment_turns=4, rng=rng)
        assert p.ok and p.segment == (0, 0), p.rationale
        # failures that follow the expert for 2, 4 and 6 turns: turns 2 and 4 are not the difference
        # (a failed run that reached them made the same move); turn 6 is, as no failed run that got
        # there did what the successful run did
        failures = [f for f in (random_failure(success.seed, k, rng) for k in (2, 4, 6)) if not f.success]
        if len(failures) < 3:
            continue
        assert [t.action for t in failures[2].turns[:6]] == [t.action for t in success.turns[:6]]
        p = judge.propose(success, failures, max_segment_turns=4, rng=rng)
        assert p.ok and p.segment == (6, 6), p.rationale
        assert validate_segment(success, *p.segment, 4) is None
        checked += 1
    assert checked >= 2
