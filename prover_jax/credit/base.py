"""Credit assignment methods: named estimators with one signature.

    method = make_credit("prover", config.credit, judge=judge, verifier=verifier)
    out = method.assign(groups)          # groups[g] = the G trajectories of task g
    out.advantages[g][i]                 # float32 [len(tokens)] per-token advantage of trajectory i
    out.metrics                          # e.g. prover/accepted, judge/cost_usd
    out.groups                           # None, or the groups trained on (played + extra episodes)

Advantages are zero off the policy tokens. A new method registers itself with `@register_credit`,
declares what it needs (`CreditMethod.needs`: a judge, a verifier and its pool, a critic, extra
episodes in the batch, the metrics it reports) and needs no change to the training loop.

Every method reports `credit/extra_policy_tokens`: the policy tokens it had SAMPLED beyond the
step's own episodes (verification continuations, extra rollouts); inherited history is not counted.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Protocol, Sequence

import numpy as np

from prover_jax.registry import Registry
from prover_jax.rollout.trajectory import Trajectory


class Continuation(Protocol):
    """What verification needs from a continuation: its outcome and its cost."""

    success: bool
    num_policy_tokens: int


class Verifier(Protocol):
    """Runs K continuations from the start of turn `turn` of `traj` (env + history restored) for each
    (traj, turn, K) in `starts`, all in one batch; returns them per start."""

    def run(self, starts: Sequence[tuple[Trajectory, int, int]]) -> list[list[Continuation]]: ...


@dataclasses.dataclass
class CreditOutput:
    """advantages[g][i]: float32 [len(tokens)] for trajectory i of group g (of `groups` when set,
    else of the groups given to `assign`); groups: the enlarged groups when the method added
    episodes to train on (Needs.extra_episodes), else None."""

    advantages: list[list[np.ndarray]]
    metrics: dict[str, float]
    groups: list[list[Trajectory]] | None = None


EXTRA_TOKENS = "credit/extra_policy_tokens"
COMMON_METRICS = (EXTRA_TOKENS, "time/rollout_s", "time/credit_wait_s", "time/judge_s", "time/verify_s")


@dataclasses.dataclass(frozen=True)
class Needs:
    """What a credit method asks the trainer for (the trainer wires this and names no method).

    judge: a segment proposer, `judges.make_judge(config.judge.name, ...)`, passed as `judge=`.
    verifier: a `Verifier` over a pool of `verify_envs` envs per process, passed as `verifier=`
        (K continuations from a turn boundary; a start at turn 0 is a fresh episode of the task).
    critic: a turn critic (`credit.critic.make_critic`), passed as `critic=`.
    extra_episodes: `CreditOutput.groups` may hold more episodes than were played; they are trained on.
    metrics: the names the method reports; the trainer writes every one at every step (0 when the
        method had nothing to report), so all rows of a run, and all runs of a method, share keys.
    """

    judge: bool = False
    verifier: bool = False
    verify_envs: int = 0
    critic: bool = False
    extra_episodes: bool = False
    metrics: tuple[str, ...] = ()


class CreditMethod(abc.ABC):
    """An estimator of per-token advantages for a batch of task groups."""

    def __init__(self, config: Any, **deps):
        self.config = config

    @classmethod
    def needs(cls, config: Any, groups: int, group_size: int) -> Needs:
        """What this method needs for `groups` task groups of `group_size` episodes per process."""
        return Needs()

    @abc.abstractmethod
    def assign(self, groups: Sequence[Sequence[Trajectory]]) -> CreditOutput: ...


METHODS: Registry = Registry("credit method", field="credit.method", load="prover_jax.credit")
register_credit = METHODS.register


def credit_class(name: str) -> type[CreditMethod]:
    """The registered class of method `name` (its `needs` can be read before building it)."""
    return METHODS.get(name)


def make_credit(name: str, config: Any, **deps) -> CreditMethod:
    return credit_class(name)(config, **deps)


def credit_names() -> list[str]:
    return METHODS.names()


def rewards(group: Sequence[Trajectory]) -> np.ndarray:
    """R_i in {0, 1}: terminal success of each trajectory."""
    return np.asarray([float(t.success) for t in group], np.float32)


STD_SCOPES = ("none", "group", "batch")


def std_scope(config: Any) -> str:
    """`credit.std_scope` of a credit config (ConfigDict or dict): none | group | batch."""
    get = config.get if hasattr(config, "get") else (lambda k, d: getattr(config, k, d))
    scope = str(get("std_scope", "none"))
    if scope not in STD_SCOPES:
        raise ValueError(f"credit.std_scope: unknown scope {scope!r}; expected one of {', '.join(STD_SCOPES)}")
    return scope


def outcome_scales(r_groups: Sequence[np.ndarray], scope: str = "none") -> list[float]:
    """The divisor of each group's centred rewards: 1 (none), std_g(R) + 1e-6 (group), or the std of
    every reward of the batch pooled + 1e-6 (batch)."""
    r_groups = [np.asarray(r, np.float32) for r in r_groups]
    if scope == "none":
        return [1.0] * len(r_groups)
    if scope == "group":
        return [float(r.std()) + 1e-6 for r in r_groups]
    if scope == "batch":
        pooled = float(np.concatenate(r_groups).std()) if r_groups else 0.0
        return [pooled + 1e-6] * len(r_groups)
    raise ValueError(f"credit.std_scope: unknown scope {scope!r}; expected one of {', '.join(STD_SCOPES)}")


def outcome_advantages(r_groups: Sequence[np.ndarray], scope: str = "none") -> list[np.ndarray]:
    """A_i = (R_i - mean_g(R)) / s_g per group g: s_g = 1 (scope none: Dr.GRPO, ProVer's setting),
    std_g(R) + 1e-6 (group: classic GRPO) or std(R) + 1e-6 over the batch's rewards pooled (batch:
    group-centred, batch-scaled, so a group's few successes are not inflated as group scaling does)."""
    return [(np.asarray(r, np.float32) - np.asarray(r, np.float32).mean()) / np.float32(s)
            for r, s in zip(r_groups, outcome_scales(r_groups, scope))]


def group_outcome_advantages(groups: Sequence[Sequence[Trajectory]], config: Any) -> list[np.ndarray]:
    """`outcome_advantages` of the groups' terminal rewards at `config`'s std_scope."""
    return outcome_advantages([rewards(g) for g in groups], std_scope(config))


def broadcast(traj: Trajectory, value: float) -> np.ndarray:
    """value on every policy token of `traj`, 0 elsewhere."""
    return np.where(np.asarray(traj.policy_mask, bool), np.float32(value), np.float32(0.0))
