"""DAPO's overlong handling, after credit and before the update (host arrays).

    adv = overlong_shaping(groups, adv, max_length, buffer, coef)  # per-episode length penalty, group-centred
    keep = trained_episodes(trajs, mask_truncated=True)            # False: an episode cut at the context limit

`overlong_shaping` adds p_i - mean_g(p) to every policy token of episode i of group g, p_i =
`overlong_penalty(len_i)` with len_i the episode's tokens and Lmax = rollout.max_target_length (the
limit that cuts an episode). At credit.std_scope none this equals adding p_i to the reward before
GRPO's centring (DAPO's soft overlong punishment); the term is not rescaled by a std scope.
An episode whose `trained_episodes` entry is False stays in the batch as context but leaves the
loss mask: no loss, no gradient, not counted in the loss's N and S (DAPO's overlong filtering).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from prover_jax.credit.common import broadcast
from prover_jax.rollout.trajectory import CONTEXT_LIMIT, Trajectory


def overlong_penalty(lengths, max_length: int, buffer: int, coef: float) -> np.ndarray:
    """DAPO's soft overlong punishment per episode of `lengths` tokens (Lmax = max_length):
        0                                                  if len <= Lmax - buffer
        -coef min(len - (Lmax - buffer), buffer) / buffer  otherwise (-coef from Lmax on)
    Zeros when buffer <= 0 or coef = 0."""
    lengths = np.asarray(lengths, np.float64)
    if buffer <= 0 or not coef:
        return np.zeros_like(lengths)
    excess = lengths - (max_length - buffer)
    return np.where(excess > 0, -coef * np.minimum(excess, buffer) / buffer, 0.0)


def overlong_shaping(groups: Sequence[Sequence[Trajectory]], advantages: Sequence[Sequence[np.ndarray]],
                     max_length: int, buffer: int, coef: float) -> tuple[list[list[np.ndarray]], float]:
    """(advantages with p_i - mean_g(p) added on each episode's policy tokens, mean p over the
    episodes); the advantages come back unchanged (the same arrays) when the penalty is off."""
    if buffer <= 0 or not coef:
        return [list(a) for a in advantages], 0.0
    out, every = [], []
    for group, ads in zip(groups, advantages, strict=True):
        p = overlong_penalty([len(t.tokens) for t in group], max_length, buffer, coef)
        every += list(p)
        out.append([a + broadcast(t, pi - p.mean()) for t, a, pi in zip(group, ads, p, strict=True)])
    return out, float(np.mean(every)) if every else 0.0


def truncated(traj: Trajectory) -> bool:
    """The episode was cut by the context limit (rollout.max_target_length), not ended by the env."""
    return traj.termination == CONTEXT_LIMIT


def trained_episodes(trajs: Sequence[Trajectory], mask_truncated: bool) -> list[bool]:
    """Which episodes the loss sees: all, or (mask_truncated) all but those cut by the context limit."""
    return [not (mask_truncated and truncated(t)) for t in trajs]
