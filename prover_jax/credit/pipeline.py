"""One RL step's rollouts and credit, overlapped: plans and continuations start while episodes run.

    pipe = StepPipeline(rollout, pool, credit, verify_pool=vpool, judge_timeout_s=300, judge_workers=16)
    trajs, out = pipe.run(seeds, uids, group_size=G)      # out: CreditOutput (advantages, metrics)

Every group's episodes start together in one `Play`. For a credit method that samples continuations
(`credit.overlap.OverlapCredit`: ProVer, budget_grpo, spo_chain), as soon as a group's G episodes have
ended an eligible group is planned (`plan`: ProVer's judge call) in a worker thread, all groups
concurrently; as soon as a plan is in, the continuations of its first round (`starts`) join the same
Play, in free envs of the verification pool (queued while none are free), while other episodes and
plans still run; when a round's continuations have all ended, the group's next round starts (budget_grpo
plays up to three). The step's credit is complete when the last continuation ends (`combine`).
Other credit methods run the rollouts, then `assign`.

With `speculate`, a method that allows it (`OverlapCredit.speculates`: ProVer with a judge that answers
on this host, `Judge.local`) has a group that is still playing planned again each time one of its
episodes ends once it has a success, its unfinished episodes counted as failures so far; the
continuations of that plan start at once. When the group has ended and its real plan is in,
continuations from a start it shares are kept, the others cancelled and the missing ones started
(`Play.cancel_continuations` gives their seeds back), so the advantages are those of the unspeculated
step. Failed episodes play to the turn limit, so without it a group's continuations could only start
as the rollout ends.

A plan that raises stops the step (a judge's own errors are dropped proposals, `Judge.propose`). One
that has not returned `judge_timeout_s` after its group ended is replaced by the method's
`timed_out` plan (ProVer: dropped as `timeout`) and its thread abandoned (it no longer counts against
`judge_workers`), so no group waits on another's judge and training goes on. With the same plans,
the advantages and metrics equal the serial `assign`'s: every sampling seed derives from episode uids
and start turns, never from timing or slot placement.

Times in the metrics (seconds):
    time/rollout_s      step start -> the last training episode ended (critical path)
    time/credit_wait_s  the last training episode ended -> credit complete (critical path)
    time/judge_s        sum over plan calls of their duration (busy; calls overlap)
    time/verify_s       wall time with at least one continuation running (busy; overlaps rollouts)
`combine` gets the number of speculative continuations started, then cancelled as wrong (ProVer:
prover/cancelled_continuations), and the policy tokens they had sampled (the turns they completed and
the one each was decoding: `Driver.cancel`), which the verification paid for all the same (ProVer
counts them in prover/verify_policy_tokens and credit/extra_policy_tokens).
"""

from __future__ import annotations

import collections
import dataclasses
import queue
import threading
import time
from typing import Any, Sequence

from prover_jax.credit.base import CreditMethod, CreditOutput
from prover_jax.credit.common import new_policy_tokens
from prover_jax.credit.overlap import OverlapCredit
from prover_jax.envs.pool import EnvPool
from prover_jax.rollout.loop import Rollout
from prover_jax.rollout.trajectory import Trajectory

Key = tuple[int, int, int, int]  # a start: (parent uid, turn, K, round)


class StepPipeline:
    def __init__(self, rollout: Rollout, pool: EnvPool, credit: CreditMethod, verify_pool: EnvPool | None = None,
                 judge_timeout_s: float = 300.0, judge_workers: int = 16, speculate: bool = False):
        if judge_timeout_s <= 0 or judge_workers < 1:
            raise ValueError(f"judge.timeout_s must be > 0 and judge.max_concurrency >= 1, got "
                             f"{judge_timeout_s} and {judge_workers}")
        self.rollout, self.pool, self.credit, self.verify_pool = rollout, pool, credit, verify_pool
        self.judge_timeout_s, self.judge_workers = float(judge_timeout_s), int(judge_workers)
        self.overlaps = verify_pool is not None and isinstance(credit, OverlapCredit)
        self.speculate = bool(speculate) and self.overlaps and credit.speculates()
        if self.overlaps and credit.most_envs() > verify_pool.num_envs:
            raise ValueError(f"K={credit.most_envs()} continuations exceed the verification pool "
                             f"({verify_pool.num_envs} envs)")

    def run(self, seeds: Sequence[int], uids: Sequence[int], group_size: int
            ) -> tuple[list[Trajectory], CreditOutput]:
        if len(set(int(u) for u in uids)) != len(seeds):
            raise ValueError("StepPipeline.run: one distinct uid per episode")
        if not self.overlaps:
            t0 = time.perf_counter()
            trajs = self.rollout.run(self.pool, seeds, uids=uids)
            rollout_s = time.perf_counter() - t0
            try:
                out = self.credit.assign(split_groups(trajs, group_size))
            finally:
                self.rollout.release_contexts(trajs)
            out.metrics["time/rollout_s"] = rollout_s
            out.metrics["time/credit_wait_s"] = time.perf_counter() - t0 - rollout_s  # `assign` (a critic's calls)
            return trajs, out
        step = _Step(self, seeds, uids, group_size)
        try:
            return step.run()
        finally:
            self.rollout.release_contexts(step.trajs)


@dataclasses.dataclass
class _Start:
    """K continuations of `traj` from the start of `turn`: queued (children None), then playing in
    `envs` (the envs of those not yet ended)."""
    traj: Trajectory
    turn: int
    k: int
    children: list[Trajectory] | None = None
    envs: list[int] = dataclasses.field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.children is not None and not self.envs


class _Step:
    """The state of one pipelined step (see the module docstring)."""

    def __init__(self, pipe: StepPipeline, seeds, uids, G: int):
        self.pipe, self.G = pipe, G
        self.credit: OverlapCredit = pipe.credit
        self.play = pipe.rollout.play()
        self.ended = collections.Counter()  # group -> episodes ended
        self.results: queue.Queue = queue.Queue()
        self.waiting: collections.deque[int] = collections.deque()  # groups to plan, no worker yet
        self.running: dict[int, tuple[float, float]] = {}  # group -> (deadline, call start)
        self.plans: dict[int, Any] = {}  # group -> its final plan
        self.runs: dict[int, list[list[Trajectory]]] = {}  # group -> children of each start of its ended rounds
        self.starts: dict[Key, _Start] = {}
        self.queue: collections.deque[Key] = collections.deque()  # starts waiting for envs
        self.want: dict[int, list[Key]] = {}  # group -> the starts of its current round
        self.speculative: set[int] = set()  # playing groups to plan again
        self.free_envs = list(range(pipe.verify_pool.num_envs))
        self.live_continuations = self.cancelled = self.cancelled_tokens = 0
        self.verify_since: float | None = None
        self.verify_s = self.judge_s = 0.0
        self.seeds, self.uids = seeds, uids
        self.index = {int(u): n for n, u in enumerate(uids)}
        self.waiting_groups: collections.deque[int] = collections.deque()  # ended, not yet looked at
        self.trajs: list[Trajectory] = []
        self.last_episode: float | None = None

    def run(self) -> tuple[list[Trajectory], CreditOutput]:
        credit, t0 = self.credit, time.perf_counter()
        cancelled0 = self.pipe.rollout.driver.stats["cancelled_tokens"]  # the turns they were playing: Driver.cancel
        credit.begin_step()
        self.trajs = self.pipe.rollout.start(self.play, self.pipe.pool, self.seeds, self.uids, self._episode_ended)
        while True:
            if self.play.busy:
                self.play.advance()
            self._collect(block=not self.play.busy)
            self._speculate()
            self._launch_plans()
            self._next_rounds()
            self._launch_continuations()
            if not (self.play.busy or self.running or self.waiting or self.waiting_groups or self.queue):
                break
        end = time.perf_counter()
        last = self.last_episode if self.last_episode is not None else end
        self.cancelled_tokens += self.pipe.rollout.driver.stats["cancelled_tokens"] - cancelled0
        out = credit.combine(split_groups(self.trajs, self.G), self.plans, self.runs, cancelled=self.cancelled,
                             cancelled_tokens=self.cancelled_tokens)
        out.metrics.update({"time/rollout_s": last - t0, "time/credit_wait_s": end - last,
                            "time/judge_s": self.judge_s, "time/verify_s": self.verify_s})
        return self.trajs, out

    def _group(self, g: int) -> list[Trajectory]:
        return self.trajs[g * self.G:(g + 1) * self.G]

    def _rollouts_done(self) -> bool:
        return sum(self.ended.values()) == len(self.seeds)

    # Events.
    def _episode_ended(self, traj: Trajectory, env: int) -> None:
        if not self.credit.continues(traj):
            self.pipe.rollout.release_contexts([traj])
        g = self.index[traj.uid] // self.G
        self.ended[g] += 1
        if self._rollouts_done():
            self.last_episode = time.perf_counter()
        if self.ended[g] == self.G:
            self.waiting_groups.append(g)
            self.speculative.discard(g)
        elif self.pipe.speculate and any(t.success for t in self._group(g)):
            self.speculative.add(g)

    def _speculate(self) -> None:
        """Groups still playing, planned on what they played so far (unfinished = failed so far)."""
        for g in sorted(self.speculative):
            group = self._group(g)
            self._want(g, self.credit.plan(group) if self.credit.eligible(group) else None)
        self.speculative.clear()

    def _launch_plans(self) -> None:
        while self.waiting_groups:  # groups that ended: eligible ones wait for a worker
            g = self.waiting_groups.popleft()
            if self.credit.eligible(self._group(g)):
                self.waiting.append(g)
            else:
                self._want(g, None)
        while self.waiting and len(self.running) < self.pipe.judge_workers:
            g = self.waiting.popleft()
            group = self._group(g)
            now = time.perf_counter()
            self.running[g] = (now + self.pipe.judge_timeout_s, now)

            def work(g=g, group=group):
                try:
                    out = self.credit.plan(group)
                except BaseException as e:  # noqa: BLE001  (raised again on the main thread)
                    out = e
                self.results.put((g, out, time.perf_counter()))

            threading.Thread(target=work, name=f"plan-group-{g}", daemon=True).start()

    def _collect(self, block: bool) -> None:
        """Plans that arrived (waiting for the next one when nothing else can progress), and plans
        past their deadline replaced by the method's `timed_out` plan."""
        timeout = None
        if block and self.running:
            timeout = max(0.0, min(d for d, _ in self.running.values()) - time.perf_counter())
        while True:
            try:
                g, out, t_end = self.results.get(block=timeout is not None, timeout=timeout)
            except queue.Empty:
                break
            timeout = None
            if g not in self.running:  # answered after its timeout: already replaced
                continue
            _, started = self.running.pop(g)
            self.judge_s += t_end - started
            if isinstance(out, BaseException):
                raise out
            self._final(g, out)
        now = time.perf_counter()
        for g, (deadline, started) in list(self.running.items()):
            if now >= deadline:
                del self.running[g]
                self.judge_s += now - started
                self._final(g, self.credit.timed_out(self._group(g), self.pipe.judge_timeout_s))

    def _final(self, g: int, plan: Any) -> None:
        self.plans[g], self.runs[g] = plan, []
        self._want(g, plan)

    # Continuations.
    def _want(self, g: int, plan: Any) -> None:
        """Group g's first round becomes that of `plan` (None: no continuations): starts it shares with
        the round wanted so far are kept, the others cancelled or queued."""
        starts = self.credit.starts(self._group(g), plan, []) if plan is not None else []
        keys = self._keys(starts, 0)
        for key in self.want.pop(g, []):
            if key not in keys:
                self._drop(key)
        self._queue(g, starts, keys)

    def _next_rounds(self) -> None:
        """Planned groups whose round has ended: its continuations kept, the next round queued."""
        for g in [g for g, keys in self.want.items() if g in self.plans and all(self.starts[k].done for k in keys)]:
            keys = self.want.pop(g)
            self.runs[g] += [self.starts[k].children for k in keys]
            starts = self.credit.starts(self._group(g), self.plans[g], self.runs[g])
            self._queue(g, starts, self._keys(starts, keys[0][3] + 1))

    def _keys(self, starts, round_: int) -> list[Key]:
        keys = [(t.uid, turn, k, round_) for t, turn, k in starts]
        if len(set(keys)) != len(keys):
            raise ValueError(f"{type(self.credit).__name__}.starts: a round starts twice from one (traj, turn)")
        return keys

    def _queue(self, g: int, starts, keys: list[Key]) -> None:
        for (t, turn, k), key in zip(starts, keys):
            if not 1 <= k <= self.pipe.verify_pool.num_envs:
                raise ValueError(f"{type(self.credit).__name__}.starts: K={k} continuations, the verification "
                                 f"pool has {self.pipe.verify_pool.num_envs} envs")
            if key not in self.starts:
                self.starts[key] = _Start(t, turn, k)
                self.queue.append(key)
        if keys:
            self.want[g] = keys

    def _drop(self, key: Key) -> None:
        b = self.starts.pop(key)
        if b.children is None:
            self.queue.remove(key)
            return
        self.cancelled += b.k
        self.cancelled_tokens += sum(new_policy_tokens(c, b.traj) for c in b.children)  # their ended turns
        self._playing(-self.play.cancel_continuations(b.children))
        self.free_envs += b.envs
        b.envs = []

    def _playing(self, n: int) -> None:
        """Continuations playing += n; `time/verify_s` counts the time any was."""
        if n > 0 and self.live_continuations == 0:
            self.verify_since = time.perf_counter()
        self.live_continuations += n
        if n < 0 and self.live_continuations == 0:
            self.verify_s += time.perf_counter() - self.verify_since

    def _launch_continuations(self) -> None:
        pool = self.pipe.verify_pool
        while self.queue and len(self.free_envs) >= self.starts[self.queue[0]].k:
            b = self.starts[self.queue.popleft()]
            b.envs, self.free_envs = self.free_envs[:b.k], self.free_envs[b.k:]

            def ended(child: Trajectory, env: int, b=b):
                b.envs.remove(env)
                self.free_envs.append(env)
                self._playing(-1)

            self._playing(b.k)
            b.children = self.play.add_continuations(pool, b.traj, b.turn, b.k, list(b.envs), ended)


def split_groups(trajs: Sequence[Trajectory], G: int) -> list[list[Trajectory]]:
    """Played episodes in group order -> their groups of G."""
    return [list(trajs[g * G:(g + 1) * G]) for g in range(len(trajs) // G)]
