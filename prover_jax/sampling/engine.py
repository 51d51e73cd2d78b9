"""Slot-based decode engine over any `DecodeModel` (model_api; the Qwen3.5 model is one), following
the JetStream `Engine` contract.

    engine = Engine(model, max_concurrent_decodes=8, max_prefill_length=512, max_target_length=1024)
    params = engine.load_params()
    state = engine.init_decode_state()
    prefix, first = engine.prefill(params=params, padded_tokens=tokens_T, true_length=n,
                                   sampler=SamplingParams(temperature=1.0), rng=key)
    state = engine.insert(prefix, state, slot=3)
    state, result = engine.generate(params, state)   # one token for every active slot

    fork, firsts = engine.prefill_multisampling(..., num_samples=8)   # prompt prefilled ONCE
    state = engine.bulk_insert(fork, state, slots=[0, 1, ..., 7])     # its cache copied into 8 slots

A `Prefix` holds R prefilled cache rows and N samples drawn from them (sample j continues row
row_N[j] with its own first token, key and controls); `prefill` gives R = N = 1. The decode state
holds one batched `Cache` with a row per slot plus, per slot, the last sampled token (not yet in the
cache), its PRNG key, sampling controls and an active flag. `generate` feeds each active slot's last
token, samples the next one and advances only active slots; a slot whose cache is full is reported
invalid and not advanced. `extract` turns a live slot back into a Prefix (R = N = 1), so a sequence
can later be EXTENDED by prefilling only its new tokens on top of that cache.

Randomness: sample j of a prefill with key `rng` draws with fold_in(rng, j) (split into the key for
the first token and the key carried on), so a request's tokens depend only on its prompt, controls,
key and the weights, never on the other slots or which slot serves it.

Logprobs are those of `sampler.sample`: log_softmax of the raw fp32 logits at the chosen token.
`generate`, `insert` and `bulk_insert` donate the decode state: do not reuse the state passed in.
With a mesh, the decode state is sharded by the logical rules table (slots over data/fsdp, the cache
as the model's `cache_axes` say) and every jitted call keeps that layout, so the state never moves
between steps.

The model is reached only through model_api.DecodeModel; the device programs are the pure functions
of engine_fns, jitted once per engine shape in a process (`programs.Programs`: engines of the same
model graph and sizes share their executables), one compiled variant per input shape; the arrays they
exchange are the dataclasses of engine_types (Prefix, DecodeState, ResultTokens), re-exported here; the
cache rows a batched prefill stacks keep one layout (rows.CacheRows).
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from prover_jax.sampling.engine_fns import first_row, select_sample
from prover_jax.sampling.engine_types import (MAX_STOP_IDS, NO_LIMIT, RUNNING, STOPPED_CACHE_FULL,
                                              STOPPED_ID, STOPPED_LENGTH, STOPPED_STRING, DecodeState, Prefix,
                                              ResultTokens, bucket, length_buckets_of,
                                              padded_length, raw_key, sample_arrays, stop_arrays)
from prover_jax.sampling.model_api import DecodeModel, check_model
from prover_jax.sampling.programs import Programs
from prover_jax.sampling.sampler import SamplingParams, mask_words
from prover_jax.sampling.stops import STOP_STRINGS, StopSpec, StopTable

# engine_types' names stay importable from here
__all__ = ["MAX_STOP_IDS", "NO_LIMIT", "RUNNING", "STOPPED_CACHE_FULL", "STOPPED_ID", "STOPPED_LENGTH",
           "STOPPED_STRING", "DecodeState", "Engine", "Prefix", "ResultTokens", "bucket", "raw_key"]


class Engine:
    """JetStream-style engine over a `DecodeModel` with `max_concurrent_decodes` dense cache slots.

    Args:
        model: an nnx.Module satisfying model_api.DecodeModel; its graph is fixed, its weights are
            what `load_params` returns and what `prefill` / `generate` take as `params` (new weights of
            the same shapes and shardings are passed in without recompiling).
        max_concurrent_decodes: number of slots.
        max_prefill_length: longest padded prompt piece `prefill` accepts.
        max_target_length: cache length per slot (prompt + generated tokens).
        cache_dtype: dtype of the model's cache (`init_cache`; default: the model's compute dtype).
        mesh: device mesh for the decode state (default: the model's mesh; None = one device).
        row_buckets: the row counts a batched prefill and a bulk insert are padded to (one program
            each); the slots' power of two is always one. Default: every power of two up to it.
        length_buckets: the lengths a prompt piece is padded to (`length_for`; () = powers of two).
    """

    def __init__(self, model: DecodeModel, *, max_concurrent_decodes: int, max_prefill_length: int,
                 max_target_length: int, cache_dtype=None, mesh: Mesh | None = None,
                 max_stop_strings: int = STOP_STRINGS, row_buckets: Sequence[int] = (),
                 length_buckets: Sequence[int] = ()):
        if max_prefill_length > max_target_length:
            raise ValueError(f"max_prefill_length {max_prefill_length} exceeds max_target_length "
                             f"{max_target_length}")
        if max_concurrent_decodes < 1:
            raise ValueError(f"max_concurrent_decodes must be >= 1, got {max_concurrent_decodes}")
        check_model(model)
        self._model = model  # its cache functions (no weights) run outside the merged copies
        self.vocab_size = int(model.vocab_size)
        self._params = nnx.state(model)
        self._slots = int(max_concurrent_decodes)
        top = bucket(self._slots)
        if any(int(r) < 1 for r in row_buckets):
            raise ValueError(f"row_buckets must be positive row counts, got {tuple(row_buckets)}")
        given = {int(r) for r in row_buckets} if row_buckets else {2 ** i for i in range(top.bit_length())}
        self.row_buckets = tuple(sorted({r for r in given if r < top} | {top}))
        self._max_prefill = int(max_prefill_length)
        self.length_buckets = length_buckets_of(length_buckets, self._max_prefill)
        self.max_target_length = int(max_target_length)
        self.cache_dtype = model.dtype if cache_dtype is None else cache_dtype
        self._mesh = model.mesh if mesh is None else mesh
        self.max_stop_strings = int(max_stop_strings)
        V = self.vocab_size
        self.no_stops = StopTable(jnp.zeros((self.max_stop_strings, 1, V), jnp.int16),
                                  jnp.full((self.max_stop_strings,), NO_LIMIT, jnp.int32))
        programs = Programs.of(model, slots=self._slots, max_target_length=self.max_target_length,
                               cache_dtype=self.cache_dtype, mesh=self._mesh, stop_strings=self.max_stop_strings)
        self._programs = programs  # shared with every engine of this shape in the process
        self._rows = programs.rows
        self._init_state, self._prefill, self._generate = programs.init_state, programs.prefill, programs.generate
        self._insert, self._extract, self._deactivate = programs.insert, programs.extract, programs.deactivate
        self.mask_words = mask_words(V)  # int32 words of a token bitmask (constrained decoding)
        self._all_allowed = jnp.full((self._slots, self.mask_words), -1, jnp.int32)

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

    @property
    def mesh(self) -> Mesh | None:
        return self._mesh

    @property
    def colocated_cpus(self) -> None:
        return None

    def rows_for(self, n: int) -> int:
        """The row count `n` rows are padded to: the least of row_buckets >= n (else n's power of two)."""
        return next((r for r in self.row_buckets if r >= n), bucket(n))

    def length_for(self, n: int, minimum: int = 1) -> int:
        """The padded length of a prompt piece of n tokens (`engine_types.padded_length`)."""
        return padded_length(n, self.length_buckets, minimum, self._max_prefill)

    def get_tokenizer(self):
        raise NotImplementedError("the engine works on token ids; tokenizers live with the checkpoint")

    def load_params(self, *args, **kwargs) -> Any:
        """The model's weights (an `nnx.State`), as passed to `prefill` / `generate`."""
        return self._params

    def init_decode_state(self, *args, **kwargs) -> DecodeState:
        """All slots empty and inactive (sharded over the mesh when there is one)."""
        return self._init_state()

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

        With `existing_prefix` (R = 1), the tokens are appended to its cache (its sampled tokens are
        dropped): a long prompt can be prefilled in pieces, a finished sequence extended. Compiles
        once per padded length; pad to a few bucket sizes. Raises ValueError for an empty or too-long
        prompt or out-of-vocab token ids.
        """
        return self.prefill_multisampling(params=params, existing_prefix=existing_prefix,
                                          padded_tokens=padded_tokens, true_length=true_length,
                                          sampler=sampler, rng=rng, num_samples=1)

    def prefill_multisampling(self, *, params, existing_prefix: Prefix | None = None, padded_tokens,
                              true_length: int | None = None, sampler: SamplingParams | None = None,
                              rng=None, num_samples: int = 1) -> tuple[Prefix, ResultTokens]:
        """`prefill` that draws `num_samples` first tokens from the ONE prefilled row (a fork)."""
        tokens = np.asarray(padded_tokens)
        if tokens.ndim != 1:
            raise ValueError(f"padded_tokens must be 1-D, got shape {tokens.shape}")
        T = tokens.shape[0]
        n = T if true_length is None else int(true_length)
        prefix = self.prefill_batch(params=params, padded_tokens=tokens[None], true_lengths=[n],
                                    samplers=[sampler or SamplingParams()], rngs=[rng],
                                    num_samples=[num_samples], existing_prefixes=[existing_prefix])
        N = int(num_samples)
        prefix = jax.tree.map(lambda a: a[:N], prefix.replace(cache=None)).replace(cache=first_row(prefix).cache)
        return prefix, ResultTokens(prefix.token_N, prefix.logprob_N, jnp.ones((N,), bool))

    def check_tokens(self, tokens: np.ndarray, what: str = "prompt") -> None:
        """ValueError naming the offending ids unless `tokens` are integer ids inside the vocabulary."""
        if tokens.size and not np.issubdtype(tokens.dtype, np.integer):
            raise ValueError(f"{what} must hold integer token ids, got dtype {tokens.dtype}")
        V = self.vocab_size
        bad = tokens[(tokens < 0) | (tokens >= V)]
        if bad.size:
            raise ValueError(f"{what}: token ids outside the vocabulary [0, {V}): "
                             f"{sorted(set(bad.tolist()))[:8]}")

    def prefill_batch(self, *, params, padded_tokens, true_lengths: Sequence[int],
                      samplers: Sequence[SamplingParams], rngs: Sequence[Any],
                      num_samples: Sequence[int], existing_prefixes: Sequence[Prefix | None],
                      existing_lengths: Sequence[int] | None = None,
                      allowed: Sequence[np.ndarray | None] | None = None) -> Prefix:
        """Prefills B prompts in ONE call (rows padded to `rows_for(B)`) and draws num_samples[b]
        first tokens from row b. Returns a Prefix with R >= B rows and N >= sum(num_samples) samples,
        the samples of row b being consecutive (padding samples and rows come last; ignore them).
        existing_lengths[b]: tokens already in existing_prefixes[b]'s cache, when the caller knows
        them (default: read from the device, which waits for that prefix to be computed).
        allowed[j]: the int32 token bitmask ([mask_words]) sample j's first token is drawn from
        (None: any token), samples numbered over all rows in order."""
        tokens = np.asarray(padded_tokens)
        if tokens.ndim != 2:
            raise ValueError(f"padded_tokens must be [B, T], got shape {tokens.shape}")
        B, T = tokens.shape
        if not B == len(true_lengths) == len(samplers) == len(rngs) == len(num_samples) == len(
                existing_prefixes):
            raise ValueError("prefill_batch: one length, sampler, rng, num_samples and prefix per row")
        if T > self._max_prefill:
            raise ValueError(f"prompt of padded length {T} exceeds max_prefill_length {self._max_prefill}")
        lengths = np.asarray(true_lengths, np.int64)
        for b in range(B):
            n = int(lengths[b])
            if n <= 0:
                raise ValueError("empty prompt: true_length must be >= 1")
            if n > T:
                raise ValueError(f"true_length {n} exceeds the padded length {T}")
            self.check_tokens(tokens[b, :n])
            if num_samples[b] < 1:
                raise ValueError(f"num_samples must be >= 1, got {num_samples[b]}")
            existing = existing_prefixes[b]
            if existing is not None and self._model.cache_lengths(existing.cache).shape[0] != 1:
                raise ValueError("existing_prefix must hold a single cache row (see engine_fns.first_row)")
            if existing is None:
                start = 0
            elif existing_lengths is not None:
                start = int(existing_lengths[b])
            else:
                start = int(self._model.cache_lengths(existing.cache)[0])
            if start + n > self.max_target_length:
                raise ValueError(f"prompt of {start + n} tokens exceeds max_target_length "
                                 f"{self.max_target_length}")
        # rows padded to a row bucket, samples to the slots' bucket (only their logits cost): few
        # compiled shapes
        R, N = self.rows_for(B), max(bucket(self._slots), bucket(sum(num_samples)))
        padded = np.zeros((R, T), np.int32)
        padded[:B] = np.where(np.arange(T)[None] < lengths[:, None], tokens, 0)
        n_R = np.zeros((R,), np.int32)
        n_R[:B] = lengths
        row_N, index_N, keys_Nx2, temp_N, topk_N, topp_N = sample_arrays(samplers, rngs, num_samples, N)
        allowed_NxW = np.full((N, self.mask_words), -1, np.int32)
        for j, row in enumerate(allowed or ()):
            if row is not None:
                allowed_NxW[j] = row
        cache = self._rows.stack(existing_prefixes, R)
        return self._prefill(params, cache, padded, n_R, row_N, index_N, keys_Nx2, temp_N, topk_N, topp_N,
                             allowed_NxW)  # numpy: the jitted call transfers them, no dispatch each

    # Insert.
    def insert(self, prefix: Prefix, decode_state: DecodeState, slot: int) -> DecodeState:
        """Copies sample 0 of `prefix` (its cache row, first token, key, controls) into `slot`,
        overwriting whatever was there, and marks the slot active."""
        self._check_slot(slot)
        return self.bulk_insert(prefix, decode_state, [slot], samples=[0])

    def bulk_insert(self, prefix: Prefix, decode_state: DecodeState, slots: Sequence[int],
                    samples: Sequence[int] | None = None, stops: Sequence[StopSpec] | None = None,
                    stop_table: StopTable | None = None) -> DecodeState:
        """Sample samples[i] (default i) of `prefix` goes to slot slots[i]; the cache row is copied.

        stops[i] (default: no end condition) are the sample's end conditions, checked on the device
        from its first token on (rows of `stop_table`); a sample whose first token already ends it is
        inserted stopped, with its reason."""
        slots = [int(s) for s in slots]
        samples = list(range(len(slots))) if samples is None else [int(j) for j in samples]
        if len(samples) != len(slots):
            raise ValueError("bulk_insert: one sample per slot")
        for s in slots:
            self._check_slot(s)
        if len(set(slots)) != len(slots):
            raise ValueError(f"bulk_insert: repeated slots {slots}")
        if any(not 0 <= j < prefix.num_samples for j in samples):
            raise ValueError(f"bulk_insert: samples {samples} outside [0, {prefix.num_samples})")
        if stops is not None and len(stops) != len(slots):
            raise ValueError("bulk_insert: one StopSpec per slot")
        M, P = self.rows_for(len(slots)), self.max_stop_strings
        slot_M = np.full((M,), self._slots, np.int32)  # padding writes are dropped (out of range)
        slot_M[:len(slots)] = slots
        sample_M = np.zeros((M,), np.int32)
        sample_M[:len(samples)] = samples
        max_new_M, ids_MxK, on_MxP = stop_arrays(stops or (), M, P)
        table = self.no_stops if stop_table is None else stop_table
        return self._insert(prefix, decode_state, slot_M, sample_M, max_new_M, ids_MxK, on_MxP, table)

    def extract(self, decode_state: DecodeState, slot: int) -> Prefix:
        """The live sequence of `slot` as a Prefix (R = N = 1): its cache and its last sampled token
        (not in the cache yet), to be extended later with `prefill(existing_prefix=...)`."""
        self._check_slot(slot)
        return self._extract(decode_state, np.int32(slot))

    def select(self, prefix: Prefix, sample: int) -> Prefix:
        """Sample `sample` of `prefix` alone, with its cache row (R = N = 1)."""
        if not 0 <= sample < prefix.num_samples:
            raise ValueError(f"sample {sample} outside [0, {prefix.num_samples})")
        return select_sample(prefix, jnp.int32(sample))

    # Generate.
    def generate(self, params, decode_state: DecodeState, stop_table: StopTable | None = None,
                 steps: int = 1, allowed_SxW=None) -> tuple[DecodeState, ResultTokens]:
        """`steps` decode steps (one jitted call) for every active slot: each feeds the slot's last
        token and samples the next. A slot whose end condition fires (its StopSpec; or its cache is
        full) becomes inactive with its reason and is not touched again until the next insert, so
        results can be read calls later. Result arrays are [slots] for steps=1, else [steps, slots];
        `reason` / `hit` are the slots' reason_S / hit_S after the call. allowed_SxW: int32 token
        bitmasks [slots, mask_words] the slots sample from at every step of the call (constrained
        decoding; default all tokens; the same shape always, so nothing recompiles)."""
        table = self.no_stops if stop_table is None else stop_table
        allowed = self._all_allowed if allowed_SxW is None else jnp.asarray(allowed_SxW, jnp.int32)
        return self._generate(params, decode_state, table, int(steps), allowed)

    def compiled_shapes(self) -> dict[str, int]:
        """Number of compiled variants per entry point, over the engines sharing its programs (a weight
        swap must not add any)."""
        return self._programs.compiled_shapes()

    def _check_slot(self, slot):
        if not 0 <= int(slot) < self._slots:
            raise ValueError(f"slot {slot} outside [0, {self._slots})")
