"""The engine's device programs as pure functions of a `DecodeModel` (merged from its weights inside
the jitted call) and arrays; `Engine` jits them and owns the state. Each reads the model only through
model_api.DecodeModel: `init_cache`, `cache_axes`, `cache_lengths`, `hidden`, `logits`; cache rows are
moved leaf by leaf along the leading (row) axis.

    init_state      all slots empty and inactive
    state_axes      logical axis names of the decode state (its sharding over a mesh)
    prefill_rows    prompts of R rows appended to their cache rows; N first tokens drawn from them
    insert_samples  samples of a Prefix copied into slots, their end conditions checked from the start
    decode_steps    `steps` decode steps of every active slot (lax.scan), end conditions on the device
    extract_slot    a slot's live sequence as a one-row Prefix
    select_sample   one sample of a Prefix with its cache row (jitted here: no model, no state)
    first_row       a Prefix cut to its cache row 0: a one-row prefill padded to R rows as one row
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from prover_jax.sampling.engine_types import (MAX_STOP_IDS, NO_LIMIT, RUNNING, STOPPED_CACHE_FULL, STOPPED_ID,
                                              STOPPED_LENGTH, STOPPED_STRING, DecodeState, Prefix, ResultTokens)
from prover_jax.sampling.model_api import DecodeModel
from prover_jax.sampling.sampler import sample
from prover_jax.sampling.stops import StopTable


def init_state(model: DecodeModel, slots: int, max_length: int, cache_dtype, stop_strings: int) -> DecodeState:
    S = slots
    return DecodeState(
        cache=model.init_cache(S, max_length, cache_dtype),
        tokens_S=jnp.zeros((S,), jnp.int32), rng_Sx2=jnp.zeros((S, 2), jnp.uint32),
        temperature_S=jnp.zeros((S,), jnp.float32), top_k_S=jnp.zeros((S,), jnp.int32),
        top_p_S=jnp.ones((S,), jnp.float32), active_S=jnp.zeros((S,), bool),
        count_S=jnp.zeros((S,), jnp.int32), max_new_S=jnp.full((S,), NO_LIMIT, jnp.int32),
        stop_ids_SxK=jnp.full((S, MAX_STOP_IDS), -1, jnp.int32),
        stop_on_SxP=jnp.zeros((S, stop_strings), bool),
        stop_q_SxP=jnp.zeros((S, stop_strings), jnp.int32),
        reason_S=jnp.zeros((S,), jnp.int32), hit_S=jnp.full((S,), -1, jnp.int32))


def state_axes(model: DecodeModel, tensor: int) -> DecodeState:
    """Slots over "cache_batch"; the cache as the model lays it out over a `tensor` axis of that size."""
    one, two = ("cache_batch",), ("cache_batch", None)
    return DecodeState(cache=model.cache_axes(tensor), tokens_S=one, rng_Sx2=two, temperature_S=one,
                       top_k_S=one, top_p_S=one, active_S=one, count_S=one, max_new_S=one,
                       stop_ids_SxK=two, stop_on_SxP=two, stop_q_SxP=two, reason_S=one, hit_S=one)


def prefill_rows(model: DecodeModel, cache, tokens_RxT, n_R, row_N, index_N, keys_Nx2, temp_N, topk_N,
                 topp_N, allowed_NxW) -> Prefix:
    """Row r appends tokens_RxT[r, :n_R[r]]; sample j draws from row row_N[j]'s last logits with
    fold_in(keys_Nx2[j], index_N[j]) split into its first-token key and the key carried on."""
    h_RxTxD, cache = model.hidden(tokens_RxT, cache=cache, valid_len_B=n_R)
    last_RxD = jnp.take_along_axis(h_RxTxD, jnp.maximum(n_R - 1, 0)[:, None, None], axis=1)[:, 0]
    logits_NxV = model.logits(last_RxD[row_N][:, None])[:, 0]  # logits of the last prompt token
    keys = jax.vmap(lambda k, i: jax.random.split(jax.random.fold_in(k, i)))(keys_Nx2, index_N)
    tok_N, lp_N = sample(logits_NxV, keys[:, 0], temp_N, topk_N, topp_N, allowed_NxW)
    return Prefix(cache=cache, row_N=row_N, token_N=tok_N, logprob_N=lp_N, rng_Nx2=keys[:, 1],
                  temperature_N=temp_N, top_k_N=topk_N, top_p_N=topp_N)


def stop_check(token_S, count_S, max_new_S, stop_ids_SxK, stop_on_SxP, q_SxP, table: StopTable):
    """(reason_S, hit_S, q_SxP) after `token_S` was sampled as the count_S-th token: stop ids
    first, then stop strings (automaton step), then the token budget."""
    P = q_SxP.shape[1]
    q_SxP = table.next_PxQxV[jnp.arange(P)[None, :], q_SxP, token_S[:, None]].astype(jnp.int32)
    matched_SxP = stop_on_SxP & (q_SxP >= table.length_P[None, :])
    by_id = jnp.any(token_S[:, None] == stop_ids_SxK, axis=1)
    by_string = jnp.any(matched_SxP, axis=1)
    reason = jnp.where(by_id, STOPPED_ID, jnp.where(by_string, STOPPED_STRING, jnp.where(
        count_S >= max_new_S, STOPPED_LENGTH, RUNNING)))
    hit = jnp.where(by_string & ~by_id, jnp.argmax(matched_SxP, axis=1), -1)
    return reason.astype(jnp.int32), hit.astype(jnp.int32), q_SxP


def insert_samples(prefix: Prefix, state: DecodeState, slot_M, sample_M, max_new_M, ids_MxK, on_MxP,
                   table: StopTable) -> DecodeState:
    """Sample sample_M[i] of `prefix` (its cache row, first token, key, controls) into slot slot_M[i]
    (out-of-range slots: padding, dropped), with end conditions max_new_M / ids_MxK / on_MxP."""
    row_M = prefix.row_N[sample_M]
    put = lambda dst, src: dst.at[slot_M].set(src.astype(dst.dtype), mode="drop")
    cache = jax.tree.map(lambda d, p: put(d, p[row_M]), state.cache, prefix.cache)
    token_M = prefix.token_N[sample_M]
    count_M = jnp.ones(slot_M.shape, jnp.int32)
    q0 = jnp.zeros(on_MxP.shape, jnp.int32)
    reason_M, hit_M, q_M = stop_check(token_M, count_M, max_new_M, ids_MxK, on_MxP, q0, table)
    return DecodeState(
        cache=cache, tokens_S=put(state.tokens_S, token_M),
        rng_Sx2=put(state.rng_Sx2, prefix.rng_Nx2[sample_M]),
        temperature_S=put(state.temperature_S, prefix.temperature_N[sample_M]),
        top_k_S=put(state.top_k_S, prefix.top_k_N[sample_M]),
        top_p_S=put(state.top_p_S, prefix.top_p_N[sample_M]),
        active_S=put(state.active_S, reason_M == RUNNING),
        count_S=put(state.count_S, count_M), max_new_S=put(state.max_new_S, max_new_M),
        stop_ids_SxK=put(state.stop_ids_SxK, ids_MxK), stop_on_SxP=put(state.stop_on_SxP, on_MxP),
        stop_q_SxP=put(state.stop_q_SxP, q_M), reason_S=put(state.reason_S, reason_M),
        hit_S=put(state.hit_S, hit_M))


def decode_steps(model: DecodeModel, state: DecodeState, table: StopTable, steps: int, allowed_SxW,
                 max_length: int) -> tuple[DecodeState, ResultTokens]:
    """`steps` steps: each active slot feeds its last token and samples the next; a slot whose cache
    holds max_length tokens stops (STOPPED_CACHE_FULL) instead. Results are [steps, slots]."""

    def one(state: DecodeState, _):
        full_S = state.active_S & (model.cache_lengths(state.cache) >= max_length)
        step_S = state.active_S & ~full_S
        h_Sx1xD, cache = model.hidden(state.tokens_S[:, None], cache=state.cache,
                                      valid_len_B=step_S.astype(jnp.int32))
        logits_Sx1xV = model.logits(h_Sx1xD)
        with jax.named_scope("sample"):
            keys_Sx2x2 = jax.vmap(jax.random.split)(state.rng_Sx2)
            tokens_S, logprobs_S = sample(logits_Sx1xV[:, 0], keys_Sx2x2[:, 0], state.temperature_S,
                                          state.top_k_S, state.top_p_S, allowed_SxW)
        tokens_S = jnp.where(step_S, tokens_S, state.tokens_S)
        count_S = state.count_S + step_S
        with jax.named_scope("stop_check"):
            reason_S, hit_S, q_SxP = stop_check(tokens_S, count_S, state.max_new_S, state.stop_ids_SxK,
                                                state.stop_on_SxP, state.stop_q_SxP, table)
        reason_S = jnp.where(full_S, STOPPED_CACHE_FULL, jnp.where(step_S, reason_S, state.reason_S))
        new = state.replace(
            cache=cache, tokens_S=tokens_S, count_S=count_S,
            rng_Sx2=jnp.where(step_S[:, None], keys_Sx2x2[:, 1], state.rng_Sx2),
            stop_q_SxP=jnp.where(step_S[:, None], q_SxP, state.stop_q_SxP),
            hit_S=jnp.where(step_S, hit_S, state.hit_S), reason_S=reason_S,
            active_S=state.active_S & (reason_S == RUNNING))
        return new, (tokens_S, logprobs_S, step_S)

    state, (tokens, logprobs, valid) = jax.lax.scan(one, state, None, length=steps)
    return state, ResultTokens(tokens, logprobs, valid, state.reason_S, state.hit_S)


def extract_slot(state: DecodeState, slot) -> Prefix:
    """Slot `slot`'s cache row and last sampled token (not in the cache yet) as a Prefix (R = N = 1)."""
    one = lambda a: a[slot][None]
    return Prefix(cache=jax.tree.map(one, state.cache), row_N=jnp.zeros((1,), jnp.int32),
                  token_N=one(state.tokens_S), logprob_N=jnp.zeros((1,), jnp.float32),
                  rng_Nx2=one(state.rng_Sx2), temperature_N=one(state.temperature_S),
                  top_k_N=one(state.top_k_S), top_p_N=one(state.top_p_S))


@jax.jit
def select_sample(prefix: Prefix, j) -> Prefix:
    """Sample j of `prefix` alone, with its cache row (R = N = 1)."""
    row = prefix.row_N[j]
    one = lambda a: a[j][None]
    return Prefix(cache=jax.tree.map(lambda a: a[row][None], prefix.cache), row_N=jnp.zeros((1,), jnp.int32),
                  token_N=one(prefix.token_N), logprob_N=one(prefix.logprob_N), rng_Nx2=one(prefix.rng_Nx2),
                  temperature_N=one(prefix.temperature_N), top_k_N=one(prefix.top_k_N),
                  top_p_N=one(prefix.top_p_N))


@jax.jit
def _row0(cache):
    return jax.tree.map(lambda a: a[:1], cache)


def first_row(prefix: Prefix) -> Prefix:
    """`prefix` with its cache cut to row 0: a one-row prefill (`prefill_batch` pads it to rows_for(1)
    rows) as a one-row prefix, e.g. an existing_prefix; `prefix` itself (no device op) when its cache
    holds one row."""
    if jax.tree.leaves(prefix.cache)[0].shape[0] == 1:
        return prefix
    return prefix.replace(cache=_row0(prefix.cache))
