"""Credit methods that sample continuations, in a form the step pipeline overlaps with the rollout.

Such a method plans each eligible group once its G episodes have ended (ProVer: the judge's segment;
budget_grpo: that segment priced as a token budget; spo_chain: the cut points), then samples
continuations in rounds: a round's starts (traj, turn, K) follow from the plan and from the
continuations of the rounds before it (budget_grpo: fresh episodes, turn-0 starts, until its budget
is spent; ProVer and spo_chain: one round). `combine` turns the plans and the continuations into the
step's CreditOutput, whatever order they arrived in.

    plan = method.plan(group)                       # may be slow (a judge call): a worker thread runs it
    starts = method.starts(group, plan, runs)       # runs: the children of each earlier start; [] = done
    out = method.combine(groups, plans, runs)       # plans, runs: g -> ..., eligible groups only

`assign` (serial: every plan, then each round's starts in one verifier call) and
`credit.pipeline.StepPipeline` (overlapped: a group's continuations start as soon as its plan is in)
drive the same four calls. Every continuation's sampling seed derives from its parent's uid, start
turn and index there, so with the same plans both give the same advantages and metrics.
"""

from __future__ import annotations

import abc
import time
from typing import Any, Sequence

from prover_jax.credit.base import CreditMethod, CreditOutput, Verifier
from prover_jax.credit.common import in_band
from prover_jax.rollout.trajectory import Trajectory

Start = tuple[Trajectory, int, int]  # K continuations of traj from the start of turn `turn`: (traj, turn, K)


class OverlapCredit(CreditMethod):
    """A credit method whose extra sampling is plan -> rounds of starts -> combine (module docstring).

    Subclasses set `self.verifier` (a `Verifier`, used by the serial `assign`) and define `plan`,
    `starts`, `most_envs` and `combine`; one whose plan needs no success overrides `picks_success`.
    """

    verifier: Verifier

    def __init__(self, config: Any, **deps):
        super().__init__(config, **deps)
        if self.picks_success() and float(config.band_low) < 0:
            raise ValueError(f"credit.band_low must be >= 0 for {type(self).__name__}, which picks a success of each "
                             f"eligible group: band_low={config.band_low} makes groups without one eligible")

    def picks_success(self) -> bool:
        """Whether `plan` takes a successful trajectory of the group (then credit.band_low >= 0)."""
        return True

    def eligible(self, group: Sequence[Trajectory]) -> bool:
        """Whether the group gets a plan (default: credit.band_low < success rate < credit.band_high)."""
        return in_band(group, self.config)

    @abc.abstractmethod
    def plan(self, group: Sequence[Trajectory]) -> Any:
        """The plan of an eligible group. Thread-safe: the pipeline calls it from worker threads."""

    def timed_out(self, group: Sequence[Trajectory], timeout_s: float) -> Any:
        """The plan of a group whose `plan` did not return within `timeout_s` (judge.timeout_s).
        Default: plan it here (a method without a slow call never times out)."""
        return self.plan(group)

    @abc.abstractmethod
    def starts(self, group: Sequence[Trajectory], plan: Any, runs: Sequence[Sequence[Any]]) -> list[Start]:
        """The next round's starts, given the continuations of the earlier ones (`runs[j]`: the
        children of start j, in order); [] when the group is done. Starts of one round differ in
        (traj, turn)."""

    @abc.abstractmethod
    def most_envs(self) -> int:
        """The most continuations one start asks for (the verification pool holds at least that)."""

    @abc.abstractmethod
    def combine(self, groups: Sequence[Sequence[Trajectory]], plans: dict[int, Any],
                runs: dict[int, list[Sequence[Any]]], cancelled: int = 0, cancelled_tokens: int = 0
                ) -> CreditOutput:
        """Advantages and metrics of the step from every eligible group's plan and continuations
        (`cancelled`: speculative continuations started, then cancelled as wrong; `cancelled_tokens`:
        the policy tokens they had sampled)."""

    def continues(self, trajectory: Trajectory) -> bool:
        """Whether a start may continue `trajectory`, which has ended (default: only successes); the
        pipeline gives back the kept caches of those that may not (`Rollout.release_contexts`)."""
        return trajectory.success

    def speculates(self) -> bool:
        """Whether a group still playing may be planned on what it played so far (unfinished episodes
        counted as failures), its first round started early and corrected once the group has ended."""
        return False

    def serial_batches(self, plans: dict[int, Any]) -> list[list[int]]:
        """The groups whose rounds the serial `assign` plays together, in order (default: all)."""
        return [sorted(plans)]

    def assign(self, groups: Sequence[Sequence[Trajectory]]) -> CreditOutput:
        """Serial: every eligible group planned in turn, then round after round of continuations."""
        self.begin_step()
        t0 = time.perf_counter()
        plans = {g: self.plan(group) for g, group in enumerate(groups) if self.eligible(group)}
        judge_s, t0 = time.perf_counter() - t0, time.perf_counter()
        runs: dict[int, list[Sequence[Any]]] = {g: [] for g in plans}
        for live in self.serial_batches(plans):
            while live:
                starts = {g: self.starts(groups[g], plans[g], runs[g]) for g in live}
                flat = [s for g in live for s in starts[g]]
                got = iter(self.verifier.run(flat) if flat else [])
                for g in live:
                    runs[g] += [next(got) for _ in starts[g]]
                live = [g for g in live if starts[g]]
        out = self.combine(groups, plans, runs)
        out.metrics.update({"time/judge_s": judge_s, "time/verify_s": time.perf_counter() - t0})
        return out
