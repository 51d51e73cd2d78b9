"""Offline continuous batching over an `Engine`: queueing, stop conditions, extension and fork.

    driver = Driver(engine, eos_ids=cfg.eos_ids, decode_fn=tokenizer.decode)
    [[c]] = driver.run([Request(prompt_ids, SamplingParams(temperature=1.0), max_new_tokens=256, seed=7,
                                stop_strings=("</action>",), keep_context=True)])
    [[c2]] = driver.run([Request(observation_ids, context=c.context)])  # EXTENSION: new tokens only
    group = driver.run([Request(prompt_ids, SamplingParams(1.0), num_samples=8)])[0]  # FORK

Or incrementally, as the rollout loop does: `submit` requests at any time; each `step` admits queued
work into free slots (one batched prefill per prompt-length bucket), advances every busy slot by one
token and returns the samples that finished.

A sample ends at an EOS / stop id or when its text ends in a stop string (the token completing it is
kept, as the last token), after max_new_tokens tokens, or when its slot's cache is full. With
`keep_context`, the finished sequence comes back as a `Context`: its cache holds everything but the
last token, so a later request with `context=` prefills only [last token] + its new prompt on top of
it; a 30-turn episode never re-prefills its history. With `num_samples=K`, the prompt is prefilled
once and its cache copied into K slots (sample j draws with fold_in(PRNGKey(seed), j)). A request's
completions depend only on the request and the weights, not on the rest of the batch.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable, Sequence

import jax
import numpy as np

from prover_jax.sampling.engine import Engine, Prefix, bucket
from prover_jax.sampling.sampler import SamplingParams

STOP, LENGTH, CACHE_FULL = "stop", "length", "cache_full"


@dataclasses.dataclass(frozen=True)
class Context:
    """A live sequence kept on device: its cache (every token but the last) and its last token.
    `length` counts all its tokens, the last included."""

    prefix: Prefix
    length: int
    last_token: int


@dataclasses.dataclass(frozen=True)
class Request:
    """One generation request.

    prompt: token ids to add (after `context`'s sequence when given; may then be empty).
    sampling / seed: controls and PRNG seed; num_samples: K samples of the same prompt (a fork).
    max_new_tokens: budget per sample; stop_strings / stop_ids: extra end conditions (stop strings
    need the driver's `decode_fn`). keep_context: return each finished sequence as a Context.
    """

    prompt: Sequence[int]
    sampling: SamplingParams = SamplingParams()
    max_new_tokens: int = 64
    seed: int = 0
    num_samples: int = 1
    stop_strings: tuple[str, ...] = ()
    stop_ids: tuple[int, ...] = ()
    context: Context | None = None
    keep_context: bool = False

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {self.num_samples}")
        if isinstance(self.stop_strings, str):
            raise ValueError("stop_strings must be a sequence of strings, not one string")
        if any(not isinstance(s, str) or not s for s in self.stop_strings):
            raise ValueError(f"stop_strings must be non-empty strings, got {self.stop_strings!r}")
        if self.context is not None and not isinstance(self.context, Context):
            raise ValueError(f"context must be a Context from a finished completion, got "
                             f"{type(self.context).__name__}")


@dataclasses.dataclass
class Completion:
    """Generated tokens, their logprobs under the raw policy, and why generation ended
    ('stop': EOS / stop id / stop string, 'length': max_new_tokens, 'cache_full': max_target_length
    reached). `stop` is the stop string or id that matched; `context` the kept sequence."""

    tokens: list[int]
    logprobs: list[float]
    finish_reason: str | None = None
    stop: str | int | None = None
    context: Context | None = None


@dataclasses.dataclass(frozen=True)
class Finished:
    """Sample `sample` of the request submitted as `ticket` is done."""

    ticket: int
    sample: int
    completion: Completion


@dataclasses.dataclass
class _Job:
    ticket: int
    request: Request
    tokens: np.ndarray  # what to prefill: [context's last token] + prompt
    length0: int  # sequence length after the prefill (tokens in the cache)


@dataclasses.dataclass
class _Sample:
    job: _Job
    index: int
    completion: Completion


class Driver:
    """Runs requests to completion with continuous batching over all of the engine's slots.

    Args:
        engine: the decode engine.
        params: weights passed to the engine (default: `engine.load_params()`); see `update_params`.
        eos_ids: token ids that end every request.
        decode_fn: token ids -> text, needed for stop strings.
        min_bucket: prompt pieces are padded to powers of two >= min_bucket (capped at
            max_prefill_length), bounding the number of prefill compilations.
    """

    def __init__(self, engine: Engine, params: Any = None, eos_ids: Sequence[int] = (),
                 decode_fn: Callable[[list[int]], str] | None = None, min_bucket: int = 8):
        self.engine = engine
        self.params = engine.load_params() if params is None else params
        self.eos_ids = frozenset(int(i) for i in eos_ids)
        self.decode_fn = decode_fn
        self.min_bucket = min_bucket
        self._state = None
        self._queue: collections.deque[_Job] = collections.deque()
        self._inserts: collections.deque[tuple[Prefix, int, _Sample]] = collections.deque()
        self._busy: dict[int, _Sample] = {}
        self._done: list[Finished] = []
        self._tickets = 0
        self.stats = collections.Counter()

    def update_params(self, params: Any) -> None:
        """New weights for the next steps (same shapes and shardings: nothing recompiles). Samples
        in flight continue with the new weights."""
        self.params = params

    @property
    def idle(self) -> bool:
        return not (self._queue or self._inserts or self._busy)

    def _state_now(self):
        if self._state is None:
            self._state = self.engine.init_decode_state()
        return self._state

    # Submission.
    def _job(self, request: Request) -> _Job:
        """Validates `request` (ValueError naming the problem) and turns it into a job."""
        if not isinstance(request, Request):
            raise ValueError(f"expected a Request, got {type(request).__name__}")
        prompt = np.asarray(list(request.prompt) if not isinstance(request.prompt, np.ndarray)
                            else request.prompt).reshape(-1)
        if prompt.size == 0:
            prompt = prompt.astype(np.int32)
        self.engine.check_tokens(prompt)
        ctx = request.context
        if ctx is None and prompt.size == 0:
            raise ValueError("empty prompt")
        tokens = prompt.astype(np.int32) if ctx is None else np.concatenate(
            [[ctx.last_token], prompt]).astype(np.int32)
        length0 = (0 if ctx is None else ctx.length) + prompt.size
        if length0 > self.engine.max_target_length:
            raise ValueError(f"sequence of {length0} tokens exceeds max_target_length "
                             f"{self.engine.max_target_length}")
        if request.stop_strings and self.decode_fn is None:
            raise ValueError("stop_strings need a Driver built with decode_fn")
        return _Job(-1, request, tokens, length0)

    def submit(self, request: Request) -> int:
        """Queues `request`; returns its ticket. Bad requests raise ValueError and queue nothing."""
        job = self._job(request)
        job.ticket = self._tickets
        self._tickets += 1
        self._queue.append(job)
        return job.ticket

    def run(self, requests: Sequence[Request]) -> list[list[Completion]]:
        """completions[i][j]: sample j of requests[i]. All requests are validated before any runs."""
        jobs = [self._job(r) for r in requests]
        first = self._tickets
        for job in jobs:
            job.ticket = self._tickets
            self._tickets += 1
            self._queue.append(job)
        results = [[None] * r.num_samples for r in requests]
        left = sum(r.num_samples for r in requests)
        other = []
        while left:
            for f in self.step():
                if first <= f.ticket < first + len(jobs):
                    results[f.ticket - first][f.sample] = f.completion
                    left -= 1
                else:
                    other.append(f)
        self._done.extend(other)  # finished work of earlier submits: returned by the next step()
        return results

    # Stepping.
    def step(self) -> list[Finished]:
        """Admits queued work into free slots, advances every busy slot by one token; returns the
        samples that finished (also those finished at prefill)."""
        done, self._done = self._done, []
        self._admit(done)
        if not self._busy:
            return done
        engine = self.engine
        self._state, result = engine.generate(self.params, self._state)
        tokens, logprobs, valid = jax.device_get((result.tokens, result.logprobs, result.valid))
        self.stats["decode_steps"] += 1
        self.stats["decode_tokens"] += len(self._busy)
        for slot, s in list(self._busy.items()):
            c = s.completion
            if valid[slot]:
                c.tokens.append(int(tokens[slot]))
                c.logprobs.append(float(logprobs[slot]))
                ended = self._check_end(s)
            else:
                c.finish_reason, ended = CACHE_FULL, True
            if ended:
                if s.job.request.keep_context and c.finish_reason != CACHE_FULL:
                    c.context = self._context(engine.extract(self._state, slot), s)
                self._state = engine.deactivate(self._state, slot)
                engine.free_resource(slot)
                del self._busy[slot]
                done.append(Finished(s.job.ticket, s.index, c))
        return done

    def _context(self, prefix: Prefix, s: _Sample) -> Context:
        c = s.completion
        return Context(prefix=prefix, length=s.job.length0 + len(c.tokens), last_token=c.tokens[-1])

    def _check_end(self, s: _Sample) -> bool:
        c, r = s.completion, s.job.request
        last = c.tokens[-1]
        if last in self.eos_ids or last in r.stop_ids:
            c.finish_reason, c.stop = STOP, last
        elif r.stop_strings:
            window = max(len(x.encode()) for x in r.stop_strings) + 1  # >= 1 byte per token
            text = self.decode_fn(c.tokens[-window:])
            hit = [x for x in r.stop_strings if x in text]
            if hit:
                c.finish_reason, c.stop = STOP, hit[0]
        if c.finish_reason is None and len(c.tokens) >= r.max_new_tokens:
            c.finish_reason = LENGTH
        return c.finish_reason is not None

    def _admit(self, done: list[Finished]) -> None:
        engine = self.engine
        free = [s for s in range(engine.max_concurrent_decodes) if s not in self._busy]
        wanted = len(self._inserts)
        jobs = []
        while self._queue and wanted < len(free):
            job = self._queue.popleft()
            jobs.append(job)
            wanted += job.request.num_samples
        if jobs:
            self._prefill(jobs, done)
        if not self._inserts or not free:
            return
        state = self._state_now()
        by_prefix: dict[int, tuple[Prefix, list[int], list[int]]] = {}
        while self._inserts and free:
            prefix, j, s = self._inserts.popleft()
            slot = free.pop(0)
            entry = by_prefix.setdefault(id(prefix), (prefix, [], []))
            entry[1].append(slot)
            entry[2].append(j)
            self._busy[slot] = s
        for prefix, slots, samples in by_prefix.values():
            state = engine.bulk_insert(prefix, state, slots, samples)
        self._state = state

    def _prefill(self, jobs: list[_Job], done: list[Finished]) -> None:
        """Prefills `jobs` (one batched call per length bucket), samples their first tokens and
        queues the samples that go on for insertion."""
        engine, step = self.engine, self.engine.max_prefill_length
        groups: dict[int, list[tuple[_Job, Prefix | None, np.ndarray]]] = {}
        for job in jobs:
            ctx = job.request.context
            existing = None if ctx is None else ctx.prefix
            tokens = job.tokens
            while tokens.size > step:  # leading pieces of a long prompt, one by one
                existing, _ = engine.prefill(params=self.params, existing_prefix=existing,
                                             padded_tokens=tokens[:step], true_length=step)
                tokens = tokens[step:]
                self.stats["prefill_calls"] += 1
                self.stats["prefill_tokens"] += step
            size = min(bucket(tokens.size, self.min_bucket), step)
            groups.setdefault(size, []).append((job, existing, tokens))
        for size, group in groups.items():
            padded = np.zeros((len(group), size), np.int32)
            for b, (_, _, tokens) in enumerate(group):
                padded[b, :tokens.size] = tokens
            prefix = engine.prefill_batch(
                params=self.params, padded_tokens=padded, true_lengths=[t.size for _, _, t in group],
                samplers=[j.request.sampling for j, _, _ in group],
                rngs=[j.request.seed for j, _, _ in group],
                num_samples=[j.request.num_samples for j, _, _ in group],
                existing_prefixes=[e for _, e, _ in group])
            self.stats["prefill_calls"] += 1
            self.stats["prefill_tokens"] += sum(t.size for _, _, t in group)
            first, logprob = jax.device_get((prefix.token_N, prefix.logprob_N))
            j = 0
            for job, _, _ in group:
                for i in range(job.request.num_samples):
                    s = _Sample(job, i, Completion([int(first[j])], [float(logprob[j])]))
                    if self._check_end(s):
                        if job.request.keep_context:
                            s.completion.context = self._context(engine.select(prefix, j), s)
                        done.append(Finished(job.ticket, i, s.completion))
                    else:
                        self._inserts.append((prefix, j, s))
                    j += 1
