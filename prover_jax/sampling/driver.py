"""Offline continuous batching over an `Engine`.

    driver = Driver(engine, eos_ids=cfg.eos_ids)
    completions = driver.run([Request(prompt_ids, SamplingParams(temperature=1.0), max_new_tokens=256,
                                      seed=i) for i, prompt_ids in enumerate(prompts)])

Requests wait in a queue; whenever a slot is free the next request is prefilled (prompts longer than
max_prefill_length in several pieces) and inserted, and every step `generate` advances all busy slots.
A request ends at an EOS id (kept as its last token), after max_new_tokens tokens, or when its slot's
cache is full. Each request samples with its own key (from `seed`), so its completion is the same
whatever else is in the batch and whichever slot serves it.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Sequence

import jax
import numpy as np

from prover_jax.sampling.engine import Engine
from prover_jax.sampling.sampler import SamplingParams

STOP, LENGTH, CACHE_FULL = "stop", "length", "cache_full"


@dataclasses.dataclass(frozen=True)
class Request:
    """One generation request: prompt token ids, sampling controls, token budget, PRNG seed."""

    prompt: Sequence[int]
    sampling: SamplingParams = SamplingParams()
    max_new_tokens: int = 64
    seed: int = 0

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclasses.dataclass
class Completion:
    """Generated tokens, their logprobs under the raw policy, and why generation ended
    ('stop': EOS id, 'length': max_new_tokens, 'cache_full': max_target_length reached)."""

    tokens: list[int]
    logprobs: list[float]
    finish_reason: str | None = None


class Driver:
    """Runs a list of requests to completion with continuous batching.

    Args:
        engine: the decode engine; its slots are all used.
        params: weights passed to the engine (default: `engine.load_params()`).
        eos_ids: token ids that end a request.
        min_bucket: prompts are padded to powers of two >= min_bucket (capped at max_prefill_length),
            bounding the number of prefill compilations.
    """

    def __init__(self, engine: Engine, params: Any = None, eos_ids: Sequence[int] = (), min_bucket: int = 8):
        self.engine = engine
        self.params = engine.load_params() if params is None else params
        self.eos_ids = frozenset(int(i) for i in eos_ids)
        self.min_bucket = min_bucket

    def _bucket(self, n: int) -> int:
        size = self.min_bucket
        while size < n:
            size *= 2
        return min(size, self.engine.max_prefill_length)

    def _prefill(self, request: Request):
        """Prefills the whole prompt (in max_prefill_length pieces); returns (prefix, token, logprob)."""
        prompt = np.asarray(request.prompt, np.int32).reshape(-1)
        if prompt.size == 0:
            raise ValueError("empty prompt")
        step = self.engine.max_prefill_length
        prefix = None
        rng = jax.random.PRNGKey(request.seed)
        for start in range(0, prompt.size, step):
            piece = prompt[start:start + step]
            padded = np.zeros(self._bucket(piece.size), np.int32)
            padded[:piece.size] = piece
            prefix, first = self.engine.prefill(params=self.params, existing_prefix=prefix,
                                                padded_tokens=padded, true_length=piece.size,
                                                sampler=request.sampling, rng=rng)
        return prefix, int(first.tokens[0]), float(first.logprobs[0])

    def _finished(self, request: Request, completion: Completion) -> bool:
        if completion.tokens[-1] in self.eos_ids:
            completion.finish_reason = STOP
        elif len(completion.tokens) >= request.max_new_tokens:
            completion.finish_reason = LENGTH
        return completion.finish_reason is not None

    def run(self, requests: Sequence[Request]) -> list[Completion]:
        """Completions in the order of `requests`."""
        engine = self.engine
        queue = collections.deque(enumerate(requests))
        results: list[Completion | None] = [None] * len(requests)
        busy: dict[int, tuple[int, Request, Completion]] = {}  # slot -> (index, request, completion)
        state = engine.init_decode_state()
        while queue or busy:
            for slot in range(engine.max_concurrent_decodes):
                if not queue:
                    break
                if slot in busy:
                    continue
                index, request = queue.popleft()
                prefix, token, logprob = self._prefill(request)
                completion = Completion([token], [logprob])
                results[index] = completion
                if not self._finished(request, completion):
                    state = engine.insert(prefix, state, slot)
                    busy[slot] = (index, request, completion)
            if not busy:
                continue
            state, result = engine.generate(self.params, state)
            tokens, logprobs, valid = (np.asarray(a) for a in (result.tokens, result.logprobs, result.valid))
            for slot, (index, request, completion) in list(busy.items()):
                if valid[slot]:
                    completion.tokens.append(int(tokens[slot]))
                    completion.logprobs.append(float(logprobs[slot]))
                    done = self._finished(request, completion)
                else:
                    completion.finish_reason, done = CACHE_FULL, True
                if done:
                    state = engine.deactivate(state, slot)
                    engine.free_resource(slot)
                    del busy[slot]
        return results
