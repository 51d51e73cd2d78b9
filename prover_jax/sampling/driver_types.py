"""The driver's request bookkeeping: what callers submit (`Request`) and get back (`Completion`,
`Finished`, a kept `Context`), and the driver's records of work in flight: a `Job` per request (its
tokens to prefill and end conditions), a `LiveSample` per sample (its completion so far, slot state
on the host), a `Call` per dispatched decode call. `finish` turns a slot's end-reason code into a
completion's finish_reason / stop.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

from prover_jax.sampling.engine_types import STOPPED_ID, STOPPED_LENGTH, STOPPED_STRING, Prefix
from prover_jax.sampling.sampler import SamplingParams
from prover_jax.sampling.stops import StopSpec


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
    constraint: constrained decoding: called once per sample for a TokenConstraint, an object with
    fill_bitmask(row) (writes the int32 bitmask [engine.mask_words] of the tokens allowed next) and
    consume(token) (the token sampled); the driver reads every token of such a sample before the next
    decode call (no host/device overlap while one runs) and needs steps_per_call=1.
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
    constraint: Callable[[], Any] | None = None  # () -> TokenConstraint, one per sample

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
class Job:
    ticket: int
    request: Request
    tokens: np.ndarray  # what to prefill: [context's last token] + prompt
    length0: int  # sequence length after the prefill (tokens in the cache)
    stops: StopSpec | None = None


@dataclasses.dataclass
class LiveSample:
    job: Job
    index: int
    completion: Completion
    first: tuple | None = None  # (token_N, logprob_N, j): its first token, still on the device
    done: bool = False
    matcher: Any = None  # its TokenConstraint (constrained decoding)
    cancelled: bool = False  # by Driver.cancel: decode calls already issued still count its tokens


@dataclasses.dataclass
class Call:
    """A dispatched generate call: its results (on the device) and the samples it stepped."""

    result: Any
    occupants: dict[int, LiveSample]


def finish(c: Completion, why: int, stop_strings: Sequence[str], hit: int) -> None:
    """c.finish_reason and c.stop from a slot's end-reason code (engine_types) and stop-string row."""
    if why == STOPPED_ID:
        c.finish_reason, c.stop = STOP, c.tokens[-1]
    elif why == STOPPED_STRING:
        c.finish_reason, c.stop = STOP, stop_strings[hit]
    elif why == STOPPED_LENGTH:
        c.finish_reason = LENGTH
    else:
        c.finish_reason = CACHE_FULL
