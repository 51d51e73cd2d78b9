"""Token sampling: temperature, top-k and top-p (nucleus) over fp32 logits, per row.

    tokens_B, logprobs_B = sample(logits_BxV, rng, temperature_B, top_k_B, top_p_B)

Every control is a per-row array, so one compiled function serves a batch mixing greedy and sampled
requests. A row is greedy (argmax) when its temperature is below GREEDY_TEMPERATURE (1e-5, vLLM's
epsilon: logits / temperature would overflow fp32 long before 0). Otherwise the token is drawn from
softmax(logits / temperature) restricted to the kept set, as transformers' TopKLogitsWarper then
TopPLogitsWarper keep it (and vLLM): top-k keeps every logit >= the k-th largest (top_k = 0: all;
ties at the k-th are all kept, so more than k may be); top-p then keeps the shortest prefix of those,
in decreasing order, whose renormalised mass reaches top_p (mass before a token < top_p), equal logits
ordered by decreasing token id (the order HF's stable ascending sort gives), so a cut through tied
logits keeps the highest ids. Nothing outside the kept set is ever drawn.

The returned logprob is log_softmax(logits)[token] of the RAW logits (temperature 1, no filtering),
i.e. the log-probability of the token under the policy itself. This is what a policy-gradient loss
needs: the learner recomputes the same quantity from the same weights, so the two can be compared
(importance ratios, KL) without knowing which sampling controls produced the token.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

MASK_BITS = 32  # tokens per int32 word of a token bitmask (constrained decoding)
GREEDY_TEMPERATURE = 1e-5  # temperatures below it are greedy (argmax)


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """Sampling controls of one request. temperature < GREEDY_TEMPERATURE (1e-5; 0 included) = greedy;
    top_k 0 = no top-k; top_p 1 = no top-p."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        if not self.temperature >= 0.0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if int(self.top_k) != self.top_k or self.top_k < 0:
            raise ValueError(f"top_k must be a non-negative integer, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE


def _is_typed_key(rng) -> bool:
    return jnp.issubdtype(rng.dtype, jax.dtypes.prng_key)


def row_keys(rng, batch: int):
    """`rng` as `batch` keys: a single key is split, a stack of `batch` keys is used as is."""
    single_ndim = 0 if _is_typed_key(rng) else 1
    if rng.ndim == single_ndim:
        return jax.random.split(rng, batch)
    if rng.shape[0] != batch:
        raise ValueError(f"rng holds {rng.shape[0]} keys for a batch of {batch} rows")
    return rng


def kept_mask(logits_BxV, top_k_B, top_p_B):
    """bool [B, V]: tokens that top-k then top-p keep (applied to already temperature-scaled logits).

    With s the logits sorted in decreasing order (equal ones by decreasing token id): top-k keeps
    s >= s[k-1]; top-p keeps rank r of those iff sum_{i<r} softmax(kept s)_i < top_p (rank 0 always).
    The last kept rank's logit t and the c kept ranks equal to it give: logit > t, or logit == t and
    fewer than c tokens of logit t have a higher id.
    """
    B, V = logits_BxV.shape
    sorted_BxV = -jnp.sort(-logits_BxV, axis=-1)  # descending
    k_B = jnp.where(top_k_B > 0, jnp.minimum(top_k_B, V), V).astype(jnp.int32)
    in_k = sorted_BxV >= jnp.take_along_axis(sorted_BxV, (k_B - 1)[:, None], axis=-1)  # ties at k-th kept
    probs = jax.nn.softmax(jnp.where(in_k, sorted_BxV, -jnp.inf), axis=-1)
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    keep_sorted = in_k & ((mass_before < top_p_B[:, None]) | (top_p_B[:, None] >= 1.0))
    n_keep = jnp.maximum(jnp.sum(keep_sorted, axis=-1), 1)  # the top token is always kept
    threshold = jnp.take_along_axis(sorted_BxV, (n_keep - 1)[:, None], axis=-1)
    ties_kept = n_keep[:, None] - jnp.sum(sorted_BxV > threshold, axis=-1, keepdims=True)
    tie = (logits_BxV == threshold).astype(jnp.int32)
    higher_ids = jnp.cumsum(tie[:, ::-1], axis=-1)[:, ::-1] - tie  # tied tokens of a higher id
    return (logits_BxV > threshold) | ((tie > 0) & (higher_ids < ties_kept))


def mask_words(vocab_size: int) -> int:
    """int32 words of a token bitmask over `vocab_size` tokens."""
    return (vocab_size + MASK_BITS - 1) // MASK_BITS


def unpack_bitmask(mask_BxW, vocab_size: int):
    """bool [B, V] from an int32 bitmask [B, mask_words(V)] (bit i of word w: token MASK_BITS w + i)."""
    bits = (mask_BxW[:, :, None] >> jnp.arange(MASK_BITS, dtype=jnp.int32)[None, None, :]) & 1
    return bits.reshape(mask_BxW.shape[0], -1)[:, :vocab_size].astype(bool)


def sample(logits_BxV, rng, temperature_B, top_k_B, top_p_B, allowed_BxW=None):
    """Samples one token per row. Returns (tokens_B int32, logprobs_B fp32); see the module docstring.

    rng: one PRNG key (split per row) or a stack of B keys (row b uses key b, so a row's draw does not
    depend on the other rows). Jittable; controls may be traced arrays. allowed_BxW: an int32 token
    bitmask per row (constrained decoding; all bits set = unconstrained): tokens outside it are never
    drawn (greedy included); the returned logprob stays that of the raw policy.
    """
    raw = logits_BxV.astype(jnp.float32)
    logits = raw
    if allowed_BxW is not None:
        logits = jnp.where(unpack_bitmask(allowed_BxW, raw.shape[-1]), raw, -jnp.inf)
    B = logits.shape[0]
    temperature_B = jnp.broadcast_to(jnp.asarray(temperature_B, jnp.float32), (B,))
    top_k_B = jnp.broadcast_to(jnp.asarray(top_k_B, jnp.int32), (B,))
    top_p_B = jnp.broadcast_to(jnp.asarray(top_p_B, jnp.float32), (B,))
    greedy_B = temperature_B < GREEDY_TEMPERATURE
    scaled = logits / jnp.where(greedy_B, 1.0, temperature_B)[:, None]
    # the [B, V] sort of kept_mask is skipped when no row filters
    filters = jnp.any(~greedy_B & ((top_k_B > 0) | (top_p_B < 1.0)))
    mask = jax.lax.cond(filters, lambda: kept_mask(scaled, top_k_B, top_p_B),
                        lambda: jnp.ones(scaled.shape, bool))
    filtered = jnp.where(mask, scaled, -jnp.inf)
    keys = row_keys(rng, B)
    # the [B, V] Gumbel draw is skipped when every row is greedy
    drawn_B = jax.lax.cond(jnp.all(greedy_B), lambda: jnp.zeros((B,), jnp.int32),
                           lambda: jax.vmap(jax.random.categorical)(keys, filtered).astype(jnp.int32))
    tokens_B = jnp.where(greedy_B, jnp.argmax(logits, axis=-1), drawn_B).astype(jnp.int32)
    logprobs_B = jnp.take_along_axis(jax.nn.log_softmax(raw, axis=-1), tokens_B[:, None], axis=-1)[:, 0]
    return tokens_B, logprobs_B
