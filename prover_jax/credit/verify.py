"""Verifiers: run K continuations from turn boundaries of past trajectories.

RolloutVerifier: the policy itself, through `Rollout.continue_many` (env + token history restored;
    starts batched through the engine, in chunks of the pool's size).
PolicyVerifier: a stochastic policy over actions, pi(a | obs, info), played directly in an env
    (the ground-truth setting of exact dynamic programming: tests of unbiasedness, baselines).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np

from prover_jax.envs.base import Env
from prover_jax.envs.pool import EnvPool
from prover_jax.rollout.loop import Rollout
from prover_jax.rollout.trajectory import Trajectory


class RolloutVerifier:
    def __init__(self, rollout: Rollout, pool: EnvPool):
        self.rollout, self.pool = rollout, pool

    def run(self, starts: Sequence[tuple[Trajectory, int, int]]) -> list[list[Trajectory]]:
        out, chunk, used = [], [], 0
        for start in starts:
            if start[2] > self.pool.num_envs:
                raise ValueError(f"K={start[2]} continuations exceed the verification pool "
                                 f"({self.pool.num_envs} envs)")
            if used + start[2] > self.pool.num_envs:
                out += self.rollout.continue_many(chunk, self.pool)
                chunk, used = [], 0
            chunk.append(start)
            used += start[2]
        if chunk:
            out += self.rollout.continue_many(chunk, self.pool)
        return out


@dataclasses.dataclass
class Outcome:
    success: bool
    num_policy_tokens: int = 0
    turns: int = 0


class PolicyVerifier:
    """Continuations by `policy(obs, info) -> {action: prob}` in `env`, from trajectory snapshots.
    The observation/info at a snapshot are re-read by restoring the predecessor and replaying its
    action (built-in envs are deterministic), or taken from `observe` when the env has one."""

    def __init__(self, env: Env, policy: Callable[[str, dict], dict], seed: int = 0):
        self.env, self.policy = env, policy
        self.rng = np.random.default_rng(seed)

    def _state(self, traj: Trajectory, turn: int) -> tuple[str, dict]:
        env = self.env
        if turn == 0:
            return env.reset(traj.seed)
        env.restore(traj.snapshots[turn - 1])
        obs, _, _, info = env.step(traj.turns[turn - 1].action)
        return obs, info

    def run(self, starts):
        out = []
        for traj, turn, k in starts:
            obs0, info0 = self._state(traj, turn)
            runs = []
            for _ in range(k):
                self.env.restore(traj.snapshots[turn])
                obs, info, done, n = obs0, info0, False, 0
                while not done:
                    probs = self.policy(obs, info)
                    actions = list(probs)
                    a = actions[self.rng.choice(len(actions), p=np.asarray([probs[x] for x in actions]))]
                    obs, _, done, info = self.env.step(a)
                    n += 1
                runs.append(Outcome(bool(info["success"]), n, n))
            out.append(runs)
        return out
