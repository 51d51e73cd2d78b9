"""GRPO policy loss on token-aligned batches, and per-token log-probs / entropies from the model.

Token alignment (the trainer's batch contract): logp[:, t] = log_softmax(logits[:, t-1])[tokens[:, t]],
logp[:, 0] = 0; `loss_mask[:, t]` marks the policy tokens (sampled by the policy), never position 0.

Aggregation `agg(x)` of a per-token quantity x over the policy tokens m (N = sum m, n_i = sum_t m_it,
S = #sequences with n_i > 0, T = horizon: the trainer passes a constant, rollout.max_target_length,
unless loss.horizon sets it; `aggregate` alone defaults to the padded length L). A sequence is a row,
or in a packed row (`segment_ids`) one of its trajectories:
    token-mean               sum_it m x / N
    seq-mean-token-mean      (1/S) sum_{i: n_i>0} (sum_t m_it x_it / n_i)
    seq-mean-token-sum-norm  sum_it m x / (S T)   (Dr.GRPO: per-sequence sums over a constant horizon)
verl's `agg_loss` writes the last mode as sum_it m x / T on whatever batch it is handed and relies on
its gradient-accumulation scale (micro_bsz / mini_bsz) to supply the 1/S; here S is explicit, so the
value does not depend on how the batch is split. N and S may be passed in (`num_tokens`, `num_seqs`)
as totals over a larger batch: then every term is a partial sum and the losses of the parts add up
to the loss of the whole (this is how `step.make_train_step` accumulates micro-batches exactly).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from prover_jax.models import packing
from prover_jax.registry import Registry

LOG_RATIO_CLAMP = 20.0  # |logp - logp_old| is clipped here before exp (as verl does)
KL_CLAMP = 10.0  # the k3 estimate is clamped to [-KL_CLAMP, KL_CLAMP] (as verl does; k3 >= 0)


def _chunk_logprobs(model, h_BxTxD, targets_BxT, with_entropy: bool = True):
    """log p(target) and entropy -sum_v p_v log p_v of each position's next-token distribution
    (zeros without `with_entropy`: no second pass over the [B, T, V] log-probs)."""
    logp_BxTxV = jax.nn.log_softmax(model.logits(h_BxTxD), axis=-1)
    logp = jnp.take_along_axis(logp_BxTxV, targets_BxT[..., None], axis=-1)[..., 0]
    if not with_entropy:
        return logp, jnp.zeros_like(logp)
    entropy = -jnp.sum(jnp.exp(logp_BxTxV) * logp_BxTxV, axis=-1)
    return logp, entropy


def _hidden(model, tokens_BxL, valid_BxL, segment_ids_BxL=None):
    if segment_ids_BxL is None:  # unpacked rows: the model's call without packing (bit-identical to before)
        return model.hidden(tokens_BxL, mask_BxT=valid_BxL)
    return model.hidden(tokens_BxL, mask_BxT=valid_BxL, segment_ids_BxT=segment_ids_BxL)


def _project(model, h_BxNxD, targets_BxN, chunk: int | None, with_entropy: bool):
    """(logp, entropy) [B, N] of each row's N targets from the hidden states predicting them; with
    `chunk` the vocab projection runs over chunks of that many positions under `jax.checkpoint`."""
    B, n = targets_BxN.shape
    if chunk is None or chunk >= n:
        return _chunk_logprobs(model, h_BxNxD, targets_BxN, with_entropy)
    if chunk < 1:
        raise ValueError(f"logprob chunk must be >= 1, got {chunk}")
    num = -(-n // chunk)
    pad = num * chunk - n
    h = jnp.pad(h_BxNxD, ((0, 0), (0, pad), (0, 0)))
    targets = jnp.pad(targets_BxN, ((0, 0), (0, pad)))
    h_CxBxKxD = h.reshape(B, num, chunk, -1).swapaxes(0, 1)
    t_CxBxK = targets.reshape(B, num, chunk).swapaxes(0, 1)
    body = jax.checkpoint(lambda h, t: _chunk_logprobs(model, h, t, with_entropy))
    logp, entropy = jax.lax.map(lambda xs: body(*xs), (h_CxBxKxD, t_CxBxK))
    return (logp.swapaxes(0, 1).reshape(B, num * chunk)[:, :n],
            entropy.swapaxes(0, 1).reshape(B, num * chunk)[:, :n])


def _at_positions(h_BxLxD, tokens_BxL, at_BxP):
    """(h [B, P, D] predicting each asked position, its target tokens [B, P]): position t is predicted
    from the hidden state at t - 1."""
    h_BxPxD = jnp.take_along_axis(h_BxLxD, jnp.maximum(at_BxP - 1, 0)[..., None], axis=1)
    return h_BxPxD, jnp.take_along_axis(tokens_BxL, at_BxP, axis=1)


def token_logprobs(model, tokens_BxL, valid_BxL, chunk: int | None = None, with_entropy: bool = True,
                   segment_ids_BxL=None, at_BxP=None):
    """(logp [B, L], entropy [B, L]) in fp32 under `model`.

    logp[:, t] = log_softmax(W h[:, t-1])[tokens[:, t]] and entropy[:, t] = H(softmax(W h[:, t-1])),
    with h = model.hidden(tokens, mask_BxT=valid, segment_ids_BxT=segment_ids); both are 0 at t = 0
    and wherever valid[:, t] is False (at a packed trajectory's first token they are the previous
    trajectory's prediction: never a policy token). With `chunk`, the vocab projection runs over
    sequence chunks of that many positions under `jax.checkpoint` (logits recomputed in the backward
    pass), so at most a [B, chunk, V] block of logits exists at any time instead of [B, L, V]. Without
    `with_entropy` the entropy is zeros. With `at_BxP` (positions >= 1, padded with 0) the projection
    runs only at those P positions of each row (a loss's policy tokens) and both outputs are 0 elsewhere.
    """
    B, L = tokens_BxL.shape
    h_BxLxD = _hidden(model, tokens_BxL, valid_BxL, segment_ids_BxL)
    if at_BxP is not None:
        h_BxPxD, targets = _at_positions(h_BxLxD, tokens_BxL, at_BxP)
        logp_P, entropy_P = _project(model, h_BxPxD, targets, chunk, with_entropy)
        keep = (at_BxP > 0) & jnp.take_along_axis(valid_BxL.astype(bool), at_BxP, axis=1)
        rows = jnp.arange(B)[:, None]
        scatter = lambda x: jnp.zeros((B, L), jnp.float32).at[rows, at_BxP].add(jnp.where(keep, x, 0.0))  # noqa: E731
        return scatter(logp_P), scatter(entropy_P)
    logp, entropy = _project(model, h_BxLxD[:, :-1], tokens_BxL[:, 1:], chunk, with_entropy)
    keep = valid_BxL[:, 1:].astype(bool)
    zero = jnp.zeros((B, 1), jnp.float32)
    logp = jnp.concatenate([zero, jnp.where(keep, logp, 0.0)], axis=1)
    entropy = jnp.concatenate([zero, jnp.where(keep, entropy, 0.0)], axis=1)
    return logp, entropy


def selected_logprobs(model, tokens_BxL, valid_BxL, at_BxP):
    """log p(tokens[b, at[b, j]] | tokens[b, :at[b, j]]) [B, P] in fp32: the vocab projection runs
    only at the P positions asked for (positions >= 1), not at all L. A loss that needs few positions
    (the policy tokens of a demonstration) pays for the logits of those alone."""
    h_BxPxD, targets = _at_positions(model.hidden(tokens_BxL, mask_BxT=valid_BxL), tokens_BxL, at_BxP)
    logp, _ = _chunk_logprobs(model, h_BxPxD, targets)
    return logp


AGGREGATIONS: Registry = Registry("loss aggregation", field="loss.aggregation")


@AGGREGATIONS.register("token-mean")
def _token_mean(x_BxL, seq_sum, n_S, num_tokens, num_seqs, horizon):
    """sum(x) / N"""
    return jnp.sum(x_BxL) / jnp.maximum(num_tokens, 1)


@AGGREGATIONS.register("seq-mean-token-mean")
def _seq_mean_token_mean(x_BxL, seq_sum, n_S, num_tokens, num_seqs, horizon):
    """(1/S) sum_i (sum_t x_it / n_i)"""
    return jnp.sum(seq_sum(x_BxL) / jnp.maximum(n_S, 1)) / jnp.maximum(num_seqs, 1)


@AGGREGATIONS.register("seq-mean-token-sum-norm")
def _seq_mean_token_sum_norm(x_BxL, seq_sum, n_S, num_tokens, num_seqs, horizon):
    """sum(x) / (S * H)"""
    return jnp.sum(x_BxL) / (jnp.maximum(num_seqs, 1) * horizon)


def _sequence_slots(segment_ids_BxL):
    """int32 [B, L]: each token's slot among sequence_sums' B * L (row b's k-th run: b L + k - 1)."""
    B, L = segment_ids_BxL.shape
    return jnp.arange(B)[:, None] * L + packing.sequence_index(segment_ids_BxL) - 1


def sequence_sums(segment_ids_BxL=None):
    """x [B, L] -> per-sequence sums [S_max]: over each row ([B]), or with `segment_ids` (packed rows)
    over each run of equal ids ([B * L], one slot per possible run, unused slots 0)."""
    if segment_ids_BxL is None:
        return lambda x_BxL: jnp.sum(x_BxL, axis=-1)
    B, L = segment_ids_BxL.shape
    ids = _sequence_slots(segment_ids_BxL).reshape(-1)
    return lambda x_BxL: jax.ops.segment_sum(x_BxL.reshape(-1), ids, num_segments=B * L)


def sequence_broadcast(x_S, shape_BxL, segment_ids_BxL=None):
    """Per-sequence values [S_max] (as sequence_sums returns them) -> [B, L], each token its sequence's."""
    if segment_ids_BxL is None:
        return jnp.broadcast_to(x_S[:, None], shape_BxL)
    return x_S[_sequence_slots(segment_ids_BxL)]


def count_sequences(mask_BxL, segment_ids_BxL=None):
    """S: the sequences (rows, or with `segment_ids` runs of equal ids) with at least one policy token."""
    return jnp.sum(sequence_sums(segment_ids_BxL)(mask_BxL.astype(jnp.int32)) > 0)


def aggregate(x_BxL, mask_BxL, aggregation: str, *, num_tokens=None, num_seqs=None, horizon=None,
              segment_ids_BxL=None):
    """agg(x) over the tokens of `mask` (see the module docstring); masked-out values never matter.

    num_tokens / num_seqs default to this batch's N and S; horizon defaults to L. Empty denominators
    count as 1 (a batch without policy tokens aggregates to 0). With `segment_ids` (packed rows) the
    sequences are the runs of equal ids.
    """
    fn = AGGREGATIONS.get(aggregation)
    m = mask_BxL.astype(bool)
    x = jnp.where(m, x_BxL, 0.0)
    seq_sum = sequence_sums(segment_ids_BxL)
    n_S = seq_sum(m.astype(jnp.int32))
    if num_tokens is None:
        num_tokens = jnp.sum(n_S)
    if num_seqs is None:
        num_seqs = jnp.sum(n_S > 0)
    horizon = x_BxL.shape[-1] if horizon is None else horizon
    return fn(x, seq_sum, n_S, num_tokens, num_seqs, horizon)


KL_ESTIMATORS: Registry = Registry("KL estimator", field="loss.kl_estimator")


@KL_ESTIMATORS.register("k3")
def _kl_k3(logp, ref):
    """min(exp(d) - d - 1, 10), d = logp_ref - logp (k3 >= 0; no gradient past the clamp). d is clipped to
    [-20, 20] first only to keep exp finite, where the clamp already holds."""
    d = jnp.clip(ref - logp, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return jnp.minimum(jnp.exp(d) - d - 1.0, KL_CLAMP)


@KL_ESTIMATORS.register("k1")
def _kl_k1(logp, ref):
    """logp - logp_ref"""
    return logp - ref


@KL_ESTIMATORS.register("k2")
def _kl_k2(logp, ref):
    """0.5 (logp - logp_ref)^2 (verl's "mse")"""
    return 0.5 * jnp.square(logp - ref)


@KL_ESTIMATORS.register("k3+")
def _kl_k3_straight_through(logp, ref):
    """sg(k3) + k2 - sg(k2): k3's value (exactly), k2's gradient"""
    k2 = _kl_k2(logp, ref)
    return jax.lax.stop_gradient(_kl_k3(logp, ref)) + (k2 - jax.lax.stop_gradient(k2))


RATIO_LEVELS: Registry = Registry("ratio level", field="loss.ratio_level")


@RATIO_LEVELS.register("token")
def _token_ratio(logp, log_ratio, mask, segment_ids):
    """r_t = exp(clip(logp_t - logp_old_t, -20, 20))"""
    return jnp.exp(jnp.clip(log_ratio, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))


@RATIO_LEVELS.register("sequence")
def _sequence_ratio(logp, log_ratio, mask, segment_ids):
    """GSPO-token: r_it = sg(s_i) exp(logp_it - sg(logp_it)) (value s_i, gradient s_i grad logp_it),
    s_i = exp(clip(sum_t m_it (logp_it - logp_old_it) / n_i, -20, 20))"""
    seq_sum = sequence_sums(segment_ids)
    log_s = seq_sum(jnp.where(mask, log_ratio, 0.0)) / jnp.maximum(seq_sum(mask.astype(jnp.float32)), 1.0)
    s = jnp.exp(jnp.clip(log_s, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    s_BxL = jax.lax.stop_gradient(sequence_broadcast(s, logp.shape, segment_ids))
    return s_BxL * jnp.exp(logp - jax.lax.stop_gradient(logp))


def grpo_loss(logprobs, old_logprobs, advantages, loss_mask, *, eps_low: float, eps_high: float,
              dual_clip: float = 0.0, aggregation: str = "token-mean", kl_coef: float = 0.0,
              ref_logprobs=None, entropy=None, entropy_coef: float = 0.0, num_tokens=None,
              num_seqs=None, horizon=None, behavior_logprobs=None, tis_cap: float = 0.0,
              segment_ids=None, kl_estimator: str = "k3", ratio_level: str = "token"):
    """Clipped-ratio GRPO loss with per-token advantages; returns (loss, metrics).

    Per policy token (all inputs [B, L]):
        r  = exp(clip(logp - logp_old, -20, 20))
        pg = max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))
        pg = min(pg, -A c)                       for A < 0 when dual_clip c > 1
        d  = clip(logp_ref - logp, -10, 10);  kl = exp(d) - d - 1    (k3, >= 0)
    loss = agg(pg) + kl_coef agg(kl) - entropy_coef agg(entropy).

    `kl_estimator` (KL_ESTIMATORS): k3 as above | k1: kl = logp - logp_ref | k2: kl = (logp - logp_ref)^2 / 2
    | k3+: k3's value with k2's gradient, kl = sg(k3) + k2 - sg(k2). The kl metric is the estimator's.
    `ratio_level="sequence"` (GSPO, in its GSPO-token form): every token of sequence i takes
        s_i  = exp(clip(sum_t m_it (logp_it - logp_old_it) / n_i, -20, 20))
        r_it = sg(s_i) exp(logp_it - sg(logp_it))       (value s_i, gradient s_i grad logp_it)
    Advantages stay per token; clip_frac and ratio_mean are taken on this r. A sequence lies within one
    micro-batch, so s_i is exact under accumulation.

    Off-policy samples (decoupled PPO with truncated importance sampling): with `behavior_logprobs`
    (what the sampler recorded) and tis_cap > 0, `old_logprobs` are the proximal policy's (the weights
    before this update) and pg is weighted by w = min(exp(logp_old - logp_behavior), tis_cap) (no
    gradient); metric tis_weight_mean.

    Inputs at positions outside `loss_mask` are replaced by zeros first, so neither their values
    (NaN included) nor their gradients can matter. Metrics (no gradient): pg_loss, kl, entropy
    (agg of each, 0 when not given), clip_frac and dual_clip_frac (share of policy tokens where the
    ratio clip / dual clip is the active branch), ratio_mean, approx_kl = mean 0.5 (logp - logp_old)^2
    (token means over N), num_tokens (this batch's policy tokens). With `num_tokens`/`num_seqs` given
    as totals over a larger batch, every metric except num_tokens is a partial sum of that batch's.
    `segment_ids` (packed rows): the sequences of the aggregation are its runs of equal ids.
    """
    AGGREGATIONS.get(aggregation)  # ValueError naming loss.aggregation and the known names
    kl_fn, ratio_fn = KL_ESTIMATORS.get(kl_estimator), RATIO_LEVELS.get(ratio_level)
    if kl_coef and ref_logprobs is None:
        raise ValueError("kl_coef > 0 needs ref_logprobs")
    if entropy_coef and entropy is None:
        raise ValueError("entropy_coef != 0 needs entropy")
    m = loss_mask.astype(bool)
    mf = m.astype(jnp.float32)
    n_tok = jnp.sum(mf) if num_tokens is None else num_tokens
    n_seq = count_sequences(m, segment_ids) if num_seqs is None else num_seqs

    def masked(x):
        return jnp.where(m, x, 0.0).astype(jnp.float32)

    def agg(x):
        return aggregate(x, m, aggregation, num_tokens=n_tok, num_seqs=n_seq, horizon=horizon,
                         segment_ids_BxL=segment_ids)

    def token_mean(x):
        return jnp.sum(masked(x)) / jnp.maximum(n_tok, 1)

    logp, old, adv = masked(logprobs), masked(old_logprobs), masked(advantages)
    log_ratio = logp - old
    ratio = ratio_fn(logp, log_ratio, m, segment_ids)
    pg1 = -adv * ratio
    pg2 = -adv * jnp.clip(ratio, 1.0 - eps_low, 1.0 + eps_high)
    pg = jnp.maximum(pg1, pg2)
    clipped = pg2 > pg1
    tis_weight = jnp.ones_like(pg)
    if behavior_logprobs is not None and tis_cap > 0:
        tis_weight = jax.lax.stop_gradient(jnp.minimum(
            jnp.exp(jnp.clip(old - masked(behavior_logprobs), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)), tis_cap))
    dual_active = jnp.zeros_like(clipped)
    if dual_clip > 1.0:
        pg3 = -adv * dual_clip
        dual_active = (adv < 0) & (pg3 < pg)
        pg = jnp.where(adv < 0, jnp.minimum(pg, pg3), pg)
    pg_loss = agg(pg * tis_weight)
    loss = pg_loss

    kl_metric = jnp.zeros((), jnp.float32)
    if ref_logprobs is not None:
        kl_metric = agg(kl_fn(logp, masked(ref_logprobs)))
        if kl_coef:
            loss = loss + kl_coef * kl_metric
    ent_metric = jnp.zeros((), jnp.float32)
    if entropy is not None:
        ent_metric = agg(masked(entropy))
        if entropy_coef:
            loss = loss - entropy_coef * ent_metric

    metrics = dict(
        pg_loss=pg_loss, kl=kl_metric, entropy=ent_metric,
        clip_frac=token_mean(clipped.astype(jnp.float32)),
        dual_clip_frac=token_mean(dual_active.astype(jnp.float32)),
        ratio_mean=token_mean(ratio), approx_kl=token_mean(0.5 * jnp.square(log_ratio)),
        tis_weight_mean=token_mean(tis_weight),
        num_tokens=jnp.sum(mf))
    return loss, jax.tree.map(jax.lax.stop_gradient, metrics)


def check_sampling(rollout) -> None:
    """Training samples at temperature 1 without truncation: the loss's ratio is against the log-probs
    the sampler records, which are those of the model's own distribution."""
    bad = {k: v for k, v, ok in (("temperature", rollout.temperature, rollout.temperature == 1.0),
                                 ("top_p", rollout.top_p, rollout.top_p >= 1.0),
                                 ("top_k", rollout.top_k, rollout.top_k <= 0)) if not ok}
    if bad:
        raise ValueError(
            "rollout." + ", rollout.".join(f"{k}={v}" for k, v in bad.items()) + ": training rollouts must "
            "sample the policy's own distribution (temperature 1, top_p 1, top_k 0); the recorded behaviour "
            "log-probs and the loss's ratio are those of the untempered, untruncated model")
