"""One RL step's rollouts and credit, overlapped: judges and verification start while episodes run.

    pipe = StepPipeline(rollout, pool, credit, verify_pool=vpool, judge_timeout_s=300, judge_workers=16)
    trajs, out = pipe.run(seeds, uids, group_size=G)      # out: CreditOutput (advantages, metrics)

Every group's episodes start together in one `Play`. As soon as a group's G episodes have ended, a
credit method that verifies (ProVer: `judge_group`, `starts`, `combine`) has the group judged in a
worker thread, all groups concurrently; as soon as a proposal is valid, its 2K boundary
continuations join the same Play, in free envs of the verification pool (queued while none are
free), while other episodes and judges still run. The step's credit is complete when the last
continuation ends. Other credit methods run the rollouts, then `assign`.

With `speculate` and a judge that answers on this host (`Judge.local`: contrastive, random), a group
that is still playing is judged again each time one of its episodes ends once it has a success, its
unfinished episodes counted as failures so far; the continuations of that proposal start at once. When
the group has ended and its real judgment is in, continuations from a boundary it shares are kept, the
others cancelled and the missing ones started (`Play.cancel_continuations` gives their seeds back), so
the advantages are those of the unspeculated step. Failed episodes play to the turn limit, so without
it a group's continuations could only start as the rollout ends.

A judge that raises is a dropped proposal (the judge's own rule). One that has not answered
`judge_timeout_s` after its group ended is dropped as `timeout` and its thread abandoned (it no
longer counts against `judge_workers`), so no group waits on another's judge and training goes on.
With the same judge answers, the advantages equal the serial `assign`'s: every sampling seed derives
from episode uids and boundaries, never from timing or slot placement.

Times in the metrics (seconds):
    time/rollout_s      step start -> the last training episode ended (critical path)
    time/credit_wait_s  the last training episode ended -> credit complete (critical path)
    time/judge_s        sum over judge calls of their duration (busy; calls overlap)
    time/verify_s       wall time with at least one continuation running (busy; overlaps rollouts)
    prover/cancelled_continuations  speculative continuations started, then cancelled as wrong
"""

from __future__ import annotations

import collections
import dataclasses
import queue
import threading
import time
from typing import Any, Sequence

from prover_jax.credit.base import CreditMethod, CreditOutput
from prover_jax.envs.pool import EnvPool
from prover_jax.credit.prover import shortest_success
from prover_jax.judges.base import Proposal
from prover_jax.rollout.loop import Rollout
from prover_jax.rollout.trajectory import Trajectory

TIMEOUT_REASON = "timeout"


class StepPipeline:
    def __init__(self, rollout: Rollout, pool: EnvPool, credit: CreditMethod, verify_pool: EnvPool | None = None,
                 judge_timeout_s: float = 300.0, judge_workers: int = 16, speculate: bool = False):
        if judge_timeout_s <= 0 or judge_workers < 1:
            raise ValueError(f"judge.timeout_s must be > 0 and judge.max_concurrency >= 1, got "
                             f"{judge_timeout_s} and {judge_workers}")
        self.rollout, self.pool, self.credit, self.verify_pool = rollout, pool, credit, verify_pool
        self.judge_timeout_s, self.judge_workers = float(judge_timeout_s), int(judge_workers)
        self.verifies = verify_pool is not None and hasattr(credit, "judge_group")
        self.speculate = bool(speculate) and self.verifies and getattr(credit.judge, "local", False)
        if self.verifies and credit.config.prover.k > verify_pool.num_envs:
            raise ValueError(f"K={credit.config.prover.k} continuations exceed the verification pool "
                             f"({verify_pool.num_envs} envs)")

    def run(self, seeds: Sequence[int], uids: Sequence[int], group_size: int
            ) -> tuple[list[Trajectory], CreditOutput]:
        if len(set(int(u) for u in uids)) != len(seeds):
            raise ValueError("StepPipeline.run: one distinct uid per episode")
        if not self.verifies:
            t0 = time.perf_counter()
            trajs = self.rollout.run(self.pool, seeds, uids=uids)
            rollout_s = time.perf_counter() - t0
            out = self.credit.assign(split_groups(trajs, group_size))
            out.metrics["time/rollout_s"] = rollout_s
            return trajs, out
        return _Step(self, seeds, uids, group_size).run()


@dataclasses.dataclass
class _Boundary:
    """K continuations of `traj` from the start of `turn`: queued (children None), then playing in
    `envs` (the envs of those not yet ended)."""
    traj: Trajectory
    turn: int
    k: int
    children: list[Trajectory] | None = None
    envs: list[int] = dataclasses.field(default_factory=list)


class _Step:
    """The state of one pipelined step (see the module docstring)."""

    def __init__(self, pipe: StepPipeline, seeds, uids, G: int):
        self.pipe, self.G = pipe, G
        self.credit = pipe.credit
        self.play = pipe.rollout.play()
        self.ended = collections.Counter()  # group -> episodes ended
        self.results: queue.Queue = queue.Queue()
        self.waiting: collections.deque[int] = collections.deque()  # groups to judge, no worker yet
        self.running: dict[int, tuple[float, float]] = {}  # group -> (deadline, call start)
        self.judged: dict[int, tuple[int, Any, str]] = {}
        self.bounds: dict[tuple[int, int], _Boundary] = {}  # (uid, turn) -> its continuations
        self.queue: collections.deque[tuple[int, int]] = collections.deque()  # boundaries waiting for envs
        self.want: dict[int, list[tuple[int, int]]] = {}  # group -> the boundaries of its proposal
        self.speculative: set[int] = set()  # playing groups to judge again
        self.free_envs = list(range(pipe.verify_pool.num_envs))
        self.live_continuations = self.cancelled = 0
        self.verify_since: float | None = None
        self.verify_s = self.judge_s = 0.0
        self.seeds, self.uids = seeds, uids
        self.index = {int(u): n for n, u in enumerate(uids)}
        self.waiting_groups: collections.deque[int] = collections.deque()  # ended, not yet looked at
        self.trajs: list[Trajectory] = []
        self.last_episode: float | None = None

    def run(self) -> tuple[list[Trajectory], CreditOutput]:
        credit, t0 = self.credit, time.perf_counter()
        if hasattr(credit.judge, "begin_step"):
            credit.judge.begin_step()
        self.trajs = self.pipe.rollout.start(self.play, self.pipe.pool, self.seeds, self.uids, self._episode_ended)
        while True:
            if self.play.busy:
                self.play.advance()
            self._collect(block=not self.play.busy)
            self._speculate()
            self._launch_judges()
            self._launch_continuations()
            if not (self.play.busy or self.running or self.waiting or self.waiting_groups or self.queue):
                break
        end = time.perf_counter()
        last = self.last_episode if self.last_episode is not None else end
        times = {"time/rollout_s": last - t0, "time/credit_wait_s": end - last, "time/judge_s": self.judge_s,
                 "time/verify_s": self.verify_s, "prover/cancelled_continuations": self.cancelled}
        groups = split_groups(self.trajs, self.G)
        verified = {g: tuple(self.bounds[key].children for key in keys) for g, keys in self.want.items()}
        return self.trajs, credit.combine(groups, self.judged, verified, times)

    def _group(self, g: int) -> list[Trajectory]:
        return self.trajs[g * self.G:(g + 1) * self.G]

    def _rollouts_done(self) -> bool:
        return sum(self.ended.values()) == len(self.seeds)

    # Events.
    def _episode_ended(self, traj: Trajectory, env: int) -> None:
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
        """Groups still playing, judged on what they played so far (unfinished = failed so far)."""
        for g in sorted(self.speculative):
            group = self._group(g)
            out = self.credit.judge_group(group) if self.credit.is_eligible(group) else None
            self._want(g, out)
        self.speculative.clear()

    def _launch_judges(self) -> None:
        while self.waiting_groups:  # groups that ended: eligible ones wait for a judge
            g = self.waiting_groups.popleft()
            if self.credit.is_eligible(self._group(g)):
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
                    out = self.credit.judge_group(group)
                except BaseException as e:  # noqa: BLE001  (judge_group itself never raises on judge errors)
                    out = e
                self.results.put((g, out, time.perf_counter()))

            threading.Thread(target=work, name=f"judge-group-{g}", daemon=True).start()

    def _collect(self, block: bool) -> None:
        """Judge answers that arrived (waiting for the next one when nothing else can progress), and
        judges past their deadline dropped."""
        timeout = None
        if block and self.running:
            timeout = max(0.0, min(d for d, _ in self.running.values()) - time.perf_counter())
        while True:
            try:
                g, out, t_end = self.results.get(block=timeout is not None, timeout=timeout)
            except queue.Empty:
                break
            timeout = None
            if g not in self.running:  # answered after its timeout: already dropped
                continue
            _, started = self.running.pop(g)
            self.judge_s += t_end - started
            if isinstance(out, BaseException):
                raise out
            self.judged[g] = out
            self._want(g, out)
        now = time.perf_counter()
        for g, (deadline, started) in list(self.running.items()):
            if now >= deadline:
                del self.running[g]
                self.judge_s += now - started
                i = shortest_success(self._group(g))
                self.judged[g] = (i, Proposal(None, TIMEOUT_REASON, rationale=(
                    f"no answer within judge.timeout_s={self.pipe.judge_timeout_s:g} s")), TIMEOUT_REASON)
                self._want(g, None)

    # Continuations.
    def _want(self, g: int, judged: tuple[int, Any, str] | None) -> None:
        """Group g's continuations become those of `judged`'s proposal (none unless it is valid):
        boundaries it shares with the previous proposal are kept, the others cancelled or queued."""
        starts = []
        if judged is not None and judged[2] == "ok":
            starts = self.credit.starts(self._group(g)[judged[0]], judged[1].segment)
        keys = [(t.uid, turn) for t, turn, _ in starts]
        for key in self.want.pop(g, []):
            if key not in keys:
                self._drop(key)
        for (t, turn, k), key in zip(starts, keys):
            if key not in self.bounds:
                self.bounds[key] = _Boundary(t, turn, k)
                self.queue.append(key)
        if keys:
            self.want[g] = keys

    def _drop(self, key: tuple[int, int]) -> None:
        b = self.bounds.pop(key)
        if b.children is None:
            self.queue.remove(key)
            return
        self.cancelled += b.k
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
        while self.queue and len(self.free_envs) >= self.bounds[self.queue[0]].k:
            b = self.bounds[self.queue.popleft()]
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
