"""The maths every credit method shares: rewards, GRPO's outcome advantages, the eligibility band,
the shortest success and the judge's segment of it, and the tokens a continuation sampled.

    r_G = rewards(group)                                  # R_i in {0, 1}
    adv = grpo_advantages(groups, config.credit)          # adv[g][i]: float32 [L], A^GRPO on policy tokens
    in_band(group, config.credit)                         # band_low < mean(R) < band_high
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from prover_jax.judges.base import validate_segment

if TYPE_CHECKING:
    from prover_jax.rollout.trajectory import Trajectory

STD_SCOPES = ("none", "group", "batch")


def rewards(group: Sequence[Trajectory]) -> np.ndarray:
    """R_i in {0, 1}: terminal success of each trajectory."""
    return np.asarray([float(t.success) for t in group], np.float32)


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


def grpo_advantages(groups: Sequence[Sequence[Trajectory]], config: Any) -> list[list[np.ndarray]]:
    """adv[g][i]: float32 [len(tokens)], A^GRPO_i (credit.std_scope) on every policy token of group g."""
    return [[broadcast(t, a) for t, a in zip(group, adv)]
            for group, adv in zip(groups, group_outcome_advantages(groups, config))]


def eligible(r_G: np.ndarray, low: float, high: float) -> bool:
    """low < mean(R) < high (the mean in float64: a float32 mean moves p = 1/10 above 0.1)."""
    p = float(np.mean(np.asarray(r_G, np.float64)))
    return low < p < high


def in_band(group: Sequence[Trajectory], config: Any) -> bool:
    """credit.band_low < the group's success rate < credit.band_high: the groups a method that spends
    extra samples looks at (ProVer, budget_grpo, spo_chain)."""
    return eligible(rewards(group), config.band_low, config.band_high)


def shortest_success(group: Sequence[Trajectory]) -> int:
    """Index of the successful trajectory with the fewest turns (ties: fewest tokens, then first)."""
    wins = [i for i, t in enumerate(group) if t.success]
    if not wins:
        raise ValueError("the group has no successful trajectory")
    return min(wins, key=lambda i: (group[i].num_turns, len(group[i].tokens), i))


def select_segment(judge, group: Sequence[Trajectory], p: Any, seed: int) -> tuple[int, Any, str]:
    """ProVer's selection (ProVer, budget_grpo): (i, proposal, reason) with i the shortest success, the
    judge's segment of it, validated (reason "ok" or why it was dropped); `p` is config.credit.prover."""
    i = shortest_success(group)
    failures = [t for t in group if not t.success]
    # the judge's randomness is keyed by the trajectory: the same on any number of hosts, in any order
    rng = np.random.default_rng([seed, group[i].uid & 0xFFFFFFFF])
    prop = judge.propose(group[i], failures, max_segment_turns=p.max_segment_turns, rng=rng)
    reason = prop.reason
    if prop.segment is not None and reason == "ok":
        l, rr = prop.segment
        reason = validate_segment(group[i], l, rr, p.max_segment_turns) or "ok"
    return i, prop, reason


NOTED_CONTINUATIONS = 4  # continuations per verified boundary kept in an episode's credit notes


def continuation_notes(conts: Sequence[Any]) -> list[dict]:
    """The first NOTED_CONTINUATIONS continuations as notes (`CreditOutput.notes`): each one's outcome
    and, for a rollout continuation, the actions it played itself (not the ones it inherited)."""
    out = []
    for c in list(conts)[:NOTED_CONTINUATIONS]:
        note = {"success": bool(c.success)}
        if isinstance(getattr(c, "turns", None), list):  # a Trajectory (an `Outcome` counts its turns only)
            start = c.parent[1] if c.parent is not None else 0
            note["actions"] = [t.action for t in c.turns[start:]]
        out.append(note)
    return out


def new_policy_tokens(continuation: Any, parent: Trajectory) -> int:
    """Policy tokens a continuation sampled itself: a rollout continuation inherits the parent's
    tokens before its start turn, which verification did not pay for (an `Outcome` has no parent)."""
    n = int(continuation.num_policy_tokens)
    if getattr(continuation, "parent", None) is None:
        return n
    start = continuation.parent[1]
    return n - sum(t.end - t.start for t in parent.turns[:start])
