"""`spo_chain`: segment-level advantages from Monte Carlo values at cut points (SPO-chain, adapted to
turns).

For each group eligible under ProVer's rule (prover band), one trajectory (its shortest success;
`trajectories="all"`: every trajectory of the group) is cut every m = `interval` turns:

    cuts c_0 = 0 < c_1 = m < c_2 = 2m < ... < T          (T = its number of turns)
    V(c_0) = mean_g(R)                    (the group's G episodes are samples from the start state)
    V(c_j) = mean success of K continuations from the start of turn c_j (env + history restored)
    segment j = turns [c_j, c_{j+1}):     A = V(c_{j+1}) - V(c_j);   last segment: R - V(c_last)

The segment advantages sum to R - mean_g(R), GRPO's advantage, redistributed along the trajectory
(credit.std_scope divides both by the std of the group's or the batch's rewards + 1e-6).
Every other trajectory keeps A^GRPO. Continuations are not trained on.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from prover_jax.credit.base import (EXTRA_TOKENS, CreditMethod, CreditOutput, Needs, broadcast, outcome_advantages,
                                    outcome_scales, register_credit, rewards, std_scope)
from prover_jax.credit.prover import eligible, new_policy_tokens, shortest_success
from prover_jax.rollout.trajectory import Trajectory

CHOICES = ("one", "all")
METRICS = ("spo/eligible_groups", "spo/trajectories", "spo/cuts", "spo/value_mean", "spo/segment_adv_abs")


def cut_points(num_turns: int, interval: int) -> list[int]:
    """c_1 .. c_last: every `interval` turns, strictly inside the trajectory."""
    return list(range(interval, num_turns, interval))


def segment_advantages(traj: Trajectory, cuts: Sequence[int], values: Sequence[float], v0: float) -> np.ndarray:
    """Per-token advantages of `traj`: V(c_{j+1}) - V(c_j) on turns [c_j, c_{j+1}), R - V(c_last) last."""
    bounds = [0] + list(cuts) + [traj.num_turns]
    v = [v0] + list(values) + [float(traj.success)]
    out = np.zeros(len(traj.tokens), np.float32)
    mask = np.asarray(traj.policy_mask, bool)
    for j in range(len(bounds) - 1):
        for turn in traj.turns[bounds[j]:bounds[j + 1]]:
            out[turn.start:turn.end] = v[j + 1] - v[j]
    return np.where(mask, out, np.float32(0.0))


@register_credit("spo_chain")
class SPOChain(CreditMethod):
    """Needs `verifier` (K continuations per cut point)."""

    def __init__(self, config: Any, verifier=None, seed: int = 0, **_):
        super().__init__(config)
        s = config.spo_chain
        if s.trajectories not in CHOICES:
            raise ValueError(f"credit.spo_chain.trajectories must be one of {CHOICES}, got {s.trajectories!r}")
        if s.interval < 1 or s.k < 1:
            raise ValueError(f"credit.spo_chain.interval and k must be >= 1, got {s.interval} and {s.k}")
        if verifier is None:
            raise ValueError("the spo_chain credit method needs a verifier")
        self.verifier = verifier

    @classmethod
    def needs(cls, config: Any, groups: int, group_size: int) -> Needs:
        k = int(config.spo_chain.k)
        return Needs(verifier=True, verify_envs=max(groups * group_size, k), metrics=METRICS)

    def assign(self, groups: Sequence[Sequence[Trajectory]]) -> CreditOutput:
        p, s = self.config.prover, self.config.spo_chain
        advantages, chosen = [], []  # chosen: (g, i, cuts)
        r_groups, scope = [rewards(group) for group in groups], std_scope(self.config)
        scales = outcome_scales(r_groups, scope)
        for g, (group, r, adv) in enumerate(zip(groups, r_groups, outcome_advantages(r_groups, scope))):
            advantages.append([broadcast(t, a) for t, a in zip(group, adv)])
            if not eligible(r, p.band_low, p.band_high):
                continue
            picks = [shortest_success(group)] if s.trajectories == "one" else range(len(group))
            chosen += [(g, i, cut_points(group[i].num_turns, s.interval)) for i in picks]
        starts = [(groups[g][i], c, s.k) for g, i, cuts in chosen for c in cuts]
        runs = iter(self.verifier.run(starts) if starts else [])
        extra, values, seg_abs = 0, [], []
        for g, i, cuts in chosen:
            traj = groups[g][i]
            conts = [next(runs) for _ in cuts]
            v = [float(np.mean([c.success for c in cs])) for cs in conts]
            extra += sum(new_policy_tokens(c, traj) for cs in conts for c in cs)
            values += v
            r = rewards(groups[g])
            adv = segment_advantages(traj, cuts, v, float(np.mean(r)))
            adv = adv / np.float32(scales[g])  # the same scale as the group's other advantages
            advantages[g][i] = adv
            seg_abs += list(np.abs(adv[np.asarray(traj.policy_mask, bool)]))
        metrics = {"spo/eligible_groups": len({g for g, _, _ in chosen}), "spo/trajectories": len(chosen),
                   "spo/cuts": len(starts), "spo/value_mean": float(np.mean(values)) if values else 0.0,
                   "spo/segment_adv_abs": float(np.mean(seg_abs)) if seg_abs else 0.0, EXTRA_TOKENS: extra}
        return CreditOutput(advantages, metrics)
