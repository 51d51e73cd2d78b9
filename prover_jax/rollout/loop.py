"""Multi-turn rollouts of a policy in a pool of environments, and continuations from past turns.

    rollout = Rollout(driver, tokenizer, RolloutConfig(sampling=SamplingParams(temperature=1.0)))
    group = rollout.run(pool, seeds=[7] * 8)          # 8 episodes of task 7 (pool.num_envs >= 8)
    more = rollout.continue_from(group[0], turn=3, k=8, pool=pool)   # 8 continuations from turn 3

Every episode is one append-only token sequence (see `chat`). Episodes sharing an opening (a GRPO
group; the K continuations of one boundary) are one FORK request: prefilled once. Each later turn is an
EXTENSION of the episode's live decode cache by [last token] + observation tokens. A response ends at
the family's stop strings (e.g. `</action>`), the template's end token, or max_action_tokens; the env
extracts the action (malformed -> valid=False feedback, the episode goes on) and steps. An episode ends
when the env is done, after max_turns turns, at its max_invalid-th inadmissible action when that is set
(`invalid_limit`, unsuccessful), or when the next turn would not fit the engine's cache (`context_limit`,
unsuccessful).

`expert=True` plays the family's expert through the same loop (responses = rendered expert actions,
logprobs 0), which gives demonstrations tokenised exactly like rollouts.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

from prover_jax.envs.base import PromptSpec
from prover_jax.envs.pool import EnvPool, StepResult
from prover_jax.rollout.chat import ChatTemplate, Tokenizer, observation_text
from prover_jax.rollout.trajectory import CONTEXT_LIMIT, DONE, INVALID_LIMIT, TURN_LIMIT, Trajectory, Turn
from prover_jax.sampling import STOP, Completion, Driver, Request, SamplingParams


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
    """sampling: policy sampling controls; max_action_tokens: token budget of one response;
    max_turns: turn limit (None: the family's); seed: base of every request's PRNG seed;
    system_prompt: replaces the family's system prompt (None: the family's own); max_invalid: the
    episode ends, unsuccessful, at its max_invalid-th inadmissible action (0: never)."""

    sampling: SamplingParams = SamplingParams(temperature=1.0)
    max_action_tokens: int = 128
    max_turns: int | None = None
    template: ChatTemplate = ChatTemplate()
    seed: int = 0
    system_prompt: str | None = None
    max_invalid: int = 0

    def __post_init__(self):
        if int(self.max_invalid) != self.max_invalid or self.max_invalid < 0:
            raise ValueError(f"rollout.max_invalid_actions must be an integer >= 0, got {self.max_invalid!r}")


def mix_seed(*parts: int) -> int:
    """A 31-bit seed from integer parts (order matters)."""
    return int(np.random.SeedSequence([int(p) & 0xFFFFFFFF for p in parts]).generate_state(1)[0] >> 1)


@dataclasses.dataclass
class _Episode:
    traj: Trajectory
    env: int  # index in the pool
    pool: EnvPool
    context: Any = None  # the driver's live Context
    on_end: Callable[[Trajectory, int], None] | None = None


class Rollout:
    """Runs episodes of a policy (a `Driver` over the policy's engine) in an `EnvPool`."""

    def __init__(self, driver: Driver, tokenizer: Tokenizer, config: RolloutConfig = RolloutConfig()):
        self.driver, self.tokenizer, self.config = driver, tokenizer, config
        if driver is not None and driver.decode_fn is None:
            driver.tokenizer, driver.decode_fn = tokenizer, tokenizer.decode
        end = tokenizer.encode(config.template.end, add_special_tokens=False)
        if len(end) != 1:
            raise ValueError(f"the template's end marker {config.template.end!r} must be one token of the "
                             f"tokenizer, got ids {end}")
        self.end_id = end[0]
        self._uids = 0
        self._continued: dict[tuple[int, int], int] = {}  # (uid, turn) -> continuations started

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    # Public API.
    def run(self, pool: EnvPool, seeds: Sequence[int], expert: bool = False,
            uids: Sequence[int] | None = None) -> list[Trajectory]:
        """One episode per seed, episode i in env i of `pool` (episodes with equal seeds form a group
        and share one prefill). Returns the finished trajectories in seed order.

        `uids` (default: a counter) name the episodes; sampling seeds derive from (config.seed, uid,
        turn) only, so a trainer that passes the same global uids on any number of hosts samples the
        same episodes."""
        play = self.play(expert)
        trajs = self.start(play, pool, seeds, uids)
        play.run()
        return trajs

    def start(self, play: "Play", pool: EnvPool, seeds: Sequence[int], uids: Sequence[int] | None = None,
              on_end: Callable[[Trajectory, int], None] | None = None) -> list[Trajectory]:
        """`run`'s episodes started in `play` (on_end called as each one ends); returns their
        trajectories, complete once they ended."""
        if len(seeds) > pool.num_envs:
            raise ValueError(f"{len(seeds)} episodes need as many envs; the pool has {pool.num_envs}")
        if uids is not None and len(uids) != len(seeds):
            raise ValueError(f"{len(uids)} uids for {len(seeds)} episodes")
        spec = pool.prompt
        system = spec.system if self.config.system_prompt is None else self.config.system_prompt
        first = pool.reset_some({i: s for i, s in enumerate(seeds)})
        snaps = pool.snapshots(range(len(seeds)))
        episodes, forks = [], {}
        for i, seed in enumerate(seeds):
            obs, info = first[i]
            uid = self._new_uid() if uids is None else int(uids[i])
            traj = Trajectory(env=pool.name, seed=int(seed), uid=uid, task=obs)
            traj.snapshots.append(snaps[i])
            opening = self.config.template.opening(
                system, observation_text(obs, info, spec.show_admissible, 0, self._max_turns(spec)))
            traj.append(self.encode(opening), policy=False)
            episodes.append(_Episode(traj, i, pool))
            forks.setdefault(tuple(traj.tokens), []).append(episodes[-1])
        play.add(pool, [(list(k), v) for k, v in forks.items()], on_end)
        return [e.traj for e in episodes]

    def continue_from(self, trajectory: Trajectory, turn: int, k: int, pool: EnvPool,
                      expert: bool = False) -> list[Trajectory]:
        """K continuations of `trajectory` from the start of turn `turn` (env restored to
        snapshots[turn], agent history = tokens before that turn), each run to its end."""
        return self.continue_many([(trajectory, turn, k)], pool, expert)[0]

    def continue_many(self, starts: Sequence[tuple[Trajectory, int, int]], pool: EnvPool,
                      expert: bool = False) -> list[list[Trajectory]]:
        """`continue_from` for many (trajectory, turn, k) at once, all in one batch of the driver."""
        total = sum(k for _, _, k in starts)
        if total > pool.num_envs:
            raise ValueError(f"{total} continuations need as many envs; the pool has {pool.num_envs}")
        play = self.play(expert)
        out, env = [], 0
        for traj, turn, k in starts:
            out.append(play.add_continuations(pool, traj, turn, k, list(range(env, env + k))))
            env += k
        play.run()
        return out

    def play(self, expert: bool = False) -> "Play":
        """An incremental episode loop over this rollout's driver (see `Play`)."""
        return Play(self, expert)

    # The loop.
    def _new_uid(self) -> int:
        self._uids += 1
        return self._uids - 1

    def _max_turns(self, spec: PromptSpec) -> int:
        return spec.max_turns if self.config.max_turns is None else self.config.max_turns

    def _request(self, prompt, ep_or_seed, turn: int, spec: PromptSpec, context=None,
                 num_samples: int = 1) -> Request:
        cfg = self.config
        return Request(prompt, cfg.sampling, max_new_tokens=cfg.max_action_tokens,
                       seed=mix_seed(cfg.seed, ep_or_seed, turn), num_samples=num_samples,
                       stop_strings=spec.stop_strings, stop_ids=(self.end_id,), context=context,
                       keep_context=True)

    def _fits(self, ep: _Episode, extra: int) -> bool:
        limit = None if self.driver is None else self.driver.engine.max_target_length
        return limit is None or len(ep.traj.tokens) + extra + self.config.max_action_tokens <= limit

    def _expert_responses(self, pool: EnvPool, episodes: list[_Episode]):
        responses = pool.call("expert_response", [ep.env for ep in episodes])
        out = []
        for ep, text in zip(episodes, responses):
            if text is None:
                raise RuntimeError(f"env {ep.env} ({pool.name}) has no expert action in this state")
            tokens = self.encode(text)
            out.append((ep, Completion(tokens, [0.0] * len(tokens), STOP, None)))
        return out

    def _record(self, ep: _Episode, c: Completion, step: StepResult, spec: PromptSpec) -> list[int] | None:
        """Appends the turn (response `c`, env `step`) to the trajectory; returns the next prompt
        tokens, or None if it ended. `spec`: the prompt spec of the episode's pool."""
        info = step.info
        traj = ep.traj
        start = len(traj.tokens)
        traj.append(c.tokens, policy=True, logprobs=c.logprobs)
        traj.turns.append(Turn(start=start, end=len(traj.tokens), response=self.tokenizer.decode(c.tokens),
                               action=step.action, valid=bool(info.get("valid", False)),
                               observation=step.observation, reward=float(step.reward),
                               finish_reason=c.finish_reason))
        traj.snapshots.append(step.snapshot)
        traj.success, traj.score = bool(info.get("success", False)), float(info.get("score", 0.0))
        ep.context = c.context
        if step.done:
            return self._finish(ep, DONE)
        limit = self.config.max_invalid
        if limit and not traj.turns[-1].valid and sum(not t.valid for t in traj.turns) >= limit:
            return self._finish(ep, INVALID_LIMIT)
        if traj.num_turns >= self._max_turns(spec):
            return self._finish(ep, TURN_LIMIT)
        closed = c.finish_reason == STOP and c.stop == self.end_id
        text = self.config.template.after_response(
            observation_text(step.observation, info, spec.show_admissible, traj.num_turns, self._max_turns(spec)),
            closed)
        tokens = self.encode(text)
        if not self._fits(ep, len(tokens)):
            return self._finish(ep, CONTEXT_LIMIT)
        traj.append(tokens, policy=False)
        return tokens

    @staticmethod
    def _finish(ep: _Episode, why: str) -> None:
        ep.traj.termination = why
        ep.context = None
        return None


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

    def __init__(self, rollout: Rollout, expert: bool = False):
        self.rollout, self.expert = rollout, expert
        self.live: dict[int, list[_Episode | None]] = {}  # driver ticket -> episodes by sample index
        self.waiting: list[_Episode] = []  # expert mode: episodes whose next response is due

    @property
    def busy(self) -> bool:
        return bool(self.live or self.waiting)

    def add(self, pool: EnvPool, forks: list[tuple[list[int], list[_Episode]]],
            on_end: Callable[[Trajectory, int], None] | None = None) -> None:
        """Starts every episode of `forks` (groups sharing an opening token history)."""
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
                request = ro._request(history, group[0].traj.uid, len(group[0].traj.turns), spec,
                                      num_samples=len(group))
                self.live[ro.driver.submit(request)] = list(group)

    def add_continuations(self, pool: EnvPool, traj: Trajectory, turn: int, k: int, envs: Sequence[int],
                          on_end: Callable[[Trajectory, int], None] | None = None) -> list[Trajectory]:
        """K continuations of `traj` from the start of `turn` in envs `envs` of `pool` (restored to
        snapshots[turn]); returns their trajectories (complete once each one's on_end ran)."""
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
                               snapshots=list(traj.snapshots[:turn + 1]), parent=(traj.uid, turn))
            group.append(_Episode(child, env, pool))
        pool.restore_some({env: traj.snapshots[turn] for env in envs})
        self.add(pool, [(history, group)], on_end)
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
        ready: list[tuple[_Episode, Completion]] = []
        if self.expert:
            by_pool: dict[int, list[_Episode]] = {}
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
        by_pool: dict[int, list[tuple[_Episode, Completion]]] = {}
        for ep, c in ready:
            by_pool.setdefault(id(ep.pool), []).append((ep, c))
        for pairs in by_pool.values():
            pool = pairs[0][0].pool
            spec = pool.prompt
            steps = pool.act({ep.env: ro.tokenizer.decode(c.tokens) for ep, c in pairs})
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

    def _end(self, ep: _Episode, why: str) -> None:
        self.rollout._finish(ep, why)
        self._ended(ep)

    @staticmethod
    def _ended(ep: _Episode) -> None:
        if ep.on_end is not None:
            ep.on_end(ep.traj, ep.env)
