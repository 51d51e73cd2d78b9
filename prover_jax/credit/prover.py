"""`prover`: Propose, Verify, Credit (ProVer) on top of GRPO.

For each group with success rate p in the eligibility band (credit.band_low < p < credit.band_high;
default 0 < p < 0.5):
  1. pick the shortest successful trajectory (fewest turns, then fewest tokens);
  2. a judge proposes ONE segment (l, r) of its turns (<= max_segment_turns, non-terminal, valid
     actions only); invalid proposals are dropped and counted by reason;
  3. verify: K continuations from s_pre (start of turn l) and K from s_post (start of turn r + 1),
     env AND agent history restored, run with the current policy to the end; all eligible groups'
     boundaries go to the verifier in ONE batch:
        delta = mean(R_post) - mean(R_pre)
  4. credit on the policy tokens of turns l..r of that trajectory, on top of A^GRPO:
        positive (paper): lam * max(delta, 0);  signed: lam * delta;
        threshold: lam * delta if delta > threshold else 0;
     divided by the group's outcome scale s_g (credit.std_scope: 1 at none, the paper's; std_g(R) + 1e-6
     at group), so the bonus keeps its weight against A^GRPO = (R - mean_g R) / s_g: delta and R are
     both success probabilities.
Continuations are NOT part of the training batch. Everything else keeps A^GRPO.
prover/bonus_share = sum over tokens of |bonus| / sum over the batch's policy tokens of |A^GRPO|: how
much of the step's advantage mass the segment credit adds.

As an `OverlapCredit`: the plan of a group is (i, proposal, reason), its one round the two boundaries
of a valid proposal; with a local judge (`Judge.local`) and `speculate`, a group still playing is
judged on what it played so far.
"""

from __future__ import annotations

import collections
from typing import Any, Sequence

import ml_collections
import numpy as np

from prover_jax.credit.base import (EXTRA_TOKENS, JUDGE_SUMS, CreditOutput, Figure, Merge, Needs, Verifier,
                                    register_credit)
from prover_jax.credit.common import (continuation_notes, grpo_advantages, new_policy_tokens, outcome_scales,
                                     rewards, select_segment, shortest_success, std_scope)
from prover_jax.credit.overlap import OverlapCredit, Start
from prover_jax.judges.base import TIMEOUT, Proposal
from prover_jax.rollout.trajectory import Trajectory

VARIANTS = ("positive", "signed", "threshold")
METRICS = ("prover/eligible_groups", "prover/proposals", "prover/valid_proposals", "prover/accepted",
           "prover/acceptance_rate", "prover/segment_len", "prover/delta_mean", "prover/extra_token_frac",
           "prover/verify_policy_tokens", "prover/cancelled_continuations", "prover/cancelled_tokens", "judge/calls",
           "judge/cost_usd", "judge/input_tokens", "judge/output_tokens", "prover/bonus_share")
MERGE = Merge(
    sums=("prover/eligible_groups", "prover/proposals", "prover/valid_proposals", "prover/accepted",
          "prover/verify_policy_tokens", "prover/cancelled_continuations", "prover/cancelled_tokens",
          "prover/bonus_mass", "prover/grpo_mass", "prover/dropped/") + JUDGE_SUMS,
    means=(("prover/segment_len", "prover/valid_proposals"), ("prover/delta_mean", "prover/valid_proposals")),
    ratios=(("prover/acceptance_rate", "prover/accepted", "prover/valid_proposals"),
            ("prover/bonus_share", "prover/bonus_mass", "prover/grpo_mass"),
            ("prover/extra_token_frac", "prover/verify_policy_tokens", "policy_tokens")))
HEADLINE = (Figure("acceptance", "accept", "acceptance_rate", "prover/accepted", den="prover/valid_proposals",
                   den_key="valid_proposals", den_name="valid proposals"),)


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
class ProVer(OverlapCredit):
    """Needs `judge` (prover_jax.judges) and `verifier` (runs continuations; see credit.base)."""

    headline = HEADLINE

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
    def default_config(cls) -> ml_collections.ConfigDict:
        """config.credit.prover."""
        s = ml_collections.ConfigDict()
        s.k = 8  # continuations per boundary
        s.lam = 1.0  # credit = lam * max(delta, 0) on the segment's policy tokens
        s.max_segment_turns = 4  # longest segment (turns) a judge may propose
        s.speculate = True  # with a local judge (contrastive, random) and credit.overlap: start a
        # playing group's continuations from its proposal so far, cancelled if the final one differs (same result)
        s.variant = "positive"  # positive (paper) | signed | threshold
        s.threshold = 0.0  # for variant=threshold: credit only when delta > threshold
        return s

    @classmethod
    def needs(cls, config: Any, groups: int, group_size: int) -> Needs:
        """A judge; a verifier whose pool runs every valid proposal's 2K continuations at once (at
        most the step's own episode count, never fewer than K)."""
        k = config.prover.k
        return Needs(judge=True, verifier=True, verify_envs=min(2 * groups * k, max(groups * group_size, k)),
                     metrics=METRICS, headline=cls.headline, contexts=True,
                     merge=MERGE, several_turns=True)

    def begin_step(self) -> None:
        self.judge.begin_step()

    def plan(self, group: Sequence[Trajectory]) -> tuple[int, Any, str]:
        """(i, proposal, reason) for an eligible group (`select_segment`). Thread-safe when the judge is."""
        return select_segment(self.judge, group, self.config.prover, self.seed)

    def timed_out(self, group: Sequence[Trajectory], timeout_s: float) -> tuple[int, Any, str]:
        why = f"no answer within judge.timeout_s={timeout_s:g} s"
        return shortest_success(group), Proposal(None, TIMEOUT, rationale=why), TIMEOUT

    def starts(self, group: Sequence[Trajectory], plan: tuple[int, Any, str], runs) -> list[Start]:
        """The two boundaries of a valid proposal's segment (l, r): K continuations from s_pre (turn l)
        and K from s_post (turn r + 1); one round."""
        i, prop, reason = plan
        if runs or reason != "ok":
            return []
        (l, rr), k = prop.segment, self.config.prover.k
        return [(group[i], l, k), (group[i], rr + 1, k)]

    def most_envs(self) -> int:
        return int(self.config.prover.k)

    def speculates(self) -> bool:
        return bool(self.config.prover.speculate) and bool(getattr(self.judge, "local", False))

    def combine(self, groups: Sequence[Sequence[Trajectory]], plans: dict[int, tuple[int, Any, str]],
                runs: dict[int, list[Sequence[Any]]], cancelled: int = 0,
                cancelled_tokens: int = 0) -> CreditOutput:
        """Advantages and metrics from the judged groups (g -> (i, proposal, reason)) and the
        continuations of the valid ones (g -> [pre, post]); the same whatever order they came in."""
        p = self.config.prover
        advantages = grpo_advantages(groups, self.config)
        scales = outcome_scales([rewards(group) for group in groups], std_scope(self.config))
        grpo_mass = float(sum(np.abs(a).sum() for group in advantages for a in group))
        bonus_mass = 0.0
        reasons = collections.Counter()
        judge_calls = judge_cost = judge_in = judge_out = 0.0
        deltas, lengths, accepted, extra = [], [], 0, 0
        notes = {}
        for g in sorted(plans):
            i, prop, reason = plans[g]
            judge_calls += prop.calls
            judge_cost += prop.cost_usd
            judge_in += prop.input_tokens
            judge_out += prop.output_tokens
            reasons[reason] += 1
            note = notes[groups[g][i].uid] = {"method": "prover", "reason": reason, "rationale": prop.rationale,
                                               "failure_mode": prop.failure_mode}
            if reason != "ok":
                continue
            (l, rr), (pre, post) = prop.segment, runs[g]
            traj = groups[g][i]
            extra += sum(new_policy_tokens(c, traj) for c in list(pre) + list(post))
            delta = delta_estimate(pre, post)
            bonus = segment_bonus(delta, p.lam, p.variant, p.threshold) / scales[g]
            deltas.append(delta)
            lengths.append(rr - l + 1)
            if bonus != 0.0:
                seg = segment_tokens(traj, l, rr)
                advantages[g][i] = advantages[g][i] + np.float32(bonus) * seg
                bonus_mass += abs(bonus) * float(seg.sum())
            ok = bool(delta > 0 if p.variant != "threshold" else delta > p.threshold)
            accepted += ok
            note.update(segment=[int(l), int(rr)], delta=float(delta), accepted=ok, bonus=float(bonus),
                        pre=continuation_notes(pre), post=continuation_notes(post))
        extra += cancelled_tokens  # sampled by speculative continuations, then cancelled: paid for all the same
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
            "prover/cancelled_continuations": cancelled,
            "prover/cancelled_tokens": cancelled_tokens,
            "prover/bonus_mass": bonus_mass, "prover/grpo_mass": grpo_mass,
            "prover/bonus_share": bonus_mass / grpo_mass if grpo_mass else 0.0,
        }
        for reason, count in reasons.items():
            if reason != "ok":
                metrics[f"prover/dropped/{reason}"] = count
        return CreditOutput(advantages, metrics, notes=notes)
