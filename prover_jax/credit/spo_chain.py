"""`spo_chain`: segment-level advantages from Monte Carlo values at cut points (SPO-chain, adapted to
turns).

For each group eligible under ProVer's rule (credit.band_low < p < credit.band_high), one trajectory
(its shortest success; `trajectories="all"`: every trajectory of the group) is cut every m =
`interval` turns:

    cuts c_0 = 0 < c_1 = m < c_2 = 2m < ... < T          (T = its number of turns)
    V(c_0) = mean_g(R)                    (the group's G episodes are samples from the start state)
    V(c_j) = mean success of K continuations from the start of turn c_j (env + history restored)
    segment j = turns [c_j, c_{j+1}):     A = V(c_{j+1}) - V(c_j);   last segment: R - V(c_last)

The segment advantages sum to R - mean_g(R), GRPO's advantage, redistributed along the trajectory
(credit.std_scope divides both by the std of the group's or the batch's rewards + 1e-6).
Every other trajectory keeps A^GRPO. Continuations are not trained on.

As an `OverlapCredit`: the plan of a group is its chosen trajectories and their cuts, its one round
the K continuations of every cut.
"""

from __future__ import annotations

from typing import Any, Sequence

import ml_collections
import numpy as np

from prover_jax.credit.base import EXTRA_TOKENS, CreditOutput, Figure, Merge, Needs, register_credit
from prover_jax.credit.common import (grpo_advantages, new_policy_tokens, outcome_scales, rewards, shortest_success,
                                      std_scope)
from prover_jax.credit.overlap import OverlapCredit, Start
from prover_jax.rollout.trajectory import Trajectory

CHOICES = ("one", "all")
METRICS = ("spo/eligible_groups", "spo/trajectories", "spo/cuts", "spo/value_mean", "spo/segment_adv_abs",
           "spo/segment_tokens")
MERGE = Merge(sums=("spo/eligible_groups", "spo/trajectories", "spo/cuts", "spo/segment_tokens"),
              means=(("spo/value_mean", "spo/cuts"), ("spo/segment_adv_abs", "spo/segment_tokens")))
HEADLINE = (Figure("cut points", "cuts", "cuts", "spo/cuts"),)


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
class SPOChain(OverlapCredit):
    """Needs `verifier` (K continuations per cut point)."""

    headline = HEADLINE

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
    def default_config(cls) -> ml_collections.ConfigDict:
        """config.credit.spo_chain."""
        s = ml_collections.ConfigDict()
        s.interval = 2  # m: turns per segment
        s.k = 9  # continuations per cut point (SPO's default)
        s.trajectories = "one"  # one (shortest success of an eligible group) | all
        return s

    @classmethod
    def needs(cls, config: Any, groups: int, group_size: int) -> Needs:
        k = int(config.spo_chain.k)
        return Needs(verifier=True, verify_envs=max(groups * group_size, k), metrics=METRICS, headline=cls.headline,
                     contexts=True, merge=MERGE, several_turns=True)

    def picks_success(self) -> bool:
        return self.config.spo_chain.trajectories == "one"

    def continues(self, trajectory: Trajectory) -> bool:
        return trajectory.success or self.config.spo_chain.trajectories == "all"

    def plan(self, group: Sequence[Trajectory]) -> list[tuple[int, list[int]]]:
        """[(i, cuts)]: the chosen trajectories of the group and their cut points."""
        s = self.config.spo_chain
        picks = [shortest_success(group)] if s.trajectories == "one" else range(len(group))
        return [(i, cut_points(group[i].num_turns, s.interval)) for i in picks]

    def starts(self, group: Sequence[Trajectory], plan: list[tuple[int, list[int]]], runs) -> list[Start]:
        """K continuations from every cut of every chosen trajectory; one round."""
        k = self.config.spo_chain.k
        return [] if runs else [(group[i], c, k) for i, cuts in plan for c in cuts]

    def most_envs(self) -> int:
        return int(self.config.spo_chain.k)

    def combine(self, groups: Sequence[Sequence[Trajectory]], plans: dict[int, list[tuple[int, list[int]]]],
                runs: dict[int, list[Sequence[Any]]], cancelled: int = 0,
                cancelled_tokens: int = 0) -> CreditOutput:
        """Segment advantages on the chosen trajectories (scaled as their group's outcome term)."""
        advantages = grpo_advantages(groups, self.config)
        scales = outcome_scales([rewards(group) for group in groups], std_scope(self.config))
        extra, values, seg_abs, n_traj, n_cuts = 0, [], [], 0, 0
        for g in sorted(plans):
            conts = iter(runs[g])
            for i, cuts in plans[g]:
                traj = groups[g][i]
                cs_cuts = [next(conts) for _ in cuts]
                v = [float(np.mean([c.success for c in cs])) for cs in cs_cuts]
                extra += sum(new_policy_tokens(c, traj) for cs in cs_cuts for c in cs)
                values += v
                adv = segment_advantages(traj, cuts, v, float(np.mean(rewards(groups[g]))))
                adv = adv / np.float32(scales[g])  # the same scale as the group's other advantages
                advantages[g][i] = adv
                seg_abs += list(np.abs(adv[np.asarray(traj.policy_mask, bool)]))
                n_traj, n_cuts = n_traj + 1, n_cuts + len(cuts)
        metrics = {"spo/eligible_groups": len(plans), "spo/trajectories": n_traj,
                   "spo/cuts": n_cuts, "spo/value_mean": float(np.mean(values)) if values else 0.0,
                   "spo/segment_adv_abs": float(np.mean(seg_abs)) if seg_abs else 0.0,
                   "spo/segment_tokens": len(seg_abs), EXTRA_TOKENS: extra}
        return CreditOutput(advantages, metrics)
