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

from prover_jax.credit.base import (EXTRA_TOKENS, CreditMethod, CreditOutput, Needs, Verifier, broadcast,
                                    group_outcome_advantages, register_credit, rewards)
from prover_jax.rollout.trajectory import Trajectory

VARIANTS = ("positive", "signed", "threshold")
METRICS = ("prover/eligible_groups", "prover/proposals", "prover/valid_proposals", "prover/accepted",
           "prover/acceptance_rate", "prover/segment_len", "prover/delta_mean", "prover/extra_token_frac",
           "prover/verify_policy_tokens", "prover/cancelled_continuations", "judge/calls", "judge/cost_usd", "judge/input_tokens",
           "judge/output_tokens")


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


def select_segment(judge, group: Sequence[Trajectory], p: Any, seed: int) -> tuple[int, Any, str]:
    """ProVer's selection: (i, proposal, reason) with i the shortest success, the judge's segment of
    it, validated (reason "ok" or why it was dropped); `p` is config.credit.prover."""
    from prover_jax.judges.base import validate_segment

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

    @classmethod
    def needs(cls, config: Any, groups: int, group_size: int) -> Needs:
        """A judge; a verifier whose pool runs every valid proposal's 2K continuations at once (at
        most the step's own episode count, never fewer than K)."""
        k = config.prover.k
        return Needs(judge=True, verifier=True, verify_envs=min(2 * groups * k, max(groups * group_size, k)),
                     metrics=METRICS)

    def base_advantages(self, groups: Sequence[Sequence[Trajectory]]) -> list[list[np.ndarray]]:
        """A^GRPO (credit.std_scope) on every policy token of each group."""
        return [[broadcast(t, a) for t, a in zip(group, adv)]
                for group, adv in zip(groups, group_outcome_advantages(groups, self.config))]

    def is_eligible(self, group: Sequence[Trajectory]) -> bool:
        p = self.config.prover
        return eligible(rewards(group), p.band_low, p.band_high)

    def judge_group(self, group: Sequence[Trajectory]) -> tuple[int, Any, str]:
        """(i, proposal, reason) for an eligible group (`select_segment`). Thread-safe when the judge is."""
        return select_segment(self.judge, group, self.config.prover, self.seed)

    def starts(self, traj: Trajectory, segment: tuple[int, int]) -> list[tuple[Trajectory, int, int]]:
        """The two boundaries of `segment` to verify: K continuations from s_pre and from s_post."""
        l, rr = segment
        k = self.config.prover.k
        return [(traj, l, k), (traj, rr + 1, k)]

    def assign(self, groups: Sequence[Sequence[Trajectory]]) -> CreditOutput:
        """Serial: every eligible group judged in turn, then all boundaries verified in one batch."""
        if hasattr(self.judge, "begin_step"):
            self.judge.begin_step()
        t0 = time.perf_counter()
        judged = {g: self.judge_group(group) for g, group in enumerate(groups) if self.is_eligible(group)}
        judge_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        valid = [(g, i, prop.segment) for g, (i, prop, reason) in judged.items() if reason == "ok"]
        starts = [s for g, i, seg in valid for s in self.starts(groups[g][i], seg)]
        runs = self.verifier.run(starts) if starts else []
        verified = {g: (runs[2 * n], runs[2 * n + 1]) for n, (g, _, _) in enumerate(valid)}
        return self.combine(groups, judged, verified, {"time/judge_s": judge_s,
                                                       "time/verify_s": time.perf_counter() - t0,
                                                       "prover/cancelled_continuations": 0})

    def combine(self, groups: Sequence[Sequence[Trajectory]], judged: dict[int, tuple[int, Any, str]],
                verified: dict[int, tuple[Sequence[Any], Sequence[Any]]], times: dict[str, float]) -> CreditOutput:
        """Advantages and metrics from the judged groups (g -> (i, proposal, reason)) and the
        continuations of the valid ones (g -> (pre, post)); the same whatever order they came in."""
        p = self.config.prover
        advantages = self.base_advantages(groups)
        reasons = collections.Counter()
        judge_calls = judge_cost = judge_in = judge_out = 0.0
        deltas, lengths, accepted, extra = [], [], 0, 0
        for g in sorted(judged):
            i, prop, reason = judged[g]
            judge_calls += prop.calls
            judge_cost += prop.cost_usd
            judge_in += prop.input_tokens
            judge_out += prop.output_tokens
            reasons[reason] += 1
            if reason != "ok":
                continue
            (l, rr), (pre, post) = prop.segment, verified[g]
            traj = groups[g][i]
            extra += sum(new_policy_tokens(c, traj) for c in list(pre) + list(post))
            delta = delta_estimate(pre, post)
            bonus = segment_bonus(delta, p.lam, p.variant, p.threshold)
            deltas.append(delta)
            lengths.append(rr - l + 1)
            if bonus != 0.0:
                advantages[g][i] = advantages[g][i] + np.float32(bonus) * segment_tokens(traj, l, rr)
            accepted += delta > 0 if p.variant != "threshold" else delta > p.threshold
        batch_tokens = sum(t.num_policy_tokens for group in groups for t in group)
        n_elig = sum(reasons.values())
        n_valid = reasons.get("ok", 0)
        metrics = {
            "prover/eligible_groups": n_elig,
            "prover/proposals": n_elig,
            "prover/valid_proposals": n_valid,
            "prover/accepted": accepted,
            "prover/acceptance_rate": accepted / n_valid if n_valid else 0.0,
            "prover/segment_len": float(np.mean(lengths)) if lengths else 0.0,
            "prover/delta_mean": float(np.mean(deltas)) if deltas else 0.0,
            "prover/extra_token_frac": extra / batch_tokens if batch_tokens else 0.0,
            "prover/verify_policy_tokens": extra,
            EXTRA_TOKENS: extra,
            "judge/calls": judge_calls, "judge/cost_usd": judge_cost,
            "judge/input_tokens": judge_in, "judge/output_tokens": judge_out,
            **times,
        }
        for reason, count in reasons.items():
            if reason != "ok":
                metrics[f"prover/dropped/{reason}"] = count
        return CreditOutput(advantages, metrics)


def new_policy_tokens(continuation: Any, parent: Trajectory) -> int:
    """Policy tokens a continuation sampled itself: a rollout continuation inherits the parent's
    tokens before its start turn, which verification did not pay for (an `Outcome` has no parent)."""
    n = int(continuation.num_policy_tokens)
    if getattr(continuation, "parent", None) is None:
        return n
    start = continuation.parent[1]
    return n - sum(t.end - t.start for t in parent.turns[:start])
