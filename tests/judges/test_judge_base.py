"""The shared segment validator, rendering, the propose() safety net, the registry and the random judge."""

import collections

import numpy as np
import pytest

from prover_jax.judges import (INVALID_ACTION, JUDGE_ERROR, NO_CANDIDATE, OK, OUT_OF_BOUNDS, SCHEMA,
                               TERMINAL, TOO_LONG, Judge, Proposal, make_judge, names, register,
                               render_trajectory, summarize, valid_segments, validate_segment)
from prover_jax.rollout.trajectory import Trajectory, Turn


def make_traj(actions, valid=None, success=True, obs=None):
    valid = valid or [True] * len(actions)
    obs = obs or [f"observation after {a}" for a in actions]
    turns = [Turn(0, 0, f"<action>{a}</action>" if v else f"garbled {a}", a if v else None, v, o, 0.0, "stop")
             for a, v, o in zip(actions, valid, obs)]
    return Trajectory(env="toy", seed=0, uid=0, task="Your task is to: test.", turns=turns,
                      snapshots=list(range(len(actions) + 1)), success=success, score=float(success),
                      termination="done")


T6 = make_traj(list("abcdef"), valid=[True, True, True, False, True, True])


@pytest.mark.parametrize("l, r, want", [
    (0, 0, None), (1, 2, None), (4, 4, None), (0, 2, None), (np.int64(1), np.int32(2), None),
    ("1", 2, SCHEMA), (1.0, 2, SCHEMA), (True, 2, SCHEMA), (None, 1, SCHEMA),
    (-1, 0, OUT_OF_BOUNDS), (2, 1, OUT_OF_BOUNDS), (4, 6, OUT_OF_BOUNDS),
    (0, 4, TOO_LONG), (5, 5, TERMINAL), (4, 5, TERMINAL), (2, 3, INVALID_ACTION), (3, 3, INVALID_ACTION),
])
def test_validate_segment(l, r, want):
    assert validate_segment(T6, l, r, max_segment_turns=4 if want != TOO_LONG else 3) == want


def test_valid_segments_match_the_validator():
    for traj in (T6, make_traj(list("ab")), make_traj(list("a")), make_traj(list("abcdefghij"))):
        for k in (1, 2, 4):
            want = [(l, r) for l in range(traj.num_turns) for r in range(traj.num_turns)
                    if validate_segment(traj, l, r, k) is None]
            assert valid_segments(traj, k) == want


def test_random_judge_is_uniform_over_valid_segments():
    judge = make_judge("random")
    rng = np.random.default_rng(0)
    counts = collections.Counter(judge.propose(T6, [], max_segment_turns=2, rng=rng).segment for _ in range(2000))
    want = valid_segments(T6, 2)
    assert sorted(counts) == want == [(0, 0), (0, 1), (1, 1), (1, 2), (2, 2), (4, 4)]
    assert min(counts.values()) > 2000 / len(want) * 0.8 and max(counts.values()) < 2000 / len(want) * 1.2
    p = judge.propose(make_traj(["a"]), [], max_segment_turns=4, rng=rng)
    assert p.reason == NO_CANDIDATE and p.segment is None


def test_render_trajectory():
    full = render_trajectory(T6)
    assert "Task: Your task is to: test." in full and "SUCCESS after 6 turns" in full
    assert "[turn 3] (INVALID) action: (no action; response: 'garbled d')" in full
    assert "observation after f" in full
    long = make_traj([f"go to place {i}" for i in range(40)], success=False,
                     obs=["You arrive. " + "x" * 300] * 40)
    short = render_trajectory(long, full=False, max_chars=1200)
    assert len(short) <= 1200 and short.startswith("Outcome: FAILURE after 40 turns")
    assert "t0: go to place 0" in short and "t39: go to place 39" in short and "turns omitted" in short
    assert "x" * 100 not in short  # observation snippets are short


class _Broken(Judge):
    def __init__(self, segment=None, exc=None):
        self.segment, self.exc = segment, exc

    def _propose(self, success, failures, *, max_segment_turns, rng):
        if self.exc:
            raise self.exc
        return Proposal(self.segment, OK, rationale="trust me")


def test_propose_never_raises_and_revalidates():
    p = _Broken(exc=RuntimeError("boom")).propose(T6, [], max_segment_turns=4)
    assert p.reason == JUDGE_ERROR and "boom" in p.rationale and p.segment is None and p.seconds >= 0
    p = _Broken(segment=(2, 3)).propose(T6, [], max_segment_turns=4)
    assert p.reason == INVALID_ACTION and p.segment is None and "rejected" in p.rationale
    p = _Broken(segment="nonsense").propose(T6, [], max_segment_turns=4)
    assert p.reason == SCHEMA
    p = _Broken(segment=(np.int64(1), np.int64(2))).propose(T6, [], max_segment_turns=4)
    assert p.ok and p.segment == (1, 2) and type(p.segment[0]) is int


def test_registry():
    assert {"random", "contrastive", "openai"} <= set(names())
    with pytest.raises(ValueError, match="unknown judge"):
        make_judge("nope")

    @register("test_fixed")
    class Fixed(_Broken):
        @classmethod
        def from_config(cls, section, workdir=None, **kw):
            return cls(segment=tuple(section["segment"]))

    judge = make_judge("test_fixed", {"segment": [0, 1]})
    assert judge.name == "test_fixed" and judge.propose(T6, [], max_segment_turns=4).segment == (0, 1)
    stats = summarize([judge.propose(T6, [], max_segment_turns=4), _Broken(segment=(5, 5)).propose(
        T6, [], max_segment_turns=4), Proposal(None, "budget", calls=0)])
    assert stats["proposals"] == 3 and stats["valid"] == 1 and stats["drop/terminal"] == 1
    assert stats["drop/budget"] == 1 and stats["mean_segment_turns"] == 2.0
