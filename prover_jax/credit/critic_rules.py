"""The `rules` turn critic of the `critic` credit method: privileged labels of the pivotal moves.

On any env with the `pivot` hook (`Env.pivot`; household: `envs.household.pivots`):

    label_t = pivot(s_t, a_t).label   (+1 the right choice where a wrong one was open, -1 the mistake)
            = 0                        for a routine move, an inadmissible action, or a turn whose
                                       state was not recorded (counted as dropped)

(s_t = snapshots[t], a_t = turns[t].action). Cheap (one rule lookup per turn, no search), so it labels
long episodes the exact-DP `oracle` critic cannot: the positive control of the credit-hard setting
(`configs/credit_hard.py`), an upper bound for methods that must find the pivots themselves.
"""

from __future__ import annotations

import logging

from prover_jax.credit.critic import NEUTRAL, TurnCritic, register_critic
from prover_jax.envs.base import lacks_hook, make, no_pivot_rules, pivot_labels
from prover_jax.rollout.trajectory import Trajectory

log = logging.getLogger(__name__)


@register_critic("rules")
class RulesCritic(TurnCritic):
    """Labels from the env's pivot rules (see the module docstring)."""

    @classmethod
    def from_section(cls, section, env_name, env_kwargs=None, workdir=None, **kwargs) -> "RulesCritic":
        return cls(env_name, env_kwargs, **kwargs)

    def __init__(self, env_name: str, env_kwargs: dict | None = None):
        if lacks_hook(env_name, "pivot"):
            raise ValueError(no_pivot_rules(env_name, "credit.critic.name='rules'"))
        self.env = make(env_name, **dict(env_kwargs or {}))
        super().__init__()

    def _label_all(self, trajs: list[Trajectory]) -> list[list[int]]:
        out = []
        for traj in trajs:
            try:
                labels = [NEUTRAL if p is None else p[0] for p in pivot_labels(self.env, traj)]
            except Exception as e:  # noqa: BLE001  (a critic never stops training)
                log.warning("rules critic: trajectory %s of task %s dropped: %s: %s", traj.uid, traj.seed,
                            type(e).__name__, e)
                labels = [NEUTRAL] * traj.num_turns
                self.dropped += traj.num_turns
            out.append(labels)
        return out

    def close(self) -> None:
        self.env.close()
