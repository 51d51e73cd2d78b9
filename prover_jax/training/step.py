"""The optimizer, the train state and one pure, jitted train step with gradient accumulation, for RL
and SFT alike: the objective (GRPO's loss, or SFT's NLL) is its argument.

    optimizer = make_optimizer(cfg.optim)          # training/optim.py; SFT: make_optimizer(sft_optim(cfg.sft))
    graphdef = nnx.graphdef(model)
    state = init_train_state(model, optimizer)     # shares buffers with `model` until the 1st step
    train_step = make_train_step(graphdef, grpo_objective(cfg.loss), optimizer, mesh=mesh)  # or nll_objective()
    state, metrics = train_step(state, batch)      # batch arrays [M, mb, L]; `state` is donated
    state, metrics = train_step(state, batch, frozen)   # LoRA: state.params = adapters, frozen = base
    train_step.precompile(state, abstract_batches) # (with a mesh) compile shapes ahead of the 1st step

After the first step the model's own arrays are donated: rebuild it with
`nnx.merge(graphdef, state.params)`.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from prover_jax.training.loss import (AGGREGATIONS, KL_ESTIMATORS, RATIO_LEVELS, count_sequences, grpo_loss,
                                      selected_logprobs, token_logprobs)

BATCH_KEYS = ("tokens", "valid", "loss_mask", "advantages", "old_logprobs")


@flax.struct.dataclass
class TrainState:
    params: nnx.State  # the model's nnx.Param state (graphdef kept by the caller)
    opt_state: optax.OptState
    step: jax.Array  # int32 scalar: optimizer updates applied (skipped steps do not count)


BATCH_DTYPES = dict(tokens=jnp.int32, valid=jnp.bool_, loss_mask=jnp.bool_, advantages=jnp.float32,
                    old_logprobs=jnp.float32, ref_logprobs=jnp.float32, prox_logprobs=jnp.float32,
                    segment_ids=jnp.int32, policy_at=jnp.int32)


def proximal_pass(config) -> bool:
    """Off-policy batches with truncated IS (loss.tis_cap > 0, rollout.off_policy_steps = 1) are scored
    under the weights before the update (the batches carry prox_logprobs)."""
    return config.loss.tis_cap > 0 and int(config.rollout.off_policy_steps) > 0


def abstract_batch(mesh, M: int, mb: int, L: int, kl: bool = False, prox: bool = False,
                   packed: bool = False, policy: int = 0) -> dict:
    """ShapeDtypeStructs of a [M, mb, L] train batch laid out as the trainer places it (with
    `policy` = P > 0, policy_at [M, mb, P] too)."""
    from prover_jax.distributed.arrays import batch_sharding
    sh = batch_sharding(mesh, (M, mb, L))
    keys = (BATCH_KEYS + (("ref_logprobs",) if kl else ()) + (("prox_logprobs",) if prox else ())
            + (("segment_ids",) if packed else ()))
    out = {k: jax.ShapeDtypeStruct((M, mb, L), BATCH_DTYPES[k], sharding=sh) for k in keys}
    if policy > 0:
        out["policy_at"] = jax.ShapeDtypeStruct((M, mb, policy), jnp.int32,
                                                sharding=batch_sharding(mesh, (M, mb, policy)))
    return out


def init_train_state(model: nnx.Module, optimizer: optax.GradientTransformation,
                     params: nnx.State | None = None) -> TrainState:
    """TrainState of `model`'s Params, or of `params` (LoRA: the adapters only), optimizer moments
    placed like the params they track."""
    if params is None:
        _, params = nnx.split(model, nnx.Param)
    return TrainState(params=params, opt_state=optimizer.init(params),
                      step=jnp.zeros((), jnp.int32))


def _loss_kwargs(loss_cfg, horizon=None):
    AGGREGATIONS.get(loss_cfg.aggregation)  # ValueError naming loss.aggregation and the known names
    KL_ESTIMATORS.get(loss_cfg.kl_estimator)  # likewise loss.kl_estimator, loss.ratio_level
    RATIO_LEVELS.get(loss_cfg.ratio_level)
    return dict(eps_low=loss_cfg.eps_low, eps_high=loss_cfg.eps_high, dual_clip=loss_cfg.dual_clip,
                aggregation=loss_cfg.aggregation, kl_coef=loss_cfg.kl_coef,
                entropy_coef=loss_cfg.entropy_coef,
                horizon=horizon if loss_cfg.horizon is None else loss_cfg.horizon,
                tis_cap=float(loss_cfg.tis_cap), kl_estimator=loss_cfg.kl_estimator,
                ratio_level=loss_cfg.ratio_level)


class Objective(NamedTuple):
    """What the train step minimises: `fn(model, mb, num_tokens, num_seqs, logprob_chunk) -> (loss,
    metrics)` on one micro-batch (dict of [mb, L] arrays, [mb, P] for policy_at), its terms partial sums
    over the whole batch's N policy tokens and S sequences (so micro-batch losses add up); `keys`: the
    batch keys it needs."""
    fn: Callable
    keys: tuple


def grpo_objective(loss_cfg, horizon: int | None = None) -> Objective:
    """`loss.grpo_loss` with `loss_cfg`'s clip, aggregation, KL, entropy and truncated-IS settings, on
    the log-probs of the whole batch (or of policy_at's positions only). `horizon`: T of
    seq-mean-token-sum-norm unless loss.horizon sets it; the trainer passes rollout.max_target_length,
    a constant, so the loss's scale does not depend on the row length, packing or policy_at."""
    kwargs = _loss_kwargs(loss_cfg, horizon)
    with_entropy = bool(loss_cfg.entropy_coef) or loss_cfg.entropy_metric

    def fn(model, mb, num_tokens, num_seqs, logprob_chunk):
        seg = mb.get("segment_ids")
        logp, entropy = token_logprobs(model, mb["tokens"], mb["valid"], chunk=logprob_chunk,
                                       with_entropy=with_entropy, segment_ids_BxL=seg, at_BxP=mb.get("policy_at"))
        prox = mb.get("prox_logprobs")  # off-policy with truncated IS: the ratio is against these
        return grpo_loss(logp, mb["old_logprobs"] if prox is None else prox, mb["advantages"], mb["loss_mask"],
                         ref_logprobs=mb.get("ref_logprobs"), entropy=entropy if with_entropy else None,
                         num_tokens=num_tokens, num_seqs=num_seqs,
                         behavior_logprobs=None if prox is None else mb["old_logprobs"], segment_ids=seg,
                         **kwargs)

    return Objective(fn, BATCH_KEYS)


def _nll(model, mb, num_tokens, num_seqs, logprob_chunk):
    at = mb["policy_at"]  # each row's policy positions (>= 1), 0-padded
    logp = selected_logprobs(model, mb["tokens"], mb["valid"], at)
    m = (at > 0).astype(jnp.float32)
    return -jnp.sum(logp * m) / jnp.maximum(num_tokens.astype(jnp.float32), 1.0), {}


def nll_objective() -> Objective:
    """SFT's loss: the mean NLL of the policy tokens, - sum_t m_t log pi(x_t | x_<t) / N, projected onto
    the vocabulary at policy_at's positions only."""
    return Objective(_nll, ("tokens", "valid", "loss_mask", "policy_at"))


def make_train_step(graphdef, objective, optimizer: optax.GradientTransformation, *, mesh=None,
                    logprob_chunk: int | None = None, epochs: int = 1, mini_batches: int = 1, skip_zero_grad=True):
    """Jitted `train_step(state, batch, frozen=None) -> (state, metrics)`, `state` donated.

    frozen: the model's state that is not trained (LoRA: the base weights, `models.lora.split_lora`;
    state.params then holds the adapters only, so the gradients, the clip and the optimizer see
    them alone); the model is nnx.merge(graphdef, state.params, frozen). Not donated.

    objective: an `Objective`: `grpo_objective(cfg.loss)` for RL, `nll_objective()` for SFT.
    batch: token-aligned arrays with a leading micro-batch axis, [M, mb, L] each (RL: tokens, valid,
    loss_mask, advantages, old_logprobs, and ref_logprobs when loss.kl_coef > 0; prox_logprobs for
    off-policy batches with loss.tis_cap > 0, old_logprobs then being the behaviour's; segment_ids for
    packed rows; policy_at [M, mb, P] to project onto the vocabulary at those positions only; see
    batch.py. SFT: tokens, valid, loss_mask, policy_at).

    Accumulation is exact for every aggregation: the normalisers N (policy tokens) and S (sequences
    with a policy token) are counted over the whole [M, mb] batch first, and each micro-batch loss is
    its partial sum over those global N, S (see loss.py), so sum_k loss_k = loss(whole batch) and the
    gradients are summed (in fp32) under lax.scan; then ONE optimizer update.

    If the loss or the gradient norm is not finite, the update is skipped: params, opt_state and
    step are returned unchanged (bit-identical) and metrics["skipped"] = 1.

    skip_zero_grad: an exactly zero gradient (every advantage 0) leaves params and opt_state as they
    are (metrics["no_signal"] = 1), the step still counts; else Adam's moments keep moving the weights.

    PPO epochs (`epochs` E, `mini_batches` N; train.ppo_epochs, train.mini_batches): the M
    micro-batches are cut into N mini-batches of ceil(M / N) (zero-padded: an empty mini-batch is
    no update), and the step makes E passes over them, one optimizer update per mini-batch (its own
    N, S normalisers), E * N in all, in one jitted call. old_logprobs stay the behaviour's, so from the
    second update on the ratio moves off 1 and the clip acts. A non-finite update is skipped alone;
    `step` counts calls with at least one update applied (RL steps), optax's own count the updates.
    Metrics: means over the non-empty updates; num_tokens / num_seqs of the whole batch; skipped =
    non-finite updates; updates = updates applied.

    With `mesh`: each micro-batch is sharded over its sequences (logical "batch" -> data, fsdp), and
    the new state keeps exactly the shardings of the state passed in (read on the first call).
    """
    if epochs < 1 or mini_batches < 1:
        raise ValueError(f"train.ppo_epochs ({epochs}) and train.mini_batches ({mini_batches}) must be >= 1")

    def loss_fn(params, mb, num_tokens, num_seqs, frozen):
        model = nnx.merge(graphdef, params) if frozen is None else nnx.merge(graphdef, params, frozen)
        return objective.fn(model, mb, num_tokens, num_seqs, logprob_chunk)

    step = functools.partial(_step, functools.partial(_update, loss_fn, optimizer, skip_zero_grad=skip_zero_grad),
                             objective.keys, epochs, mini_batches)
    return jax.jit(step, donate_argnums=0) if mesh is None else TrainStep(step, mesh)


def _counts(batch):
    """(N, S) of a [M, mb, L] batch: its policy tokens and the sequences holding one."""
    mask = batch["loss_mask"].astype(bool)
    seg = batch.get("segment_ids")
    return jnp.sum(mask), count_sequences(mask.reshape(-1, mask.shape[-1]),
                                          None if seg is None else seg.reshape(-1, seg.shape[-1]))


def _update(loss_fn, optimizer, state: TrainState, batch, grad_shardings=None, frozen=None, *, skip_zero_grad=True):
    """One optimizer update from the [M, mb, L] batch, gradients summed in fp32 over its micro-batches:
    (params, opt_state, finite, metrics); not finite (or a zero gradient): params, opt_state unchanged."""
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    num_tokens, num_seqs = _counts(batch)

    def micro(carry, mb):
        grads_acc, metrics_acc = carry
        (loss, metrics), grads = grad_fn(state.params, mb, num_tokens, num_seqs, frozen)
        if grad_shardings is not None:
            grads = jax.lax.with_sharding_constraint(grads, grad_shardings)
        grads_acc = jax.tree.map(lambda a, g: a + g.astype(jnp.float32), grads_acc, grads)
        metrics_acc = jax.tree.map(jnp.add, metrics_acc, dict(metrics, loss=loss))
        return (grads_acc, metrics_acc), None

    first = jax.tree.map(lambda x: x[0], batch)
    shapes = jax.eval_shape(loss_fn, state.params, first, num_tokens, num_seqs, frozen)
    zero_metrics = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), dict(shapes[1], loss=shapes[0]))
    zero_grads = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), state.params)
    (grads, metrics), _ = jax.lax.scan(micro, (zero_grads, zero_metrics), batch)
    grads = jax.tree.map(lambda g, p: g.astype(p.dtype), grads, state.params)

    grad_norm = optax.global_norm(grads)
    finite = jnp.isfinite(metrics["loss"]) & jnp.isfinite(grad_norm)
    grads = jax.tree.map(lambda g: jnp.where(finite, g, 0), grads)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)

    no_signal = grad_norm == 0
    apply = finite & ~no_signal if skip_zero_grad else finite

    def keep(new, old):
        return jax.tree.map(lambda n, o: jnp.where(apply, n, o), new, old)

    metrics = dict(metrics, num_seqs=num_seqs, grad_norm=grad_norm, no_signal=no_signal.astype(jnp.float32))
    return keep(params, state.params), keep(opt_state, state.opt_state), finite, metrics


def _with_lr(new_state, metrics):
    hyper = getattr(new_state.opt_state, "hyperparams", None)
    if hyper is not None and "learning_rate" in hyper:
        metrics["learning_rate"] = hyper["learning_rate"]
    return new_state, metrics


def _step(update, keys, epochs: int, mini_batches: int, state: TrainState, batch, frozen=None, grad_shardings=None):
    """The whole step: one update, or `epochs` passes over `mini_batches` mini-batches (`_ppo_epochs`)."""
    missing = [k for k in keys if k not in batch]
    if missing:
        raise KeyError(f"train batch lacks {missing}")
    if epochs * mini_batches == 1:
        params, opt_state, finite, metrics = update(state, batch, grad_shardings, frozen)
        new_state = TrainState(params=params, opt_state=opt_state, step=state.step + finite.astype(jnp.int32))
        return _with_lr(new_state, dict(metrics, skipped=1 - finite.astype(jnp.int32)))
    return _with_lr(*_ppo_epochs(update, epochs, mini_batches, state, batch, grad_shardings, frozen))


def _ppo_epochs(update, epochs: int, mini_batches: int, state: TrainState, batch, grad_shardings, frozen):
    """E passes over N zero-padded mini-batches of the M micro-batches, one update each (see
    make_train_step); metrics averaged over the non-empty updates."""
    M = next(iter(batch.values())).shape[0]
    per = -(-M // mini_batches)
    pad = per * mini_batches - M
    minis = jax.tree.map(lambda x: jnp.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1)).reshape(
        (mini_batches, per) + x.shape[1:]), batch)

    def one(carry, n):
        params, opt_state, applied = carry
        mini = jax.tree.map(lambda x: jax.lax.dynamic_index_in_dim(x, n, keepdims=False), minis)
        nonempty = jnp.any(mini["loss_mask"])
        cur = TrainState(params=params, opt_state=opt_state, step=state.step)
        new_params, new_opt, finite, m = update(cur, mini, grad_shardings, frozen)
        ok = finite & nonempty
        params, opt_state = jax.tree.map(lambda a, b: jnp.where(ok, a, b), (new_params, new_opt),
                                         (params, opt_state))
        m = dict(m, weight=nonempty.astype(jnp.float32), skipped=(nonempty & ~finite).astype(jnp.int32))
        return (params, opt_state, applied + ok.astype(jnp.int32)), m

    order = jnp.tile(jnp.arange(mini_batches, dtype=jnp.int32), epochs)
    (params, opt_state, applied), ms = jax.lax.scan(one, (state.params, state.opt_state, jnp.int32(0)), order)
    w = ms.pop("weight")
    skipped = jnp.sum(ms.pop("skipped"))
    metrics = {k: jnp.sum(v * w.reshape((-1,) + (1,) * (v.ndim - 1))) / jnp.maximum(jnp.sum(w), 1.0)
               for k, v in ms.items()}
    num_tokens, num_seqs = _counts(batch)
    metrics.update(num_tokens=num_tokens.astype(jnp.float32), num_seqs=num_seqs, skipped=skipped, updates=applied)
    new_state = TrainState(params=params, opt_state=opt_state, step=state.step + (applied > 0).astype(jnp.int32))
    return new_state, metrics


class TrainStep:
    """`make_train_step` on a mesh: `step(state, batch, frozen=None)` runs the program for the state's
    layout and the batch's shapes, compiled ahead by `precompile` or jitted on first use."""

    def __init__(self, step: Callable, mesh):
        self.step, self.mesh = step, mesh
        self.replicated = NamedSharding(mesh, P())
        self._jitted: dict = {}  # (state structure, batch shapes) -> jax.jit program
        self._compiled: dict = {}  # the same keys -> executables from precompile

    def _placed(self, x):
        s = getattr(x, "sharding", None)
        return s if isinstance(s, NamedSharding) and s.mesh == self.mesh else self.replicated

    @staticmethod
    def _key(state, batch):
        return jax.tree.structure(state), tuple((k, tuple(v.shape), str(v.dtype)) for k, v in sorted(batch.items()))

    def jitted(self, state: TrainState, batch, frozen=None):
        """The jitted step for states laid out like `state` and batches of `batch`'s shapes (arrays or
        ShapeDtypeStructs): in_shardings are the state's own, `batch_sharding` for every batch array
        and the frozen weights' own; out_shardings the state's and replicated metrics. So the whole
        layout is fixed before step 1, and `jitted(state, batch).lower(state, batch)` compiles it
        (LoRA: `frozen` a third argument everywhere)."""
        from prover_jax.distributed.arrays import batch_sharding

        key = self._key(state, batch)
        if key not in self._jitted:
            state_sh = jax.tree.map(self._placed, state)
            batch_sh = {k: batch_sharding(self.mesh, tuple(v.shape)) for k, v in batch.items()}
            ins = (state_sh, batch_sh) + (() if frozen is None else (jax.tree.map(self._placed, frozen),))
            fn = functools.partial(_with_grad_shardings, self.step, state_sh.params)
            self._jitted[key] = jax.jit(fn, in_shardings=ins, out_shardings=(state_sh, self.replicated),
                                        donate_argnums=0)
        return self._jitted[key]

    def precompile(self, state: TrainState, batches, frozen=None) -> int:
        """Compiles the step ahead of time for each abstract batch (dicts of ShapeDtypeStructs laid
        out as `batch_sharding`); a later call with those shapes runs the executable, no compile.
        Returns how many were compiled."""
        n = 0
        for b in batches:
            key = self._key(state, b)
            if key not in self._compiled:
                args = (state, b) if frozen is None else (state, b, frozen)
                self._compiled[key] = self.jitted(*args).lower(*args).compile()
                n += 1
        return n

    def __call__(self, state: TrainState, batch, frozen=None):
        from prover_jax.distributed.arrays import batch_sharding

        batch = {k: v if isinstance(v, jax.Array) and not v.sharding.is_fully_addressable else
                 jax.device_put(v, batch_sharding(self.mesh, v.shape)) for k, v in batch.items()}
        args = (state, batch) if frozen is None else (state, batch, frozen)
        return (self._compiled.get(self._key(state, batch)) or self.jitted(*args))(*args)


def _with_grad_shardings(step, grad_shardings, state, batch, frozen=None):
    return step(state, batch, frozen, grad_shardings=grad_shardings)
