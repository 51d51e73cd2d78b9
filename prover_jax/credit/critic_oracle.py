"""The `oracle` turn critic of the `critic` credit method: labels from exact dynamic programming.

On any env that offers a reference policy (`Env.reference_policy`; exact DP, `envs.testing.dp`):
  V(s) = success probability of the env's fixed reference policy from state s, and
      label_t = +1 if V(s_{t+1}) > V(s_t) + tol, -1 if V(s_{t+1}) < V(s_t) - tol, else 0
  (s_t = snapshots[t], the state before turn t). The built-in reference policies mix the family's
  expert with a uniform choice: pi(a|s) = (1 - eps) 1[a = expert(s)] + eps / |C(s)| 1[a in C(s)], C(s):
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

from prover_jax.credit.critic import BAD, GOOD, NEUTRAL, TurnCritic, register_critic
from prover_jax.envs.base import lacks_hook, make
from prover_jax.judges.base import config_get
from prover_jax.rollout.trajectory import Trajectory

log = logging.getLogger(__name__)


class _StatesSpent(Exception):
    """The step's DP state budget is spent."""


class _Mismatch(Exception):
    """Replaying a trajectory does not reproduce its snapshots."""


def no_policy(env_name: str) -> str:
    """The refusal of an env that offers no reference policy."""
    return (f"credit.critic.name='oracle' needs the env's reference policy (Env.reference_policy), whose "
            f"success probability it computes by exact dynamic programming; env {env_name!r} (env.name) offers "
            "none: use credit.critic.name='openai' for it")


@register_critic("oracle")
class OracleCritic(TurnCritic):
    """Labels from exact DP values under a reference policy (see the module docstring)."""

    @classmethod
    def from_section(cls, section, env_name, env_kwargs=None, workdir=None, **kwargs) -> "OracleCritic":
        """From config.credit.critic's oracle_eps, oracle_tol, oracle_max_states (unset: defaults)."""
        args = {"eps": config_get(section, "oracle_eps"), "tol": config_get(section, "oracle_tol"),
                "max_states": config_get(section, "oracle_max_states")}
        return cls(env_name, env_kwargs, **{k: v for k, v in args.items() if v is not None}, **kwargs)

    def __init__(self, env_name: str, env_kwargs: dict | None = None, *, eps: float = 0.1, tol: float = 1e-9,
                 max_states: int = 200_000):
        if lacks_hook(env_name, "reference_policy"):  # known without building the env
            raise ValueError(no_policy(env_name))
        if not 0.0 <= float(eps) <= 1.0 or float(tol) < 0:
            raise ValueError(f"credit.critic.oracle_eps must be in [0, 1] and oracle_tol >= 0, got {eps}, {tol}")
        self.env_name = env_name
        self.env = make(env_name, **dict(env_kwargs or {}))
        self.eps, self.tol, self.max_states = float(eps), float(tol), int(max_states)
        self.policy = self.env.reference_policy(self.eps)
        if self.policy is None:
            raise ValueError(no_policy(env_name))
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
