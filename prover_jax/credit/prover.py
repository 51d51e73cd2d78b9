"""`prover`: Propose, Verify, Credit (ProVer) on top of GRPO.

For each group with success rate p in the eligibility band (band_low < p < band_high; default
0 < p < 0.5):
  1. pick the shortest successful trajectory (fewest turns, then fewest tokens);
  2. a judge proposes ONE segment (l, r) of its turns (<= max_segment_turns, non-terminal, valid
     actions only); invalid proposals are dropped and counted by reason;
  3. verify: K continuations from s_pre (start of turn l) and K from s_post (start of turn r + 1),
     env AND agent history restored, run with the current policy to the end; all eligible groups'
     boundaries go to the verifier in ONE batch:
        delta = mean(R_post) - mean(R_pre)
  4. credit on the policy tokens of turns l..r of that trajectory, on top of A^GRPO:
        positive (paper): lam * max(delta, 0);  signed: lam * delta;
        threshold: lam * delta if delta > threshold else 0.
Continuations are NOT part of the training batch. Everything else keeps A^GRPO.
"""

from __future__ import annotations

import collections
import time
from typing import Any, Sequence

import numpy as np

from prover_jax.credit.base import (CreditMethod, CreditOutput, Verifier, broadcast, group_advantages,
                                    register_credit, rewards)
from prover_jax.rollout.trajectory import Trajectory

VARIANTS = ("positive", "signed", "threshold")


def eligible(r_G: np.ndarray, low: float, high: float) -> bool:
    """low < mean(R) < high."""
    p = float(np.mean(r_G))
    return low < p < high


def shortest_success(group: Sequence[Trajectory]) -> int:
    """Index of the successful trajectory with the fewest turns (ties: fewest tokens, then first)."""
    wins = [i for i, t in enumerate(group) if t.success]
    if not wins:
        raise ValueError("the group has no successful trajectory")
    return min(wins, key=lambda i: (group[i].num_turns, len(group[i].tokens), i))


def segment_bonus(delta: float, lam: float, variant: str, threshold: float = 0.0) -> float:
    """The credit added to the segment's tokens for a measured delta (see module docstring)."""
    if variant == "positive":
        return lam * max(delta, 0.0)
    if variant == "signed":
        return lam * delta
    if variant == "threshold":
        return lam * delta if delta > threshold else 0.0
    raise ValueError(f"unknown ProVer variant {variant!r}; choose from {VARIANTS}")


def delta_estimate(pre: Sequence[Any], post: Sequence[Any]) -> float:
    """delta = mean(R_post) - mean(R_pre) over continuation outcomes."""
    return float(np.mean([c.success for c in post]) - np.mean([c.success for c in pre]))


def segment_tokens(traj: Trajectory, l: int, r: int) -> np.ndarray:
    """bool [L]: the policy tokens of turns l..r."""
    out = np.zeros(len(traj.tokens), bool)
    for turn in traj.turns[l:r + 1]:
        out[turn.start:turn.end] = True
    return out & np.asarray(traj.policy_mask, bool)


@register_credit("prover")
class ProVer(CreditMethod):
    """Needs `judge` (prover_jax.judges) and `verifier` (runs continuations; see credit.base)."""

    def __init__(self, config: Any, judge=None, verifier: Verifier | None = None, seed: int = 0):
        super().__init__(config)
        p = config.prover
        if p.variant not in VARIANTS:
            raise ValueError(f"credit.prover.variant must be one of {VARIANTS}, got {p.variant!r}")
        if p.k < 1 or p.max_segment_turns < 1:
            raise ValueError("credit.prover.k and max_segment_turns must be >= 1")
        if judge is None or verifier is None:
            raise ValueError("the prover credit method needs a judge and a verifier")
        self.judge, self.verifier = judge, verifier
        self.seed = seed

    def assign(self, groups: Sequence[Sequence[Trajectory]]) -> CreditOutput:
        from prover_jax.judges.base import validate_segment

        p = self.config.prover
        use_std = bool(self.config.get("grpo_std", False))
        advantages, proposals = [], []
        reasons = collections.Counter()
        judge_calls = judge_cost = judge_in = judge_out = 0.0
        t0 = time.perf_counter()
        if hasattr(self.judge, "begin_step"):
            self.judge.begin_step()
        for g, group in enumerate(groups):
            r = rewards(group)
            advantages.append([broadcast(t, a) for t, a in zip(group, group_advantages(r, use_std))])
            if not eligible(r, p.band_low, p.band_high):
                continue
            i = shortest_success(group)
            failures = [t for t, ri in zip(group, r) if ri == 0.0]
            # the judge's randomness is keyed by the trajectory: the same on any number of hosts
            rng = np.random.default_rng([self.seed, group[i].uid & 0xFFFFFFFF])
            prop = self.judge.propose(group[i], failures, max_segment_turns=p.max_segment_turns, rng=rng)
            judge_calls += prop.calls
            judge_cost += prop.cost_usd
            judge_in += prop.input_tokens
            judge_out += prop.output_tokens
            reason = prop.reason
            if prop.segment is not None and reason == "ok":
                l, rr = prop.segment
                reason = validate_segment(group[i], l, rr, p.max_segment_turns) or "ok"
            reasons[reason] += 1
            if reason == "ok":
                proposals.append((g, i, prop.segment))
        judge_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        starts = []
        for g, i, (l, rr) in proposals:
            traj = groups[g][i]
            starts += [(traj, l, p.k), (traj, rr + 1, p.k)]
        runs = self.verifier.run(starts) if starts else []
        verify_s = time.perf_counter() - t0

        deltas, lengths, accepted, extra = [], [], 0, 0
        for n, (g, i, (l, rr)) in enumerate(proposals):
            pre, post = runs[2 * n], runs[2 * n + 1]
            extra += sum(c.num_policy_tokens for c in pre) + sum(c.num_policy_tokens for c in post)
            delta = delta_estimate(pre, post)
            bonus = segment_bonus(delta, p.lam, p.variant, p.threshold)
            deltas.append(delta)
            lengths.append(rr - l + 1)
            if bonus != 0.0:
                advantages[g][i] = advantages[g][i] + np.float32(bonus) * segment_tokens(groups[g][i], l, rr)
            accepted += delta > 0 if p.variant != "threshold" else delta > p.threshold
        batch_tokens = sum(t.num_policy_tokens for group in groups for t in group)
        n_elig = sum(reasons.values())
        metrics = {
            "prover/eligible_groups": n_elig,
            "prover/proposals": n_elig,
            "prover/valid_proposals": len(proposals),
            "prover/accepted": accepted,
            "prover/acceptance_rate": accepted / len(proposals) if proposals else 0.0,
            "prover/segment_len": float(np.mean(lengths)) if lengths else 0.0,
            "prover/delta_mean": float(np.mean(deltas)) if deltas else 0.0,
            "prover/extra_token_frac": extra / batch_tokens if batch_tokens else 0.0,
            "prover/verify_policy_tokens": extra,
            "judge/calls": judge_calls, "judge/cost_usd": judge_cost,
            "judge/input_tokens": judge_in, "judge/output_tokens": judge_out,
            "time/judge_s": judge_s, "time/verify_s": verify_s,
        }
        for reason, count in reasons.items():
            if reason != "ok":
                metrics[f"prover/dropped/{reason}"] = count
        return CreditOutput(advantages, metrics)
