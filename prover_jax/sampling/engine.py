"""Slot-based decode engine for Qwen3.5, following the JetStream `Engine` contract.

    engine = Engine(model, max_concurrent_decodes=8, max_prefill_length=512, max_target_length=1024)
    params = engine.load_params()
    state = engine.init_decode_state()
    prefix, first = engine.prefill(params=params, padded_tokens=tokens_T, true_length=n,
                                   sampler=SamplingParams(temperature=1.0), rng=key)
    state = engine.insert(prefix, state, slot=3)
    state, result = engine.generate(params, state)   # one token for every active slot

The decode state holds one batched `Cache` with a row per slot plus, per slot, the last sampled token
(not yet in the cache), its PRNG key, sampling controls and an active flag. `generate` feeds each
active slot's last token, samples the next one and advances only active slots; inactive slots keep
their cache and position (valid_len 0). A slot whose cache is full is reported invalid and not
advanced. Each slot draws from its own key, so a request's tokens depend only on its prompt,
controls, key and the weights, never on the other slots.

Logprobs are those of `sampler.sample`: log_softmax of the raw fp32 logits at the chosen token.
`generate` and `insert` donate the decode state: do not reuse the state passed in.
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from prover_jax.models.qwen3_5.model import Cache, Qwen3_5, init_cache
from prover_jax.sampling.sampler import SamplingParams, sample


@flax.struct.dataclass
class Prefix:
    """Result of a prefill: a batch-1 cache of the prompt (first token not yet in it), the first
    sampled token and its logprob, the key for later steps, and the request's sampling controls."""

    cache: Cache
    token: jax.Array  # [] int32
    logprob: jax.Array  # [] fp32
    rng: jax.Array  # [2] uint32 raw key
    temperature: jax.Array  # [] fp32
    top_k: jax.Array  # [] int32
    top_p: jax.Array  # [] fp32


@flax.struct.dataclass
class DecodeState:
    """Per-slot decode state; every array has a leading slot axis of size max_concurrent_decodes."""

    cache: Cache
    tokens_S: jax.Array  # int32, last sampled token (fed at the next step)
    rng_Sx2: jax.Array  # uint32 raw keys
    temperature_S: jax.Array
    top_k_S: jax.Array
    top_p_S: jax.Array
    active_S: jax.Array  # bool


@flax.struct.dataclass
class ResultTokens:
    """Tokens produced by one prefill ([1]) or generate ([slots]) call, with their logprobs.
    valid[i] is False for slots that produced nothing (inactive or cache full)."""

    tokens: jax.Array  # int32
    logprobs: jax.Array  # fp32
    valid: jax.Array  # bool

    def get_result_at_slot(self, slot: int) -> tuple[int, float, bool]:
        """(token, logprob, valid) of one slot as Python values (host transfer)."""
        return int(self.tokens[slot]), float(self.logprobs[slot]), bool(self.valid[slot])


def _raw_key(rng) -> jax.Array:
    if rng is None:
        return jax.random.PRNGKey(0)
    if jnp.issubdtype(rng.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(rng)
    return jnp.asarray(rng)


class Engine:
    """JetStream-style engine over a Qwen3.5 model with `max_concurrent_decodes` dense cache slots.

    Args:
        model: the model; its graph is fixed, its weights are what `load_params` returns and what
            `prefill` / `generate` take as `params` (so updated weights can be passed in).
        max_concurrent_decodes: number of slots.
        max_prefill_length: longest padded prompt `prefill` accepts.
        max_target_length: cache length per slot (prompt + generated tokens).
        cache_dtype: dtype of KV / conv caches (default: the model's compute dtype).
    """

    def __init__(self, model: Qwen3_5, *, max_concurrent_decodes: int, max_prefill_length: int,
                 max_target_length: int, cache_dtype=None):
        if max_prefill_length > max_target_length:
            raise ValueError(f"max_prefill_length {max_prefill_length} exceeds max_target_length "
                             f"{max_target_length}")
        self.config = model.config
        self._graphdef, self._params = nnx.split(model)
        self._slots = int(max_concurrent_decodes)
        self._max_prefill = int(max_prefill_length)
        self.max_target_length = int(max_target_length)
        self.cache_dtype = model.dtype if cache_dtype is None else cache_dtype
        self._prefill = jax.jit(self._prefill_impl)
        self._generate = jax.jit(self._generate_impl, donate_argnums=(1,))
        self._insert = jax.jit(self._insert_impl, donate_argnums=(1,))
        self._deactivate = jax.jit(lambda s, slot: s.replace(active_S=s.active_S.at[slot].set(False)),
                                   donate_argnums=(0,))

    # Properties of the JetStream contract.
    @property
    def max_concurrent_decodes(self) -> int:
        return self._slots

    @property
    def max_prefill_length(self) -> int:
        return self._max_prefill

    @property
    def samples_per_slot(self) -> int:
        return 1

    def load_params(self, *args, **kwargs) -> Any:
        """The model's weights (an `nnx.State`), as passed to `prefill` / `generate`."""
        return self._params

    def init_decode_state(self, *args, **kwargs) -> DecodeState:
        """All slots empty and inactive."""
        S = self._slots
        return DecodeState(
            cache=init_cache(self.config, S, self.max_target_length, self.cache_dtype),
            tokens_S=jnp.zeros((S,), jnp.int32), rng_Sx2=jnp.zeros((S, 2), jnp.uint32),
            temperature_S=jnp.zeros((S,), jnp.float32), top_k_S=jnp.zeros((S,), jnp.int32),
            top_p_S=jnp.ones((S,), jnp.float32), active_S=jnp.zeros((S,), bool))

    def free_resource(self, slot: int) -> None:
        """Nothing to free: slots own dense cache rows, overwritten by the next `insert`."""
        return None

    def deactivate(self, decode_state: DecodeState, slot: int) -> DecodeState:
        """Stops stepping `slot` (its results become invalid) until a new prefix is inserted."""
        self._check_slot(slot)
        return self._deactivate(decode_state, jnp.int32(slot))

    # Prefill.
    def prefill(self, *, params, existing_prefix: Prefix | None = None, padded_tokens,
                true_length: int | None = None, sampler: SamplingParams | None = None,
                rng=None) -> tuple[Prefix, ResultTokens]:
        """Runs the prompt `padded_tokens[:true_length]` (1-D; later entries are padding and ignored)
        and samples the first token with `sampler` (default greedy) and key `rng`.

        With `existing_prefix`, the tokens are appended to its cache (its sampled token is dropped):
        a long prompt can be prefilled in pieces. Compiles once per padded length; pad to a few
        bucket sizes. Raises ValueError for an empty or too-long prompt or out-of-vocab token ids.
        """
        tokens = np.asarray(padded_tokens)
        if tokens.ndim != 1:
            raise ValueError(f"padded_tokens must be 1-D, got shape {tokens.shape}")
        if tokens.size and not np.issubdtype(tokens.dtype, np.integer):
            raise ValueError(f"padded_tokens must hold integer token ids, got dtype {tokens.dtype}")
        T = tokens.shape[0]
        n = T if true_length is None else int(true_length)
        if n <= 0:
            raise ValueError("empty prompt: true_length must be >= 1")
        if T > self._max_prefill:
            raise ValueError(f"prompt of padded length {T} exceeds max_prefill_length {self._max_prefill}")
        if n > T:
            raise ValueError(f"true_length {n} exceeds the padded length {T}")
        real = tokens[:n]
        V = self.config.vocab_size
        bad = real[(real < 0) | (real >= V)]
        if bad.size:
            raise ValueError(f"token ids outside the vocabulary [0, {V}): {sorted(set(bad.tolist()))[:8]}")
        start = 0 if existing_prefix is None else int(existing_prefix.cache.pos[0])
        if start + n > self.max_target_length:
            raise ValueError(f"prompt of {start + n} tokens exceeds max_target_length "
                             f"{self.max_target_length}")
        sampler = SamplingParams() if sampler is None else sampler
        cache = (init_cache(self.config, 1, self.max_target_length, self.cache_dtype)
                 if existing_prefix is None else existing_prefix.cache)
        tokens = np.where(np.arange(T) < n, tokens, 0).astype(np.int32)
        prefix = self._prefill(params, cache, jnp.asarray(tokens)[None], jnp.int32(n),
                               jnp.float32(sampler.temperature), jnp.int32(sampler.top_k),
                               jnp.float32(sampler.top_p), _raw_key(rng))
        result = ResultTokens(prefix.token[None], prefix.logprob[None], jnp.ones((1,), bool))
        return prefix, result

    def _prefill_impl(self, params, cache, tokens_1xT, n, temperature, top_k, top_p, rng):
        model = nnx.merge(self._graphdef, params)
        h_1xTxD, cache = model.hidden(tokens_1xT, cache=cache, valid_len_B=n[None])
        last_1x1xD = jax.lax.dynamic_slice_in_dim(h_1xTxD, n - 1, 1, axis=1)
        last_1xV = model.logits(last_1x1xD)[:, 0]  # logits of the last prompt token only
        use, carry = jax.random.split(rng)
        tok, lp = sample(last_1xV, use[None], temperature[None], top_k[None], top_p[None])
        return Prefix(cache=cache, token=tok[0], logprob=lp[0], rng=carry, temperature=temperature,
                      top_k=top_k, top_p=top_p)

    # Insert.
    def insert(self, prefix: Prefix, decode_state: DecodeState, slot: int) -> DecodeState:
        """Copies `prefix` into `slot` (overwriting whatever was there) and marks it active."""
        self._check_slot(slot)
        return self._insert(prefix, decode_state, jnp.int32(slot))

    @staticmethod
    def _insert_impl(prefix: Prefix, state: DecodeState, slot):
        cache = jax.tree.map(lambda d, p: d.at[slot].set(p[0]), state.cache, prefix.cache)
        put = lambda arr, value: arr.at[slot].set(value)
        return DecodeState(
            cache=cache, tokens_S=put(state.tokens_S, prefix.token), rng_Sx2=put(state.rng_Sx2, prefix.rng),
            temperature_S=put(state.temperature_S, prefix.temperature),
            top_k_S=put(state.top_k_S, prefix.top_k), top_p_S=put(state.top_p_S, prefix.top_p),
            active_S=put(state.active_S, True))

    # Generate.
    def generate(self, params, decode_state: DecodeState) -> tuple[DecodeState, ResultTokens]:
        """One decode step for every slot: feeds each active slot's last token, samples the next."""
        return self._generate(params, decode_state)

    def _generate_impl(self, params, state: DecodeState):
        model = nnx.merge(self._graphdef, params)
        step_S = state.active_S & (state.cache.pos < self.max_target_length)
        logits_Sx1xV, cache = model(state.tokens_S[:, None], cache=state.cache,
                                    valid_len_B=step_S.astype(jnp.int32))
        keys_Sx2x2 = jax.vmap(jax.random.split)(state.rng_Sx2)
        tokens_S, logprobs_S = sample(logits_Sx1xV[:, 0], keys_Sx2x2[:, 0], state.temperature_S,
                                      state.top_k_S, state.top_p_S)
        tokens_S = jnp.where(step_S, tokens_S, state.tokens_S)
        rng = jnp.where(step_S[:, None], keys_Sx2x2[:, 1], state.rng_Sx2)
        new_state = state.replace(cache=cache, tokens_S=tokens_S, rng_Sx2=rng)
        return new_state, ResultTokens(tokens_S, logprobs_S, step_S)

    def _check_slot(self, slot):
        if not 0 <= int(slot) < self._slots:
            raise ValueError(f"slot {slot} outside [0, {self._slots})")
