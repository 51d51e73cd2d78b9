"""`budget_grpo`: GRPO given ProVer's extra sampling budget as more episodes (the paper's
Budget-Matched GRPO baseline).

For each group eligible under ProVer's rule (credit.band_low < p < credit.band_high), ProVer's
selection runs without its credit: the shortest success, the judge's segment (l, r), validated.
ProVer would then sample K continuations from turn l and K from turn r + 1, so the group's budget is

    B = K * (tail(l) + tail(r + 1)),   tail(b) = mean over the group's episodes that reached turn b
                                                 of the policy tokens they sampled from turn b on

(a dropped proposal costs ProVer nothing: B = 0). Fresh episodes of the group's task (turn-0
continuations: same task, new sampling seeds) are played in up to MAX_ROUNDS rounds, each sized by
what the earlier ones spent, until their sampled tokens reach B to within half an episode (at most
`max_extra` episodes, default 2K). The extra episodes are trained on and credit stays
trajectory-level over the enlarged group:

    A_i = R_i - mean(R over the G + n episodes)      [/ (std + 1e-6): credit.std_scope]

As an `OverlapCredit`: the plan of a group is its proposal and budget; each round is one start.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import ml_collections
import numpy as np

from prover_jax.credit.base import EXTRA_TOKENS, JUDGE_SUMS, CreditOutput, Figure, Merge, Needs, register_credit
from prover_jax.credit.common import grpo_advantages, select_segment
from prover_jax.credit.overlap import OverlapCredit, Start
from prover_jax.judges.base import TIMEOUT, Proposal
from prover_jax.rollout.trajectory import Trajectory

MAX_ROUNDS = 3
METRICS = ("budget/eligible_groups", "budget/extra_episodes", "budget/budget_tokens") + JUDGE_SUMS
MERGE = Merge(sums=("budget/eligible_groups", "budget/extra_episodes", "budget/budget_tokens") + JUDGE_SUMS)
HEADLINE = (Figure("extra episodes", "extra", "extra_episodes", "budget/extra_episodes"),)


def tail_tokens(group: Sequence[Trajectory], turn: int) -> float:
    """Mean policy tokens sampled from turn `turn` to the end, over the episodes that reached it."""
    tails = [sum(t.end - t.start for t in traj.turns[turn:]) for traj in group if traj.num_turns > turn]
    return float(np.mean(tails)) if tails else 0.0


def prover_budget(group: Sequence[Trajectory], segment: tuple[int, int] | None, k: int) -> float:
    """B: the tokens ProVer's 2K continuations around `segment` would sample (0 without a segment)."""
    if segment is None:
        return 0.0
    l, r = segment
    return k * (tail_tokens(group, l) + tail_tokens(group, r + 1))


@dataclasses.dataclass(frozen=True)
class Plan:
    """A group's proposal (its judge usage counted) and B, the tokens its fresh episodes may spend."""
    proposal: Any
    budget: float


@register_credit("budget_grpo")
class BudgetGRPO(OverlapCredit):
    """Needs `judge` (ProVer's selection) and `verifier` (plays the fresh episodes)."""

    headline = HEADLINE

    def __init__(self, config: Any, judge=None, verifier=None, seed: int = 0):
        super().__init__(config)
        if judge is None or verifier is None:
            raise ValueError("the budget_grpo credit method needs a judge and a verifier")
        self.judge, self.verifier, self.seed = judge, verifier, seed
        self.max_extra = int(config.budget_grpo.max_extra) or 2 * int(config.prover.k)
        if self.max_extra < 1:
            raise ValueError(f"credit.budget_grpo.max_extra must be >= 0, got {config.budget_grpo.max_extra}")

    @classmethod
    def default_config(cls) -> ml_collections.ConfigDict:
        """config.credit.budget_grpo."""
        s = ml_collections.ConfigDict()
        s.max_extra = 0  # most extra episodes per eligible group; 0 = 2 * prover.k
        return s

    @classmethod
    def needs(cls, config: Any, groups: int, group_size: int) -> Needs:
        most = int(config.budget_grpo.max_extra) or 2 * int(config.prover.k)
        return Needs(judge=True, verifier=True, verify_envs=min(groups * most, max(groups * group_size, most)),
                     extra_episodes=True, metrics=METRICS, headline=cls.headline, merge=MERGE)

    def begin_step(self) -> None:
        self.judge.begin_step()

    def plan(self, group: Sequence[Trajectory]) -> Plan:
        """ProVer's selection, priced: B of the judge's segment (0 for a dropped proposal)."""
        p = self.config.prover
        _, prop, reason = select_segment(self.judge, group, p, self.seed)
        return Plan(prop, prover_budget(group, prop.segment if reason == "ok" else None, p.k))

    def timed_out(self, group: Sequence[Trajectory], timeout_s: float) -> Plan:
        return Plan(Proposal(None, TIMEOUT, rationale=f"no answer within judge.timeout_s={timeout_s:g} s"), 0.0)

    def starts(self, group: Sequence[Trajectory], plan: Plan, runs) -> list[Start]:
        """Round j = len(runs) < MAX_ROUNDS: n fresh episodes, continuations from turn 0 of episode
        j mod G (so every episode has its own seed), n = ceil((B - spent) / tokens per episode - 1/2)
        capped by max_extra; none once n <= 0."""
        spent, played = sum(t.num_policy_tokens for r in runs for t in r), sum(len(r) for r in runs)
        if plan.budget <= 0 or len(runs) >= MAX_ROUNDS:
            return []
        per_episode = max(float(np.mean([t.num_policy_tokens for t in group])), 1.0)
        n = min(math.ceil((plan.budget - spent) / per_episode - 0.5), self.max_extra - played)
        return [(group[len(runs) % len(group)], 0, n)] if n > 0 else []

    def most_envs(self) -> int:
        return self.max_extra

    def serial_batches(self, plans: dict[int, Plan]) -> list[list[int]]:
        """One group at a time: its rounds, then the next group's."""
        return [[g] for g in sorted(plans)]

    def combine(self, groups: Sequence[Sequence[Trajectory]], plans: dict[int, Plan],
                runs: dict[int, list[Sequence[Trajectory]]], cancelled: int = 0,
                cancelled_tokens: int = 0) -> CreditOutput:
        """The enlarged groups (played + fresh episodes) and their trajectory-level advantages."""
        out_groups = []
        n_elig = n_extra = spent = budget_total = 0.0
        judge = dict.fromkeys(JUDGE_SUMS, 0.0)
        for g, group in enumerate(groups):
            group = list(group)
            if g in plans:
                plan, extra = plans[g], [t for r in runs[g] for t in r]
                for key in JUDGE_SUMS:  # judge/calls -> proposal.calls, ...
                    judge[key] += getattr(plan.proposal, key.split("/")[1])
                n_elig, n_extra, budget_total = n_elig + 1, n_extra + len(extra), budget_total + plan.budget
                spent += sum(t.num_policy_tokens for t in extra)
                group = group + extra
            out_groups.append(group)
        metrics = {"budget/eligible_groups": n_elig, "budget/extra_episodes": n_extra,
                   "budget/budget_tokens": budget_total, EXTRA_TOKENS: spent, **judge}
        return CreditOutput(grpo_advantages(out_groups, self.config), metrics, groups=out_groups)
