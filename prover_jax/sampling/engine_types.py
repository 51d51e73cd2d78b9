"""What the engine's programs take and return: a `Prefix` (prefilled rows and their first samples),
the per-slot `DecodeState`, `ResultTokens`; the slots' end-reason codes and limits; and the host
helpers that shape their inputs (`raw_key`, `bucket`, `padded_length`, `sample_arrays`,
`stop_arrays`). The cache inside is the model's (see model_api.DecodeModel): a pytree whose every leaf
has the row (slot) axis first.
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np


@flax.struct.dataclass
class Prefix:
    """R prefilled cache rows (prompt in the cache, first sampled token not yet) and N samples."""

    cache: Any  # the model's cache, R rows
    row_N: jax.Array  # int32, cache row each sample continues
    token_N: jax.Array  # int32, first sampled token
    logprob_N: jax.Array  # fp32
    rng_Nx2: jax.Array  # uint32 raw keys for the later steps
    temperature_N: jax.Array
    top_k_N: jax.Array
    top_p_N: jax.Array

    @property
    def num_samples(self) -> int:
        return self.token_N.shape[0]


@flax.struct.dataclass
class DecodeState:
    """Per-slot decode state; every array has a leading slot axis of size max_concurrent_decodes."""

    cache: Any  # the model's cache, one row per slot
    tokens_S: jax.Array  # int32, last sampled token (fed at the next step)
    rng_Sx2: jax.Array  # uint32 raw keys
    temperature_S: jax.Array
    top_k_S: jax.Array
    top_p_S: jax.Array
    active_S: jax.Array  # bool
    # end conditions, checked on the device (see `StopSpec`; a finished slot stops and is frozen)
    count_S: jax.Array  # int32, tokens sampled so far by the slot's request (the first one included)
    max_new_S: jax.Array  # int32, its token budget
    stop_ids_SxK: jax.Array  # int32, ids that end it (-1: none)
    stop_on_SxP: jax.Array  # bool, which stop strings of the StopTable end it
    stop_q_SxP: jax.Array  # int32, automaton state of each stop string
    reason_S: jax.Array  # int32, RUNNING or why the slot stopped
    hit_S: jax.Array  # int32, row of the stop string that ended it (-1: none)


# reason_S codes
RUNNING, STOPPED_ID, STOPPED_STRING, STOPPED_LENGTH, STOPPED_CACHE_FULL = 0, 1, 2, 3, 4
MAX_STOP_IDS = 8  # stop ids per request (eos ids included)
NO_LIMIT = np.iinfo(np.int32).max


@flax.struct.dataclass
class ResultTokens:
    """Tokens produced by one prefill ([N]) or generate ([slots]) call, with their logprobs.
    valid[i] is False for slots that produced nothing (inactive or cache full)."""

    tokens: jax.Array  # int32
    logprobs: jax.Array  # fp32
    valid: jax.Array  # bool
    reason: jax.Array | None = None  # int32 [slots]: reason_S after the call (generate only)
    hit: jax.Array | None = None  # int32 [slots]: hit_S after the call

    def get_result_at_slot(self, slot: int) -> tuple[int, float, bool]:
        """(token, logprob, valid) of one slot as Python values (host transfer)."""
        return int(self.tokens[slot]), float(self.logprobs[slot]), bool(self.valid[slot])


def raw_key(rng) -> np.ndarray | jax.Array:
    """A PRNG key as raw uint32[2] data (None -> key 0; an int -> PRNGKey(int))."""
    if rng is None:
        rng = 0
    if isinstance(rng, (int, np.integer)):
        seed = int(rng)
        if 0 <= seed < 2 ** 32 and jax.config.jax_default_prng_impl == "threefry2x32":
            # PRNGKey(seed)'s data, built on the host: no device op (which would wait for the queue)
            return np.array([0, seed], np.uint32)
        return jax.random.key_data(jax.random.key(seed))
    if jnp.issubdtype(rng.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(rng)
    return jnp.asarray(rng)


def length_buckets_of(given, max_prefill: int) -> tuple[int, ...]:
    """The sorted lengths a prompt piece is padded to, max_prefill always one; () for none given."""
    if any(int(n) < 1 for n in given):
        raise ValueError(f"length_buckets must be positive lengths, got {tuple(given)}")
    return tuple(sorted({int(n) for n in given if int(n) < max_prefill} | {max_prefill})) if given else ()


def padded_length(n: int, buckets: tuple[int, ...], minimum: int, max_prefill: int) -> int:
    """The length a piece of n <= max_prefill tokens is padded to: the least bucket >= n, or without
    buckets the power of two >= max(n, minimum), capped at max_prefill. Lengths that fit the pieces met
    (e.g. 48 and 96 for turns of 33-47 and 65-90 tokens) cut the padded tokens powers of two leave."""
    if buckets:
        return next(b for b in buckets if b >= n)
    return min(bucket(n, minimum), max_prefill)


def all_lengths(buckets: tuple[int, ...], minimum: int, max_prefill: int) -> list[int]:
    """Every length `padded_length` returns."""
    if buckets:
        return list(buckets)
    return sorted({padded_length(2 ** i, (), minimum, max_prefill) for i in range(32) if 2 ** i <= max_prefill}
                  | {max_prefill})


# Fewest tokens a prompt piece is padded to: the driver's default `min_bucket` (all short prompts share
# one prefill shape), hence also the least max_prefill_length prover-generate picks by default.
MIN_PROMPT_BUCKET = 8


def bucket(n: int, minimum: int = 1) -> int:
    """Smallest power of two >= max(n, minimum): bounds the number of compiled shapes."""
    size = max(1, minimum)
    while size < n:
        size *= 2
    return size


def sample_arrays(samplers, rngs, num_samples, N: int) -> tuple[np.ndarray, ...]:
    """Per-sample prefill inputs, N >= sum(num_samples) (padding samples last, row 0, greedy):
    (row_N, index_N, keys_Nx2, temp_N, topk_N, topp_N); row b's samples are consecutive, all drawn
    with raw_key(rngs[b]) and told apart by their index."""
    row_N, index_N, topk_N = (np.zeros((N,), np.int32) for _ in range(3))
    temp_N, topp_N = np.zeros((N,), np.float32), np.ones((N,), np.float32)
    keys_Nx2 = np.zeros((N, 2), np.uint32)
    j = 0
    for b, (s, rng, n) in enumerate(zip(samplers, rngs, num_samples)):
        key = np.asarray(raw_key(rng), np.uint32)
        for i in range(n):
            row_N[j], index_N[j], keys_Nx2[j] = b, i, key
            temp_N[j], topk_N[j], topp_N[j] = s.temperature, s.top_k, s.top_p
            j += 1
    return row_N, index_N, keys_Nx2, temp_N, topk_N, topp_N


def stop_arrays(stops, M: int, P: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-slot end conditions of an insert of M (padded) samples against a table of P stop strings:
    (max_new_M, stop ids [M, MAX_STOP_IDS] padded with -1, stop-string rows on [M, P]); ValueError
    for too many stop ids or a row outside the table."""
    max_new_M = np.full((M,), NO_LIMIT, np.int32)
    ids_MxK = np.full((M, MAX_STOP_IDS), -1, np.int32)
    on_MxP = np.zeros((M, P), bool)
    for i, spec in enumerate(stops):
        if len(spec.stop_ids) > MAX_STOP_IDS:
            raise ValueError(f"{len(spec.stop_ids)} stop ids (eos included) exceed {MAX_STOP_IDS}")
        if any(not 0 <= r < P for r in spec.stop_rows):
            raise ValueError(f"stop string rows {spec.stop_rows} outside [0, {P})")
        max_new_M[i] = spec.max_new_tokens
        ids_MxK[i, :len(spec.stop_ids)] = spec.stop_ids
        on_MxP[i, list(spec.stop_rows)] = True
    return max_new_M, ids_MxK, on_MxP
