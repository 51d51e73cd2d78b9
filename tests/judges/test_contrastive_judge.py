"""The contrastive judge's rule on hand-built trajectories and on real household rollouts."""

import dataclasses

import numpy as np
import pytest

from prover_jax import envs
from prover_jax.envs.household.world import COMMITTED, HAND, ROOM, State
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


def test_departure_where_no_failure_followed():
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


def test_loose_rule_takes_the_most_shared_turn_ties_later():
    f1 = make_traj(list("abc"), ["s0", "s1", "s2", "s3"])  # made every move it took: no strict departure
    fa = [make_traj(["q"], ["s0", f"w{k}"]) for k in range(2)]  # left s0 at once
    fb = [make_traj(["a", "b", f"y{k}"], ["s0", "s1", "s2", f"z{k}"]) for k in range(2)]  # left s2
    p = propose(SUCCESS, [f1, fa[0]] + fb, choice="shared")
    assert p.segment == (2, 2) and "loose" in p.rationale and "shared by 2 failed runs" in p.rationale
    assert propose(SUCCESS, [f1, fa[0], fb[0]], choice="shared").segment == (2, 2)  # a tie goes to the later turn
    assert propose(SUCCESS, [f1] + fa + [fb[0]], choice="shared").segment == (0, 0)
    assert propose(SUCCESS, [f1] + fa + [fb[0]]).segment == (2, 2)  # latest (the default)
    assert propose(SUCCESS, [f1] + fa + [fb[0]], choice="earliest").segment == (0, 0)


# SUCCESS's turn 1 (from s1) is left by the fa runs; its turn 3 (from s3) by the fb runs, which reach s3
# by another route (neither run made the other's departure's move nor the success's move from there)
def fa_run(k):
    return make_traj(["a", f"x{k}"], ["s0", "s1", f"z{k}"])


def fb_run(k):
    return make_traj([f"p{k}", "r", "y"], ["s0", f"q{k}", "s3", f"zz{k}"])


def test_the_latest_departure_by_default():
    """Two departures: the default proposes the later one however many failed runs share each."""
    for fails in ([fa_run(0)] + [fb_run(k) for k in range(3)], [fa_run(k) for k in range(2)] + [fb_run(0)]):
        p = propose(SUCCESS, fails)
        assert p.ok and p.segment == (3, 3) and "'d'" in p.rationale and "'y'" in p.rationale, p.rationale
        assert propose(SUCCESS, fails, choice="earliest").segment == (1, 1)
    with pytest.raises(ValueError, match="judge.contrastive.choice"):
        make_judge("contrastive", None, choice="best")


def test_the_departure_most_failed_runs_share_wins():
    p = propose(SUCCESS, [fa_run(0)] + [fb_run(k) for k in range(3)], choice="shared")
    assert p.ok and p.segment == (3, 3), p.rationale
    assert "shared by 3 failed runs" in p.rationale and "'d'" in p.rationale and "'y'" in p.rationale
    # more failed runs share the earlier departure: it wins
    p = propose(SUCCESS, [fa_run(k) for k in range(2)] + [fb_run(0)], choice="shared")
    assert p.segment == (1, 1) and "shared by 2 failed runs" in p.rationale


def test_a_tie_goes_to_the_later_departure():
    p = propose(SUCCESS, [fa_run(0), fb_run(0)], choice="shared")
    assert p.segment == (3, 3) and "shared by 1 failed run " in p.rationale
    p = propose(SUCCESS, [fa_run(0), fa_run(1), fb_run(0), fb_run(1)], choice="shared")
    assert p.segment == (3, 3) and "shared by 2 failed runs" in p.rationale


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


def test_done_at_the_turn_limit_is_not_part_of_the_state():
    """A failed household run cut at the turn limit ends in the success's state with done=True: with
    `done` compared, the routine move into it looked like a departure shared by every failed run."""
    cabinet, counter, fridge = 0, 1, 2  # receptacles; objects: apple 1 (the target), tomato 1 (a decoy)

    def st(turn, loc, seen, obj_loc=(counter, counter), obj_flags=(0, 0), **kw):
        return State(seed=7, turn=turn, loc=loc, obj_loc=obj_loc, obj_flags=obj_flags, opened=0, locked=0,
                     seen=seen, **kw)

    apple = (HAND, counter)
    succ = make_traj(["go to cabinet 1", "go to countertop 2", "take apple 1 from countertop 2",
                      "go to fridge 1", "put apple 1 in/on fridge 1"],
                     [st(0, ROOM, 0), st(1, cabinet, 0b001), st(2, counter, 0b011),
                      st(3, counter, 0b011, apple), st(4, fridge, 0b111, apple),
                      st(5, fridge, 0b111, (fridge, counter), (COMMITTED, 0), done=True, success=True)],
                     success=True)
    # max_turns 5: two runs waste four turns, then take the success's first move and are cut there
    cut = [make_traj([bad] * 4 + ["go to cabinet 1"],
                     [st(t, ROOM, 0) for t in range(5)] + [st(5, cabinet, 0b001, done=True)],
                     valid=[False] * 4 + [True]) for bad in ("jump", "dance")]
    # one run reaches the success's state before turn 2 by another route, then takes the decoy
    tomato = (counter, HAND)
    decoy = make_traj(["go to countertop 2", "go to cabinet 1", "go to countertop 2",
                       "take tomato 1 from countertop 2", "go to fridge 1"],
                      [st(0, ROOM, 0), st(1, counter, 0b010), st(2, cabinet, 0b011), st(3, counter, 0b011),
                       st(4, counter, 0b011, tomato), st(5, fridge, 0b111, tomato, done=True)])
    assert cut[0].snapshots[-1].done and not succ.snapshots[1].done
    for choice in ("earliest", "shared", "latest"):
        p = propose(succ, cut + [decoy], choice=choice)
        assert p.ok and p.segment == (2, 2) and "take tomato 1" in p.rationale, p.rationale
    # comparing `done`, the cut runs' last move differs from the success's: a false departure at turn 0
    # shared by all three failed runs, which the earliest and the most-shared choice take
    for choice in ("earliest", "shared"):
        p = propose(succ, cut + [decoy], ignore_fields=("turn", "note"), choice=choice)
        assert p.segment == (0, 0) and "shared by 3 failed runs" in p.rationale


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
