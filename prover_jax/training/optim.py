"""The optimizer of the train step: a registry of optax optimizers and learning-rate schedules, and the
restore rule that makes a resumed run train at the configured hyperparameters.

    optimizer = make_optimizer(cfg.optim)            # SFT: make_optimizer(sft.sft_optim(cfg.sft))
    lr = configured_learning_rate(cfg.optim, updates) # the rate the latest of `updates` done ones applied
    opt_state, changed = with_configured_hyperparams(restored_opt_state, cfg.optim, updates)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from prover_jax.registry import Registry

DECAYS = ("cosine", "linear")
SCHEDULES: Registry = Registry("learning-rate schedule", field="optim.schedule")


@SCHEDULES.register("warmup_decay")
def _schedule(cfg):
    """`cfg.optim`'s learning rate at update t (0-based): linear warmup, then an optional decay,

        lr_t = lr min(1, (t + 1) / warmup_steps) d(s),   s = clip((t - warmup_steps) / decay_steps, 0, 1)
        d(s) = f + (1 - f) (1 + cos(pi s)) / 2   (cosine)  |  f + (1 - f) (1 - s)   (linear),   f = end_lr_frac

    The first update already moves (lr / warmup_steps); decay_steps = 0 keeps the rate constant after
    warmup. A plain float when neither is on.
    """
    lr, warm, steps, f = cfg.learning_rate, cfg.warmup_steps, cfg.decay_steps, cfg.end_lr_frac
    if steps > 0 and cfg.decay not in DECAYS:
        raise ValueError(f"optim.decay: unknown decay {cfg.decay!r}; expected one of {', '.join(DECAYS)}")
    if steps < 0 or warm < 0:
        raise ValueError(f"optim.decay_steps ({steps}) and optim.warmup_steps ({warm}) must be >= 0")
    if not 0.0 <= f <= 1.0:
        raise ValueError(f"optim.end_lr_frac must lie in [0, 1], got {f}")
    if warm <= 0 and steps <= 0:
        return lr

    def rate(count):
        t = jnp.asarray(count, jnp.float32)
        up = jnp.minimum(1.0, (t + 1.0) / warm) if warm > 0 else 1.0
        if steps <= 0:
            return lr * up
        s = jnp.clip((t - warm) / steps, 0.0, 1.0)
        shape = (1.0 + jnp.cos(jnp.pi * s)) / 2.0 if cfg.decay == "cosine" else 1.0 - s
        return lr * up * (f + (1.0 - f) * shape)

    return rate


@SCHEDULES.register("warmup_cosine")
def _warmup_cosine(cfg):
    """optax's warmup_cosine_decay_schedule: lr_t rises linearly from 0 at t = 0 to learning_rate at
    t = w, w = min(warmup_steps, decay_steps - 1), then follows a cosine to end_lr_frac * learning_rate
    at t = decay_steps (SFT's schedule; a one-step run trains at the peak rate). decay_steps must be
    >= 1: the cosine has no length otherwise (the rate would drop to the end value after one update)."""
    lr, steps, f = cfg.learning_rate, int(cfg.decay_steps), cfg.end_lr_frac
    if steps < 1 or int(cfg.warmup_steps) < 0 or not 0.0 <= f <= 1.0:
        raise ValueError(f"optim.schedule = warmup_cosine needs optim.decay_steps >= 1 (the update where the "
                         f"cosine ends), optim.warmup_steps >= 0 and optim.end_lr_frac in [0, 1]; got "
                         f"{cfg.decay_steps}, {cfg.warmup_steps} and {f}")
    warmup = min(int(cfg.warmup_steps), steps - 1)
    return optax.warmup_cosine_decay_schedule(0.0 if warmup else lr, lr, warmup, steps, end_value=lr * f)


def schedule(cfg):
    """`cfg.optim`'s learning rate: a float, or a function of the update count (0-based)."""
    return SCHEDULES.get(cfg.get("schedule", "warmup_decay"))(cfg)


def _decay_mask(params):
    """Weight decay on matrices only (not on norms, biases, A_log, dt_bias)."""
    return jax.tree.map(lambda p: p.ndim >= 2, params)


OPTIMIZERS: Registry = Registry("optimizer", field="optim.name")
OPTIMIZERS.add("adamw", lambda lr, c: optax.adamw(lr, b1=c.b1, b2=c.b2, eps=c.eps, weight_decay=c.weight_decay,
                                                   mask=_decay_mask))
OPTIMIZERS.add("adam", lambda lr, c: optax.adam(lr, b1=c.b1, b2=c.b2, eps=c.eps))
OPTIMIZERS.add("sgd", lambda lr, c: optax.sgd(lr))


def make_optimizer(cfg) -> optax.GradientTransformation:
    """`cfg.optim` (or SFT's `sft_optim`) -> chain(global-norm clip if grad_clip > 0, adamw | adam | sgd).

    The learning rate is an injected hyperparameter: `opt_state.hyperparams["learning_rate"]` holds the
    rate used by the latest update. The schedule (`optim.schedule`, SCHEDULES) sets it from
    `opt_state.count` before each update, outside `optax.inject_hyperparams`, so the state has the same
    structure whatever the schedule: a checkpoint of any schedule restores under any other.
    """
    factory = OPTIMIZERS.get(cfg.name)

    def build(learning_rate):
        opt = factory(learning_rate, cfg)
        clip = [optax.clip_by_global_norm(cfg.grad_clip)] if cfg.grad_clip > 0 else []
        return optax.chain(*clip, opt)

    build(cfg.learning_rate)  # fail on a bad name now, not at the first step
    inner = optax.inject_hyperparams(build)(learning_rate=cfg.learning_rate)
    rate = schedule(cfg)
    if not callable(rate):
        return inner

    def update(grads, state, params=None):
        lr = state.hyperparams["learning_rate"]
        state = state._replace(hyperparams={**state.hyperparams, "learning_rate": rate(state.count).astype(lr.dtype)})
        return inner.update(grads, state, params)

    return optax.GradientTransformation(inner.init, update)


def configured_learning_rate(cfg, updates: int) -> float:
    """The rate `cfg.optim`'s schedule applied at the latest of `updates` completed updates, update
    updates - 1 (0-based; update 0's for updates = 0): what `opt_state.hyperparams["learning_rate"]`
    should hold once they are done."""
    rate = schedule(cfg)
    return float(rate(max(updates - 1, 0))) if callable(rate) else float(rate)


def with_configured_hyperparams(opt_state, cfg, updates: int):
    """`opt_state` (restored from a checkpoint) with its injected hyperparameters taken from `cfg`.

    `optax.inject_hyperparams` keeps a constant learning rate IN the optimizer state and applies the
    stored value, so a restored state would train at the checkpoint's rate, not the configured one.
    Every other optimizer setting (b1, b2, weight decay, clip, the schedule) is built from `cfg` and
    is never stored. Returns (opt_state, {name: (checkpoint value, configured value)} of the
    hyperparameters that differed).
    """
    hyper = getattr(opt_state, "hyperparams", None)
    if hyper is None or "learning_rate" not in hyper:
        return opt_state, {}
    old = hyper["learning_rate"]
    want = configured_learning_rate(cfg, updates)
    changed = {}
    if not jnp.isclose(float(old), want, rtol=1e-6, atol=0.0):
        changed["learning_rate"] = (float(old), want)
    # computed on the devices with old's sharding, so a multi-host (not fully addressable) array works too
    new = jax.jit(lambda x: jnp.full_like(x, want), out_shardings=old.sharding)(old)
    return opt_state._replace(hyperparams={**hyper, "learning_rate": new}), changed
