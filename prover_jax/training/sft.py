"""Supervised warm start on expert demonstrations (a random policy never succeeds; GRPO needs
mixed groups), through the RL update's own train step (`step.make_train_step`) with SFT's objective
and optimizer:

    loss = - sum_t m_t log pi(x_t | x_<t) / sum_t m_t        (m = policy tokens of the demonstration)

Demonstrations are expert episodes played through the SAME rollout loop as RL (`expert=True`), so
they are tokenised exactly like the policy's own trajectories.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from tqdm import tqdm

from prover_jax.distributed import globalize, to_global
from prover_jax.rollout import Rollout
from prover_jax.sampling import SamplingParams
from prover_jax.sharding import named_sharding
from prover_jax.training.batch import pack, padded_length, policy_positions
from prover_jax.training.build import rollout_config
from prover_jax.training.optim import OPTIMIZERS, make_optimizer
from prover_jax.training.step import TrainState, make_train_step, nll_objective


# SFT batches are padded to a multiple of this many tokens (a few compiled shapes, little padding).
SFT_LENGTH_MULTIPLE = 32
SFT_LOG_EVERY = 50  # W/sft.jsonl is rewritten every this many steps (and at the end)


def demonstrations(rollout: Rollout, pool, seeds, max_length: int, successes_only: bool = True) -> list:
    """The demonstrator's trajectories for `seeds` (played pool.num_envs at a time) that fit max_length
    tokens; only its successful ones unless `successes_only` is False. The responses of invalid turns
    (a demonstrator's slips, see household's demo_noise) stay in the context but leave the policy
    mask: SFT trains on the recovery, not on the slip."""
    out = []
    for i in range(0, len(seeds), pool.num_envs):
        out += rollout.run(pool, seeds[i:i + pool.num_envs], expert=True)
    demos = [t for t in out if (t.success or not successes_only) and len(t.tokens) <= max_length]
    for t in demos:
        for turn in t.turns:
            if not turn.valid:
                t.policy_mask[turn.start:turn.end] = [False] * (turn.end - turn.start)
    return demos


def check_config(cfg) -> None:
    """ValueError naming the `c.sft` field that would stop the warm start after its demonstrations were
    played, or train it at a rate it does not say (nothing to check when cfg.steps = 0)."""
    if int(cfg.steps) < 0:
        raise ValueError(f"sft.steps = {cfg.steps} must be >= 0 (0: no warm start)")
    if cfg.steps == 0:
        return
    for field in ("episodes", "batch_size"):
        if int(cfg[field]) < 1:
            raise ValueError(f"sft.{field} = {cfg[field]} must be >= 1")
    if int(cfg.warmup_steps) < 0:
        raise ValueError(f"sft.warmup_steps = {cfg.warmup_steps} must be >= 0")
    if not 0.0 <= cfg.final_lr_frac <= 1.0:
        raise ValueError(f"sft.final_lr_frac = {cfg.final_lr_frac} must lie in [0, 1]")
    if cfg.optim.name not in OPTIMIZERS:
        raise ValueError(f"sft.optim.name: unknown optimizer {cfg.optim.name!r}; known: "
                         f"{', '.join(OPTIMIZERS.names())}")


def sft_optim(cfg) -> ml_collections.ConfigDict:
    """`make_optimizer`'s config for SFT: `cfg.optim` (name, b1, b2, eps, weight_decay, grad_clip) with
    the warmup-cosine schedule of cfg.learning_rate, cfg.warmup_steps, cfg.steps and cfg.final_lr_frac
    (`optim.SCHEDULES["warmup_cosine"]`)."""
    o = cfg.optim
    return ml_collections.ConfigDict(dict(
        name=o.name, b1=o.b1, b2=o.b2, eps=o.eps, weight_decay=o.weight_decay, grad_clip=o.grad_clip,
        learning_rate=cfg.learning_rate, schedule="warmup_cosine", warmup_steps=cfg.warmup_steps,
        decay_steps=cfg.steps, end_lr_frac=cfg.final_lr_frac))


def loss_positions(mask_BxL: np.ndarray, multiple: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """(at [B, P] int32, at_valid [B, P] bool): the indices t with mask[b, t], left-aligned per row
    and padded (index 0, invalid) to P = the largest count rounded up to `multiple`."""
    counts = mask_BxL.sum(axis=1)
    P = padded_length(max(int(counts.max()), 1), multiple)
    return policy_positions(mask_BxL, P), np.arange(P)[None, :] < counts[:, None]


def warm_start(run, params, cfg, progress: bool = False, demos: list | None = None) -> tuple[Any, dict]:
    """`params` trained for cfg.steps steps of cfg.batch_size demonstrations (`demos`, by default the
    demonstrator's episodes of the first cfg.episodes training tasks) on the built run's mesh and
    policy (`wiring.Run`); logs to WORKDIR/sft.jsonl. Returns (params, {demos, loss_first, loss_last,
    seconds})."""
    c = run.config
    t0 = time.perf_counter()
    if demos is None:
        expert = Rollout(None, run.tokenizer, rollout_config(c, SamplingParams(), tokenizer=run.tokenizer))
        seeds = list(range(c.env.train_seed_start, c.env.train_seed_start + cfg.episodes))
        demos = demonstrations(expert, run.pool, seeds, c.rollout.max_target_length, cfg.successes_only)
    if not demos:
        raise RuntimeError("no expert demonstration fits rollout.max_target_length")
    optimizer = make_optimizer(sft_optim(cfg))
    state = TrainState(params=jax.tree.map(jnp.copy, params),  # the step donates its state
                       opt_state=globalize(optimizer.init(params), run.mesh),
                       step=globalize(jnp.zeros((), jnp.int32), run.mesh))
    step = make_train_step(run.policy.graphdef, nll_objective(), optimizer, mesh=run.mesh)
    rng = np.random.default_rng(c.seed)  # the same batches on every process
    losses, lines = [], []
    path = run.root / "sft.jsonl"
    bar = tqdm(total=cfg.steps, desc="SFT", dynamic_ncols=True, file=sys.stdout,
               disable=not progress or not run.primary)
    with bar:
        for i in range(cfg.steps):
            pick = rng.choice(len(demos), size=min(cfg.batch_size, len(demos)), replace=False)
            chosen = [demos[j] for j in pick]
            batch = pack(chosen, [np.zeros(len(t.tokens), np.float32) for t in chosen],
                         micro_batch_size=len(chosen), length_multiple=SFT_LENGTH_MULTIPLE)
            rows = dict(tokens=batch["tokens"], valid=batch["valid"], loss_mask=batch["loss_mask"],
                        policy_at=loss_positions(batch["loss_mask"][0])[0][None])
            state, metrics = step(state, {k: to_global(x, named_sharding((None, "batch", None), run.mesh, x.shape))
                                          for k, x in rows.items()}, run.policy.frozen)
            losses.append(float(metrics["loss"]))
            lines.append(json.dumps({"sft_step": i + 1, "loss": losses[-1]}) + "\n")
            if run.primary and ((i + 1) % SFT_LOG_EVERY == 0 or i + 1 == cfg.steps):
                path.write_text("".join(lines))
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    info = {"demos": len(demos), "loss_first": losses[0], "loss_last": losses[-1],
            "seconds": time.perf_counter() - t0}
    return state.params, info
