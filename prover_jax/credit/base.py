"""Credit assignment methods: named estimators with one signature.

    method = make_credit("prover", config.credit, judge=judge, verifier=verifier)
    out = method.assign(groups)          # groups[g] = the G trajectories of task g
    out.advantages[g][i]                 # float32 [len(tokens)] per-token advantage of trajectory i
    out.metrics                          # e.g. prover/accepted, judge/cost_usd

Advantages are zero off the policy tokens. A new method registers itself with `@register_credit`
and needs no change to the training loop.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Callable, Protocol, Sequence

import numpy as np

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
    advantages: list[list[np.ndarray]]
    metrics: dict[str, float]


class CreditMethod(abc.ABC):
    """An estimator of per-token advantages for a batch of task groups."""

    def __init__(self, config: Any, **deps):
        self.config = config

    @abc.abstractmethod
    def assign(self, groups: Sequence[Sequence[Trajectory]]) -> CreditOutput: ...


_REGISTRY: dict[str, Callable[..., CreditMethod]] = {}


def register_credit(name: str):
    def deco(cls):
        if name in _REGISTRY:
            raise ValueError(f"credit method {name!r} registered twice")
        _REGISTRY[name] = cls
        return cls
    return deco


def make_credit(name: str, config: Any, **deps) -> CreditMethod:
    from prover_jax import credit as _credit  # noqa: F401  (registers the built-in methods)
    if name not in _REGISTRY:
        raise ValueError(f"unknown credit method {name!r}; known: {sorted(_REGISTRY)}")
    return _REGISTRY[name](config, **deps)


def credit_names() -> list[str]:
    from prover_jax import credit as _credit  # noqa: F401
    return sorted(_REGISTRY)


def rewards(group: Sequence[Trajectory]) -> np.ndarray:
    """R_i in {0, 1}: terminal success of each trajectory."""
    return np.asarray([float(t.success) for t in group], np.float32)


def group_advantages(r_G: np.ndarray, use_std: bool) -> np.ndarray:
    """A_i = R_i - mean(R) (Dr.GRPO, ProVer's setting), or / (std(R) + 1e-6) with use_std."""
    a = r_G - r_G.mean()
    return a / (r_G.std() + 1e-6) if use_std else a


def broadcast(traj: Trajectory, value: float) -> np.ndarray:
    """value on every policy token of `traj`, 0 elsewhere."""
    return np.where(np.asarray(traj.policy_mask, bool), np.float32(value), np.float32(0.0))
