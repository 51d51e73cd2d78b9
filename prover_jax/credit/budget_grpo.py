"""`budget_grpo`: GRPO given ProVer's extra sampling budget as more episodes (the paper's
Budget-Matched GRPO baseline).

For each group eligible under ProVer's rule (prover band), ProVer's selection runs without its
credit: the shortest success, the judge's segment (l, r), validated. ProVer would then sample K
continuations from turn l and K from turn r + 1, so the group's budget is

    B = K * (tail(l) + tail(r + 1)),   tail(b) = mean over the group's episodes that reached turn b
                                                 of the policy tokens they sampled from turn b on

(a dropped proposal costs ProVer nothing: B = 0). Fresh episodes of the group's task (turn-0
continuations: same task, new sampling seeds) are played, in rounds, until their sampled tokens
reach B to within half an episode (at most `max_extra` episodes, default 2K). The extra episodes are
trained on and credit stays trajectory-level over the enlarged group:

    A_i = R_i - mean(R over the G + n episodes)      [/ (std + 1e-6): credit.std_scope]
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from prover_jax.credit.base import (EXTRA_TOKENS, CreditMethod, CreditOutput, Needs, broadcast, group_outcome_advantages,
                                    register_credit, rewards)
from prover_jax.credit.prover import eligible, select_segment
from prover_jax.rollout.trajectory import Trajectory

MAX_ROUNDS = 3
METRICS = ("budget/eligible_groups", "budget/extra_episodes", "budget/budget_tokens", "judge/calls",
           "judge/cost_usd")


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


@register_credit("budget_grpo")
class BudgetGRPO(CreditMethod):
    """Needs `judge` (ProVer's selection) and `verifier` (plays the fresh episodes)."""

    def __init__(self, config: Any, judge=None, verifier=None, seed: int = 0):
        super().__init__(config)
        if judge is None or verifier is None:
            raise ValueError("the budget_grpo credit method needs a judge and a verifier")
        self.judge, self.verifier, self.seed = judge, verifier, seed
        self.max_extra = int(config.budget_grpo.max_extra) or 2 * int(config.prover.k)
        if self.max_extra < 1:
            raise ValueError(f"credit.budget_grpo.max_extra must be >= 0, got {config.budget_grpo.max_extra}")

    @classmethod
    def needs(cls, config: Any, groups: int, group_size: int) -> Needs:
        most = int(config.budget_grpo.max_extra) or 2 * int(config.prover.k)
        return Needs(judge=True, verifier=True, verify_envs=min(groups * most, max(groups * group_size, most)),
                     extra_episodes=True, metrics=METRICS)

    def _extra(self, group: Sequence[Trajectory], budget: float) -> list[Trajectory]:
        """Fresh episodes of the group's task until their sampled tokens reach `budget` - half an
        episode; each round's parents rotate over the group, so every episode has its own seed."""
        per_episode = max(float(np.mean([t.num_policy_tokens for t in group])), 1.0)
        extra: list[Trajectory] = []
        spent = 0.0
        for round_ in range(MAX_ROUNDS):
            n = min(math.ceil((budget - spent) / per_episode - 0.5), self.max_extra - len(extra))
            if n <= 0:
                break
            parent = group[round_ % len(group)]
            got = self.verifier.run([(parent, 0, n)])[0]
            extra += got
            spent += sum(t.num_policy_tokens for t in got)
        return extra

    def assign(self, groups: Sequence[Sequence[Trajectory]]) -> CreditOutput:
        p = self.config.prover
        if hasattr(self.judge, "begin_step"):
            self.judge.begin_step()
        out_groups = []
        n_elig = n_extra = spent = budget_total = calls = cost = 0.0
        for group in groups:
            group = list(group)
            if eligible(rewards(group), p.band_low, p.band_high):
                _, prop, reason = select_segment(self.judge, group, p, self.seed)
                segment = prop.segment if reason == "ok" else None
                calls, cost = calls + prop.calls, cost + prop.cost_usd
                budget = prover_budget(group, segment, p.k)
                extra = self._extra(group, budget) if budget > 0 else []
                n_elig, n_extra, budget_total = n_elig + 1, n_extra + len(extra), budget_total + budget
                spent += sum(t.num_policy_tokens for t in extra)
                group = group + extra
            out_groups.append(group)
        advantages = [[broadcast(t, a) for t, a in zip(group, adv)]
                      for group, adv in zip(out_groups, group_outcome_advantages(out_groups, self.config))]
        metrics = {"budget/eligible_groups": n_elig, "budget/extra_episodes": n_extra,
                   "budget/budget_tokens": budget_total, EXTRA_TOKENS: spent, "judge/calls": calls,
                   "judge/cost_usd": cost}
        return CreditOutput(advantages, metrics, groups=out_groups)
