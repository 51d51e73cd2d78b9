"""The step's selected groups -> the global [M, mb, L] train batch, its shapes agreed over processes.

    trained, rows, batch, figures = train_batch(config, mesh, selected)   # selected: dynamic.Selected
    rows, batch = global_batch(config, mesh, trajs, advantages, trained)

`train_batch`: the groups trained on (the credit method's, enlarged when it added episodes, or those
dynamic sampling kept; else the played ones), their advantages with DAPO's overlong penalty
(loss.overlong_penalty, `credit.shaping`), and loss.mask_truncated's and dynamic sampling's
context-only episodes out of the loss (`trained`: a `Trained`, the groups, their advantages and the
uids the loss sees); `figures`: the row's overlong_penalty (the mean penalty) and
`metrics.advantage_metrics` of the trained episodes.

L (the longest episode of any process, padded to train.length_multiple; packed: train.max_tokens_per_row)
and the row count B (the most any process needs; packed: the global micro-batch count padded to the next
of `packed_micro_batches`, so every process agrees on the bucket) are agreed with `allgather_json`, so every process
packs [B, L] rows (`batch.pack`) and `distributed.global_batch` lays them out as one global batch.
With train.logits = policy, P (the most policy tokens of any row, widened by `batch.policy_width`) is
agreed too and policy_at added. `trained[i]` False keeps episode i out of the loss mask (context only).
Returns this process's rows [1, B, L] (numpy, for metrics such as batch_fill) and the global batch.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from prover_jax import distributed as dist
from prover_jax.credit.pipeline import split_groups
from prover_jax.credit.shaping import overlong_shaping, trained_episodes
from prover_jax.rollout.trajectory import Trajectory
from prover_jax.training.batch import (bucket, first_fit, micro_batch_buckets, pack, padded_length, policy_positions,
                                      policy_width)
from prover_jax.training.metrics import advantage_metrics


def global_batch(config, mesh, trajs: Sequence[Trajectory], advantages: Sequence[np.ndarray],
                 trained: Sequence[bool]) -> tuple[dict[str, np.ndarray], dict]:
    c = config
    cap = c.train.max_tokens_per_row
    n_rows = len(first_fit([len(t.tokens) for t in trajs], cap)) if cap > 0 else len(trajs)
    shapes = dist.allgather_json([max(len(t.tokens) for t in trajs), n_rows])
    L = padded_length(max(n for n, _ in shapes), c.train.length_multiple, c.rollout.max_target_length)
    B = max(b for _, b in shapes)  # equal rows on every process
    if cap > 0:  # packed: the global micro-batch count padded to its bucket (`packed_micro_batches`)
        P, mb = dist.process_count(), c.train.micro_batch_size
        M = bucket(-(-B * P // mb), packed_micro_batches(c))
        B = -(-M * mb // P)
    rows = pack(trajs, advantages, B, length=L, max_tokens_per_row=cap, num_rows=B, trained=trained)
    if c.train.logits == "policy":  # the vocab projection at the policy tokens only: P agreed over processes
        most = max(dist.allgather_json(int(rows["loss_mask"].sum(-1).max())))
        P = policy_width(most, rows["tokens"].shape[-1])
        rows["policy_at"] = policy_positions(rows["loss_mask"], P)
    return rows, dist.global_batch({k: v[0] for k, v in rows.items()}, mesh, c.train.micro_batch_size)


@dataclasses.dataclass(frozen=True)
class Trained:
    """The step's groups as batched, their advantages as trained on (overlong shaping included), the
    uids of the episodes in the loss (the others are context only) and how many episodes that is."""

    groups: list[list[Trajectory]]
    advantages: list[list[np.ndarray]]
    uids: set[int]
    episodes: int  # counted, not len(uids): a credit method's extra episodes need not have uids of their own


def packed_micro_batches(config) -> list[int]:
    """The micro-batch counts of packed batches (`batch.micro_batch_buckets` of train.packed_buckets, up to
    a step's episodes one per row): what the update is compiled for."""
    c = config
    most = -(-c.rollout.groups_per_step * c.rollout.group_size // c.train.micro_batch_size)
    return micro_batch_buckets(most, c.train.packed_buckets)


def train_batch(config, mesh, selected) -> tuple[Trained, dict[str, np.ndarray], dict, dict]:
    c, credit = config, selected.credit
    groups = credit.groups if credit.groups is not None else split_groups(selected.played, c.rollout.group_size)
    over = c.loss.overlong_penalty
    advantages, overlong = overlong_shaping(groups, credit.advantages, c.rollout.max_target_length,
                                            over.buffer, over.coef)
    trajs = [t for group in groups for t in group]
    trained = [k and t.uid not in selected.context
               for k, t in zip(trained_episodes(trajs, c.loss.mask_truncated), trajs)]
    flat = [a for ads in advantages for a in ads]
    rows, batch = global_batch(c, mesh, trajs, flat, trained)
    kept = [t for t, k in zip(trajs, trained) if k]
    figures = {"overlong_penalty": overlong,
               **advantage_metrics(kept, [a for a, k in zip(flat, trained) if k])}
    return Trained(groups, advantages, {t.uid for t in kept}, len(kept)), rows, batch, figures
