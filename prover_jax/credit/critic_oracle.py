"""The `oracle` turn critic of the `critic` credit method: labels from exact dynamic programming.

On the built-in families household, shop and searchqa (`envs.testing.dp`):
  V(s) = success probability of a fixed reference policy from state s, and
      label_t = +1 if V(s_{t+1}) > V(s_t) + tol, -1 if V(s_{t+1}) < V(s_t) - tol, else 0
  (s_t = snapshots[t], the state before turn t). The reference policy mixes the family's expert
  with a uniform choice: pi(a|s) = (1 - eps) 1[a = expert(s)] + eps / |C(s)| 1[a in C(s)], C(s):
    household  the admissible commands;
    shop       the clickable buttons; on the search page the expert's query only (free text);
    searchqa   a search for each hop entity not searched yet, the gold answer, a wrong answer.
  So a turn that does what the reference policy would do anyway with certainty (shop: the
  expert's search) is 0, and a turn spent without effect is bad only where the turn limit
  makes it cost value (raise oracle_tol to leave small changes unlabelled).
  V of a state where the episode ended is its outcome (the env's success flag; for the last
  state of a trajectory the rollout ended, its success). The observation/info at s_t are
  re-read by restoring s_{t-1} and replaying action t-1 (built-in envs are deterministic; a
  replay that does not reproduce s_t drops the trajectory: the critic's env kwargs differ
  from the rollout's). Values are memoised over the step's trajectories (begin_step clears);
  the DP may expand at most oracle_max_states states per step (a wall-time bound: exact DP
  is for small tasks, e.g. household with 4-5 receptacles and <= 12 turns), the turns whose
  values it could not reach are dropped.
"""

from __future__ import annotations

import logging
from typing import Callable

from prover_jax.credit.critic import BAD, GOOD, NEUTRAL, TurnCritic
from prover_jax.rollout.trajectory import Trajectory

log = logging.getLogger(__name__)

ORACLE_ENVS = ("household", "shop", "searchqa")


class _StatesSpent(Exception):
    """The step's DP state budget is spent."""


class _Mismatch(Exception):
    """Replaying a trajectory does not reproduce its snapshots."""


def _reference_policy(env_name: str, env, eps: float) -> Callable[[str, dict], dict[str, float]]:
    """The oracle's fixed reference policy for `env` (see the module docstring). The shop and searchqa
    policies read the expert from `env`, which `dp.success_probability` keeps in the evaluated state."""
    from prover_jax.envs.testing import mix

    if env_name == "household":
        def household(obs: str, info: dict) -> dict[str, float]:
            return mix(info.get("expert"), info.get("admissible") or [], eps)
        return household
    if env_name == "shop":
        def shop(obs: str, info: dict) -> dict[str, float]:
            clicks = [a for a in info.get("admissible") or [] if a != "search[...]"]
            return mix(env.expert_action(), clicks, eps)
        return shop
    if env_name == "searchqa":
        from prover_jax.envs.searchqa import exact_match

        def searchqa(obs: str, info: dict) -> dict[str, float]:
            q = env.question_record()
            done = set(env.state.queries)
            wrong = next(w for w in ("unknown", "no answer", "none of them") if not exact_match(w, q.golden_answers))
            cands = [f"<search>{h}</search>" for h in q.hops if h not in done]
            cands += [f"<answer>{q.golden_answers[0]}</answer>", f"<answer>{wrong}</answer>"]
            return mix(env.expert_action(), cands, eps)
        return searchqa
    raise ValueError(f"no reference policy for env {env_name!r}")


class OracleCritic(TurnCritic):
    """Labels from exact DP values under a reference policy (see the module docstring)."""

    def __init__(self, env_name: str, env_kwargs: dict | None = None, *, eps: float = 0.1, tol: float = 1e-9,
                 max_states: int = 200_000):
        if env_name not in ORACLE_ENVS:
            raise ValueError(f"credit.critic.name='oracle' needs exact dynamic programming over a built-in env "
                             f"({', '.join(ORACLE_ENVS)}); env {env_name!r} (env.name) has none: use "
                             "credit.critic.name='openai' for it")
        if not 0.0 <= float(eps) <= 1.0 or float(tol) < 0:
            raise ValueError(f"credit.critic.oracle_eps must be in [0, 1] and oracle_tol >= 0, got {eps}, {tol}")
        from prover_jax.envs import make

        self.env_name = env_name
        self.env = make(env_name, **dict(env_kwargs or {}))
        self.eps, self.tol, self.max_states = float(eps), float(tol), int(max_states)
        self.policy = _reference_policy(env_name, self.env, self.eps)
        self.memo: dict = {}
        self._warned = False
        super().__init__()

    def begin_step(self) -> None:
        super().begin_step()
        self.memo = {}

    def _counted(self, obs: str, info: dict) -> dict[str, float]:
        """The reference policy, called once per state the DP expands (counted against the budget)."""
        if 0 < self.max_states <= self.dp_states:
            raise _StatesSpent()
        self.dp_states += 1
        return self.policy(obs, info)

    def value(self, traj: Trajectory, t: int) -> float:
        """V(snapshots[t]) of `traj` under the reference policy."""
        env = self.env
        if t == 0:
            obs, info = env.reset(traj.seed)
            done = False
        else:
            env.restore(traj.snapshots[t - 1])
            obs, _, done, info = env.step(traj.turns[t - 1].action)
        snap = env.snapshot()
        if snap != traj.snapshots[t]:
            raise _Mismatch(f"replaying trajectory {traj.uid} (task {traj.seed}) up to turn {t} does not reproduce "
                            f"its snapshot: the critic's env ({self.env_name}) must be built with the rollout's "
                            "env kwargs")
        if done:
            return float(info["success"])
        if t == traj.num_turns and traj.finished:  # the rollout ended it (its turn or context limit)
            return float(traj.success)
        return self._dp(snap, obs, info)

    def _dp(self, snap, obs: str, info: dict) -> float:
        from prover_jax.envs.testing import dp

        return dp.success_probability(self.env, self._counted, snap, obs, info, _memo=self.memo)

    def values(self, traj: Trajectory) -> list[float]:
        """V(s_0), ..., V(s_T) as far as the state budget reaches (shorter when it is spent)."""
        if len(traj.snapshots) < traj.num_turns + 1:
            raise _Mismatch(f"trajectory {traj.uid} has {len(traj.snapshots)} snapshots for {traj.num_turns} turns")
        out = []
        for t in range(traj.num_turns + 1):
            try:
                out.append(self.value(traj, t))
            except _StatesSpent:
                if not self._warned:
                    log.warning("oracle critic: the step's DP budget of %d states (credit.critic.oracle_max_states) "
                                "is spent; the remaining turns are left unlabelled (exact DP is for small tasks)",
                                self.max_states)
                    self._warned = True
                break
        return out

    def _label_all(self, trajs: list[Trajectory]) -> list[list[int]]:
        out = []
        for traj in trajs:
            n = traj.num_turns
            labels = [NEUTRAL] * n
            try:
                v = self.values(traj)
            except Exception as e:  # noqa: BLE001  (a critic never stops training)
                log.warning("oracle critic: trajectory %s of task %s dropped: %s: %s", traj.uid, traj.seed,
                            type(e).__name__, e)
                v = []
            for t in range(max(len(v) - 1, 0)):
                d = v[t + 1] - v[t]
                labels[t] = GOOD if d > self.tol else BAD if d < -self.tol else NEUTRAL
            self.dropped += n - max(len(v) - 1, 0)
            out.append(labels)
        return out
