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

The request and completion types and the driver's per-job / per-sample records live in driver_types
(re-exported here); this module is the scheduling: admission, batched prefill, dispatch and reading.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Sequence

import jax
import numpy as np

from prover_jax.sampling.driver_types import (CACHE_FULL, LENGTH, STOP, Call, Completion, Context, Finished, Job,
                                              LiveSample, Request, finish)
from prover_jax.sampling.engine import Engine
from prover_jax.sampling.engine_fns import first_row
from prover_jax.sampling.engine_types import MAX_STOP_IDS, MIN_PROMPT_BUCKET, RUNNING, Prefix, all_lengths, bucket
from prover_jax.sampling.sampler import SamplingParams
from prover_jax.sampling.stops import StopSpec, StopStrings, token_bytes
from prover_jax.sampling.warmup import compile_shapes

# driver_types' public names stay importable from here
__all__ = ["CACHE_FULL", "LENGTH", "STOP", "Completion", "Context", "Driver", "Finished", "Request"]


class Driver:
    """Runs requests to completion with continuous batching over all of the engine's slots.

    Args:
        engine: the decode engine.
        params: weights passed to the engine (default: `engine.load_params()`); see `update_params`.
        eos_ids: token ids that end every request.
        decode_fn: token ids -> text; with it (or `tokenizer`) requests may have stop strings.
        tokenizer: an HF tokenizer, for the exact bytes of every token (stop strings); preferred over
            decode_fn, which is asked for one token at a time.
        min_bucket: prompt pieces are padded to powers of two >= min_bucket (capped at
            max_prefill_length), bounding the number of prefill compilations; or to the engine's
            length_buckets when it has them (`Engine.length_for`), never past the cache (`_piece`).
        steps_per_call: decode steps per jitted generate call (end conditions are checked on the
            device after every step; a finished slot waits for the call to end).
        max_stop_strings: distinct stop strings tracked over the driver's life.

    The host never waits for a decode step it just dispatched: `step` dispatches the next call, then
    reads the previous one's tokens (the device computes while the host does bookkeeping), and
    admissions (batched prefills and inserts) are dispatched behind it without reading anything back.
    """

    def __init__(self, engine: Engine, params: Any = None, eos_ids: Sequence[int] = (),
                 decode_fn: Callable[[list[int]], str] | None = None, min_bucket: int = MIN_PROMPT_BUCKET,
                 tokenizer: Any = None, steps_per_call: int = 1, max_stop_strings: int | None = None):
        if steps_per_call < 1:
            raise ValueError(f"steps_per_call must be >= 1, got {steps_per_call}")
        self.engine = engine
        self.params = engine.load_params() if params is None else params
        self.eos_ids = tuple(sorted(frozenset(int(i) for i in eos_ids)))
        if len(self.eos_ids) > MAX_STOP_IDS:
            raise ValueError(f"{len(self.eos_ids)} eos ids exceed {MAX_STOP_IDS}")
        self.decode_fn = decode_fn
        self.tokenizer = tokenizer
        if decode_fn is None and tokenizer is not None:
            self.decode_fn = tokenizer.decode
        self.min_bucket = min_bucket
        self.steps_per_call = int(steps_per_call)
        if max_stop_strings is not None and max_stop_strings != engine.max_stop_strings:
            raise ValueError(f"max_stop_strings {max_stop_strings}: the engine tracks "
                             f"{engine.max_stop_strings} (Engine(max_stop_strings=...))")
        self._stops: StopStrings | None = None
        self._state = None
        self._queue: collections.deque[Job] = collections.deque()
        self._inserts: collections.deque[tuple[Prefix, int, LiveSample]] = collections.deque()
        self._busy: dict[int, LiveSample] = {}
        self._calls: collections.deque[Call] = collections.deque()
        self._firsts: list[LiveSample] = []  # samples whose first token is not read yet
        self._done: list[Finished] = []
        self._tickets = 0
        self.stats = collections.Counter()

    def update_params(self, params: Any) -> None:
        """New weights for the next steps (same shapes and shardings: nothing recompiles). Samples
        in flight continue with the new weights."""
        self.params = params

    def partial(self) -> list[tuple[int, int, Completion]]:
        """(ticket, sample, completion so far) of every sample in a slot: for streaming. The
        completions are the driver's own (their lists grow as steps are read); do not modify them."""
        return [(s.job.ticket, s.index, s.completion) for s in self._busy.values()]

    @property
    def idle(self) -> bool:
        """Nothing queued, running or finished-but-not-returned (a `step` would return nothing)."""
        return not (self._queue or self._inserts or self._busy or self._calls or self._done)

    def _state_now(self):
        if self._state is None:
            self._state = self.engine.init_decode_state()
        return self._state

    def stop_strings(self) -> StopStrings:
        """The registry of stop strings (built on first use from the tokenizer's token bytes)."""
        if self._stops is None:
            if self.tokenizer is not None:
                tokens = token_bytes(self.tokenizer, self.engine.vocab_size)
            else:
                tokens = [self.decode_fn([t]).encode() for t in range(self.engine.vocab_size)]
            self._stops = StopStrings(tokens, capacity=self.engine.max_stop_strings)
        return self._stops

    def warmup(self, stop_strings: Sequence[str] = ()) -> float:
        """Compiles, before any request, every shape the driver can meet (`warmup.compile_shapes`),
        the decode call with `stop_strings` registered (a new stop string later changes the decode
        call's table: one more compile). Returns the seconds it took."""
        for s in stop_strings:
            self.stop_strings().index(s)
        table = None if self._stops is None else self._stops.table()
        return compile_shapes(self.engine, self.params, table, self.min_bucket, self.steps_per_call)

    # Submission.
    def _job(self, request: Request) -> Job:
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
            raise ValueError("stop_strings need a Driver built with decode_fn (or tokenizer)")
        ids = tuple(sorted(set(self.eos_ids) | {int(i) for i in request.stop_ids}))
        if len(ids) > MAX_STOP_IDS:
            raise ValueError(f"{len(ids)} stop ids (eos ids included) exceed {MAX_STOP_IDS}")
        if request.constraint is not None and self.steps_per_call != 1:
            raise ValueError(f"constrained decoding needs steps_per_call=1, the driver has {self.steps_per_call}")
        rows = tuple(self.stop_strings().index(x) for x in request.stop_strings)
        return Job(-1, request, tokens, length0, StopSpec(request.max_new_tokens, ids, rows))

    def submit(self, request: Request) -> int:
        """Queues `request`; returns its ticket. Bad requests raise ValueError and queue nothing."""
        job = self._job(request)
        job.ticket = self._tickets
        self._tickets += 1
        self._queue.append(job)
        return job.ticket

    def cancel(self, ticket: int) -> int:
        """Drops every sample of `ticket` that has not been returned by `step` yet: queued, waiting
        for a slot, or decoding (its slot stops stepping and is free for the next admission). No
        `Finished` of the ticket is returned afterwards. Returns the number of samples dropped; the
        tokens they had sampled add to stats["cancelled_tokens"] (a prefilled sample's first token,
        the tokens read, and those of decode calls already issued, as they are read)."""
        dropped = sum(j.request.num_samples for j in self._queue if j.ticket == ticket)
        sampled = sum(x[2].job.ticket == ticket for x in self._inserts)  # prefilled: the first token drawn
        self._queue = collections.deque(j for j in self._queue if j.ticket != ticket)
        keep = [x for x in self._inserts if x[2].job.ticket != ticket]
        dropped += len(self._inserts) - len(keep)
        self._inserts = collections.deque(keep)
        for slot, s in list(self._busy.items()):
            if s.job.ticket == ticket:
                sampled += len(s.completion.tokens) + (s.first is not None)
                s.done = s.cancelled = True
                del self._busy[slot]
                self._state = self.engine.deactivate(self._state_now(), slot)
                self.engine.free_resource(slot)
                dropped += 1
        self._firsts = [s for s in self._firsts if not s.done]
        kept = [f for f in self._done if f.ticket != ticket]
        dropped += len(self._done) - len(kept)
        sampled += sum(len(f.completion.tokens) for f in self._done if f.ticket == ticket)
        self._done = kept
        self.stats["cancelled"] += dropped
        self.stats["cancelled_tokens"] += sampled
        return dropped

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
        """Dispatches the next decode call for the busy slots, reads the previous call's tokens,
        admits queued work into the freed slots; returns the samples that finished."""
        done, self._done = self._done, []
        if self._busy:
            self._dispatch()
        if len(self._calls) > 1 or (self._calls and not self._busy):
            self._read(self._calls.popleft(), done)
        self._admit()
        if not self._calls and self._busy:  # first call after an idle driver: start the pipeline
            self._dispatch()
        return done

    def _dispatch(self) -> None:
        allowed = None
        if any(s.matcher is not None for s in self._busy.values()):
            # constrained samples: their masks need every token so far (samples finished while
            # catching up are returned by the next step)
            while self._calls:
                self._read(self._calls.popleft(), self._done)
            if self._firsts:
                self._take_firsts(self._firsts, jax.device_get([(s.first[0], s.first[1]) for s in self._firsts]))
                self._firsts = []
            if not self._busy:
                return
            allowed = np.full((self.engine.max_concurrent_decodes, self.engine.mask_words), -1, np.int32)
            for slot, s in self._busy.items():
                if s.matcher is not None:
                    s.matcher.fill_bitmask(allowed[slot])
        table = None if self._stops is None else self._stops.table()
        self._state, result = self.engine.generate(self.params, self._state, stop_table=table,
                                                   steps=self.steps_per_call, allowed_SxW=allowed)
        self._calls.append(Call(result, dict(self._busy)))
        self.stats["decode_calls"] += 1

    def _read(self, call: Call, done: list[Finished]) -> None:
        """Host bookkeeping of one finished call: tokens appended, ended samples finished."""
        r = call.result
        firsts, self._firsts = self._firsts, []
        got = jax.device_get(((r.tokens, r.logprobs, r.valid, r.reason, r.hit),
                              [(s.first[0], s.first[1]) for s in firsts]))
        (tokens, logprobs, valid, reason, hit), first_values = got
        self._take_firsts(firsts, first_values)
        tokens, logprobs, valid = (np.asarray(x).reshape(-1, tokens.shape[-1]) for x in (tokens, logprobs, valid))
        steps = int(valid.sum())
        self.stats["decode_steps"] += tokens.shape[0]
        self.stats["decode_tokens"] += steps
        for slot, s in call.occupants.items():
            if s.done:
                if s.cancelled:  # decoded by a call issued before Driver.cancel
                    self.stats["cancelled_tokens"] += int(valid[:, slot].sum())
                continue
            c = s.completion
            ok = valid[:, slot]
            if ok.any():
                new = tokens[ok, slot].tolist()
                c.tokens += new
                c.logprobs += logprobs[ok, slot].tolist()
                if s.matcher is not None:
                    for t in new:
                        s.matcher.consume(t)
            why = int(reason[slot])
            if why != RUNNING:
                self._finish(slot, s, why, int(hit[slot]), done)

    @staticmethod
    def _take_firsts(firsts: list[LiveSample], values) -> None:
        for s, (tok_N, lp_N) in zip(firsts, values):
            j = s.first[2]
            s.completion.tokens.append(int(tok_N[j]))
            s.completion.logprobs.append(float(lp_N[j]))
            if s.matcher is not None:
                s.matcher.consume(int(tok_N[j]))
            s.first = None

    def _finish(self, slot: int, s: LiveSample, why: int, hit: int, done: list[Finished]) -> None:
        c = s.completion
        finish(c, why, self._stops.strings if self._stops is not None else (), hit)
        if s.job.request.keep_context and c.finish_reason != CACHE_FULL:
            c.context = Context(prefix=self.engine.extract(self._state, slot),
                                length=s.job.length0 + len(c.tokens), last_token=c.tokens[-1])
        self.engine.free_resource(slot)
        s.done = True
        del self._busy[slot]
        done.append(Finished(s.job.ticket, s.index, c))

    def _admit(self) -> None:
        engine = self.engine
        free = [s for s in range(engine.max_concurrent_decodes) if s not in self._busy]
        wanted = len(self._inserts)
        jobs, samples, cap = [], 0, bucket(engine.max_concurrent_decodes)
        # one prefill draws at most `cap` samples (one compiled sample count) unless a job alone needs more
        while self._queue and wanted < len(free) and (
                not jobs or samples + self._queue[0].request.num_samples <= cap):
            job = self._queue.popleft()
            jobs.append(job)
            wanted += job.request.num_samples
            samples += job.request.num_samples
        if jobs:
            self._prefill(jobs)
        if not self._inserts or not free:
            return
        state = self._state_now()
        table = None if self._stops is None else self._stops.table()
        by_prefix: dict[int, tuple[Prefix, list[int], list[int], list[StopSpec]]] = {}
        while self._inserts and free:
            prefix, j, s = self._inserts.popleft()
            slot = free.pop(0)
            entry = by_prefix.setdefault(id(prefix), (prefix, [], [], []))
            entry[1].append(slot)
            entry[2].append(j)
            entry[3].append(s.job.stops)
            s.first = (prefix.token_N, prefix.logprob_N, j)
            self._firsts.append(s)
            self._busy[slot] = s
        for prefix, slots, samples, stops in by_prefix.values():
            state = engine.bulk_insert(prefix, state, slots, samples, stops=stops, stop_table=table)
        self._state = state
        self.stats["admitted"] += sum(len(e[1]) for e in by_prefix.values())

    def _piece(self, start: int, n: int) -> int:
        """Padded length of the next piece of n prompt tokens at cache position `start` (< n: a leading
        piece): the engine's; where that padding would run past the cache (the model would write the
        piece at a shifted position), the longest one that fits, else the room left."""
        engine, room = self.engine, self.engine.max_target_length - start
        size = engine.length_for(min(n, engine.max_prefill_length), self.min_bucket)
        fits = [x for x in all_lengths(engine.length_buckets, self.min_bucket, engine.max_prefill_length)
                if x <= room]
        return size if size <= room else max(fits, default=room)

    def _prefill(self, jobs: list[Job]) -> None:
        """Prefills `jobs` (one batched call per length bucket; nothing is read back) and queues
        their samples for insertion."""
        engine = self.engine
        groups: dict[int, list[tuple[Job, Prefix | None, int, np.ndarray]]] = {}
        for job in jobs:
            ctx = job.request.context
            existing = None if ctx is None else ctx.prefix
            start = 0 if ctx is None else ctx.length - 1  # tokens in the context's cache
            tokens = job.tokens
            while (size := self._piece(start, tokens.size)) < tokens.size:  # leading pieces, one by one
                existing = first_row(engine.prefill_batch(  # one row, one sample
                    params=self.params, padded_tokens=tokens[None, :size], true_lengths=[size],
                    samplers=[SamplingParams()], rngs=[None], num_samples=[1], existing_prefixes=[existing],
                    existing_lengths=[start]))
                start += size
                tokens = tokens[size:]
                self.stats["prefill_calls"] += 1
                self.stats["prefill_tokens"] += size
            groups.setdefault(size, []).append((job, existing, start, tokens))
        for size, group in groups.items():
            padded = np.zeros((len(group), size), np.int32)
            for b, (_, _, _, tokens) in enumerate(group):
                padded[b, :tokens.size] = tokens
            samples, allowed = [], []
            for job, *_ in group:
                for i in range(job.request.num_samples):
                    s = LiveSample(job, i, Completion([], []))
                    row = None
                    if job.request.constraint is not None:
                        s.matcher = job.request.constraint()
                        row = np.zeros((engine.mask_words,), np.int32)
                        s.matcher.fill_bitmask(row)
                    samples.append(s)
                    allowed.append(row)
            prefix = engine.prefill_batch(
                params=self.params, padded_tokens=padded, true_lengths=[t.size for *_, t in group],
                samplers=[j.request.sampling for j, *_ in group],
                rngs=[j.request.seed for j, *_ in group],
                num_samples=[j.request.num_samples for j, *_ in group],
                existing_prefixes=[e for _, e, _, _ in group], existing_lengths=[n for _, _, n, _ in group],
                allowed=allowed if any(r is not None for r in allowed) else None)
            self.stats["prefill_calls"] += 1
            self.stats["prefill_tokens"] += sum(t.size for *_, t in group)
            for j, s in enumerate(samples):
                self._inserts.append((prefix, j, s))
