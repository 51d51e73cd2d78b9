"""Hand-built trajectories and a judge with a fixed answer, for the credit methods' tests."""

from __future__ import annotations

import numpy as np

from prover_jax.judges.base import Proposal
from prover_jax.rollout.trajectory import DONE, Trajectory, Turn
from prover_jax.training.config import default_config


def fake_traj(num_turns, success, uid=0, valid=None, obs_len=3, act_len=2):
    """Prompt of 4 tokens, then per turn act_len policy tokens and obs_len observation tokens."""
    t = Trajectory(env="household", seed=0, uid=uid, task="task")
    t.append(range(4), policy=False)
    for k in range(num_turns):
        start = len(t.tokens)
        t.append([10 + k] * act_len, policy=True, logprobs=[-0.5] * act_len)
        ok = True if valid is None else valid[k]
        t.turns.append(Turn(start, start + act_len, f"a{k}", f"a{k}", ok, "obs", 0.0, "stop"))
        if k < num_turns - 1:
            t.append([1] * obs_len, policy=False)
    t.snapshots = [None] * (num_turns + 1)
    t.success, t.score, t.termination = success, float(success), "done"
    return t


class FixedJudge:
    """Proposes `segment` (or nothing, with `reason`) for every group; `seen`: (success uid, failure uids)."""

    def __init__(self, segment, reason="ok"):
        self.segment, self.reason, self.seen = segment, reason, []

    def begin_step(self):
        pass

    def propose(self, success, failures, *, max_segment_turns, rng):
        self.seen.append((success.uid, [f.uid for f in failures]))
        return Proposal(segment=self.segment, reason=self.reason, calls=1, cost_usd=0.01, input_tokens=100,
                        output_tokens=10)


def credit_config(**prover):
    """The default credit section with credit.prover's fields overridden."""
    c = default_config().credit
    c.prover.update(prover)
    return c


def play_actions(env, seed, actions, uid=0):
    """A trajectory of `actions` from task `seed`, with its snapshots (and each state's obs, info)."""
    obs, info = env.reset(seed)
    traj = Trajectory(env=env.name, seed=seed, uid=uid, task=obs)
    traj.append([0], policy=False)
    traj.snapshots.append(env.snapshot())
    seen = [(obs, info)]
    for a in actions:
        start = len(traj.tokens)
        traj.append([7], policy=True)
        obs, _, done, info = env.step(a)
        traj.turns.append(Turn(start, start + 1, a, a, info["valid"], obs, 0.0, "stop"))
        traj.snapshots.append(env.snapshot())
        seen.append((obs, info))
        traj.append([1], policy=False)
        if done:
            traj.success, traj.termination = bool(info["success"]), DONE
            break
    return traj, seen


def nan_advantages(assign):
    """A credit method's `assign` whose advantages come back all NaN: the update is non-finite."""
    def nan_assign(groups):
        out = assign(groups)
        out.advantages = [[a * np.nan for a in g] for g in out.advantages]
        return out

    return nan_assign


def signed_advantages(assign):
    """`assign` with +1 / -1 added to alternate episodes' advantages: the update has a direction whatever
    the outcomes (a random policy fails everywhere)."""
    def signed_assign(groups):
        out = assign(groups)
        out.advantages = [[a + np.float32(1 - 2 * (i % 2)) for i, a in enumerate(g)] for g in out.advantages]
        return out

    return signed_assign
