"""The incremental episode loop: `Play` takes episodes and continuations while it runs and acts on
every finished response (one batched env step per pool); `Rollout` (loop.py) owns the turn logic it
calls. `mix_seed` derives every sampling seed from integer parts (episode uids, turns).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

from prover_jax.envs.pool import EnvPool
from prover_jax.rollout.trajectory import CONTEXT_LIMIT, Trajectory
from prover_jax.sampling import Completion, Context


def mix_seed(*parts: int) -> int:
    """A 31-bit seed from integer parts (order matters)."""
    return int(np.random.SeedSequence([int(p) & 0xFFFFFFFF for p in parts]).generate_state(1)[0] >> 1)


@dataclasses.dataclass
class Episode:
    """An episode being played: its record, its env (index in `pool`), the callback at its end."""
    traj: Trajectory
    env: int  # index in the pool
    pool: EnvPool
    on_end: Callable[[Trajectory, int], None] | None = None


class Play:
    """An episode loop that takes new work while it runs: episodes (`add`) and continuations
    (`add_continuations`) join at any time, in any pool, with a callback on_end(trajectory, env)
    when each one ends.

        play = rollout.play()
        play.add(pool, forks, on_end=lambda traj, env: ...)
        while play.busy:
            play.advance()             # one driver step, then one batched env step per pool

`Rollout.run` and `continue_many` are one `add` + `run`; an RL step that verifies while it rolls
out calls `advance` itself, adds continuations from the callbacks and may stop a boundary's batch
again (`cancel_continuations`).
"""

    def __init__(self, rollout: Any, expert: bool = False):  # the loop.Rollout that builds it
        self.rollout, self.expert = rollout, expert
        self.live: dict[int, list[Episode | None]] = {}  # driver ticket -> episodes by sample index
        self.waiting: list[Episode] = []  # expert mode: episodes whose next response is due

    @property
    def busy(self) -> bool:
        return bool(self.live or self.waiting)

    def add(self, pool: EnvPool, forks: list[tuple[list[int], list[Episode]]],
            on_end: Callable[[Trajectory, int], None] | None = None, context: Context | None = None) -> None:
        """Starts every episode of `forks` (groups sharing an opening: its tokens, or with `context`
        the tokens after that cache, which one fork then extends)."""
        ro = self.rollout
        spec = None if self.expert else pool.prompt
        for history, group in forks:
            for ep in group:
                ep.pool, ep.on_end = pool, on_end
                if not ro._fits(ep, 0):
                    self._end(ep, CONTEXT_LIMIT)
            group = [ep for ep in group if not ep.traj.finished]
            if not group:
                continue
            if self.expert:
                self.waiting += group
            else:
                request = ro._request(history, group[0].traj.uid, len(group[0].traj.turns), spec, context=context,
                                      num_samples=len(group))
                self.live[ro.driver.submit(request)] = list(group)

    def add_continuations(self, pool: EnvPool, traj: Trajectory, turn: int, k: int, envs: Sequence[int],
                          on_end: Callable[[Trajectory, int], None] | None = None) -> list[Trajectory]:
        """K continuations of `traj` from the start of `turn` in envs `envs` of `pool` (restored to
        snapshots[turn]); returns their trajectories (complete once each one's on_end ran). They
        extend traj.contexts[turn - 1] when it was kept, else prefill the history from scratch."""
        ro = self.rollout
        if not 0 <= turn < traj.num_turns:
            raise ValueError(f"turn {turn} outside the trajectory's turns [0, {traj.num_turns})")
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if len(envs) != k:
            raise ValueError(f"{len(envs)} envs for {k} continuations")
        history = traj.history_before(turn)
        done_before = ro._continued.get((traj.uid, turn), 0)
        ro._continued[(traj.uid, turn)] = done_before + k
        group = []
        for j, env in zip(range(done_before, done_before + k), envs):
            child = Trajectory(env=traj.env, seed=traj.seed, uid=mix_seed(traj.uid, turn, j, 1), task=traj.task,
                               tokens=list(history), policy_mask=traj.policy_mask[:len(history)],
                               logprobs=traj.logprobs[:len(history)], turns=list(traj.turns[:turn]),
                               snapshots=list(traj.snapshots[:turn + 1]), parent=(traj.uid, turn),
                               contexts=[None] * turn)
            group.append(Episode(child, env, pool))
        pool.restore_some({env: traj.snapshots[turn] for env in envs})
        kept = traj.contexts[turn - 1] if 0 < turn <= len(traj.contexts) else None
        prompt = history if kept is None else history[traj.turns[turn - 1].end:]
        self.add(pool, [(prompt, group)], on_end, kept)
        return [e.traj for e in group]

    def cancel_continuations(self, children: Sequence[Trajectory]) -> int:
        """Stops `children`, the whole batch of the latest `add_continuations` from one boundary: their
        samples stop decoding, their on_end never runs (their envs are the caller's again), and the
        boundary's count goes back, so continuations started there later are the ones these would
        have been (the same uids and sampling seeds). Returns how many were still playing."""
        parents = {c.parent for c in children}
        if len(parents) != 1 or None in parents:
            raise ValueError("cancel_continuations: the children of one boundary, all of them")
        (uid, turn), k = parents.pop(), len(children)
        started = self.rollout._continued.get((uid, turn), 0)
        if started < k or mix_seed(uid, turn, started - 1, 1) != children[-1].uid:
            raise ValueError(f"cancel_continuations: not the latest {k} continuations of ({uid}, {turn})")
        ids, playing = {id(c) for c in children}, 0
        for ticket, eps in list(self.live.items()):
            mine = [e for e in eps if e is not None and id(e.traj) in ids]
            if not mine:
                continue
            if len(mine) != sum(e is not None for e in eps):
                raise ValueError("cancel_continuations: a request shared with other episodes")
            self.rollout.driver.cancel(ticket)
            del self.live[ticket]
            playing += len(mine)
        self.rollout._continued[(uid, turn)] = started - k
        return playing

    def run(self) -> None:
        while self.busy:
            self.advance()

    def advance(self) -> int:
        """One driver step (or, in expert mode, one expert response for every waiting episode), then
        the finished responses acted on, one batched env step per pool. Returns how many acted."""
        ro = self.rollout
        ready: list[tuple[Episode, Completion]] = []
        if self.expert:
            by_pool: dict[int, list[Episode]] = {}
            for ep in self.waiting:
                by_pool.setdefault(id(ep.pool), []).append(ep)
            self.waiting = []
            for eps in by_pool.values():
                ready += ro._expert_responses(eps[0].pool, eps)
        else:
            for f in ro.driver.step():
                eps = self.live[f.ticket]
                ready.append((eps[f.sample], f.completion))
                eps[f.sample] = None
                if all(e is None for e in eps):
                    del self.live[f.ticket]
        if not ready:
            return 0
        by_pool: dict[int, list[tuple[Episode, Completion]]] = {}
        for ep, c in ready:
            by_pool.setdefault(id(ep.pool), []).append((ep, c))
        for pairs in by_pool.values():
            pool = pairs[0][0].pool
            spec = pool.prompt
            steps = pool.act({ep.env: ro.config.template.answer(ro.tokenizer.decode(c.tokens)) for ep, c in pairs})
            for ep, c in pairs:
                nxt = ro._record(ep, c, steps[ep.env], spec)
                if nxt is None:
                    self._ended(ep)
                elif self.expert:
                    self.waiting.append(ep)
                else:
                    request = ro._request(nxt, ep.traj.uid, len(ep.traj.turns), spec, context=c.context)
                    self.live[ro.driver.submit(request)] = [ep]
        return len(ready)

    def _end(self, ep: Episode, why: str) -> None:
        self.rollout._finish(ep, why)
        self._ended(ep)

    @staticmethod
    def _ended(ep: Episode) -> None:
        if ep.on_end is not None:
            ep.on_end(ep.traj, ep.env)
