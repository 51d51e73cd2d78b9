"""Trajectories -> the training batch (token-aligned, right-padded, split into micro-batches).

    batch = pack(trajs, advantages, micro_batch_size=8)
    batch["tokens"]        [M, mb, L] int32   the whole conversation of each trajectory
    batch["valid"]         [M, mb, L] bool    real tokens
    batch["loss_mask"]     [M, mb, L] bool    policy tokens (trained); never position 0
    batch["advantages"]    [M, mb, L] f32     per-token advantage (credit method's output)
    batch["old_logprobs"]  [M, mb, L] f32     log-prob of each token under the sampling policy

L is rounded up to a multiple of `length_multiple` and the rows to a multiple of micro_batch_size
(padding rows are all-invalid), so few shapes compile. Token t is predicted from position t - 1.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from prover_jax.rollout.trajectory import Trajectory


def padded_length(longest: int, length_multiple: int = 128, max_length: int | None = None) -> int:
    """L: `longest` rounded up to a multiple of `length_multiple`, capped at max_length."""
    if max_length is not None and longest > max_length:
        raise ValueError(f"a trajectory of {longest} tokens exceeds max_length {max_length}")
    L = -(-longest // length_multiple) * length_multiple
    return L if max_length is None else min(L, max_length)


def pack(trajs: Sequence[Trajectory], advantages: Sequence[np.ndarray], micro_batch_size: int,
         length_multiple: int = 128, max_length: int | None = None,
         length: int | None = None) -> dict[str, np.ndarray]:
    """`length` fixes L (e.g. agreed over processes); else L = padded_length(longest, ...)."""
    if len(trajs) != len(advantages) or not trajs:
        raise ValueError("pack: one advantage array per trajectory, at least one trajectory")
    longest = max(len(t.tokens) for t in trajs)
    if length is not None and longest > length:
        raise ValueError(f"a trajectory of {longest} tokens exceeds the batch length {length}")
    L = length if length is not None else padded_length(longest, length_multiple, max_length)
    mb = micro_batch_size
    B = -(-len(trajs) // mb) * mb
    out = dict(tokens=np.zeros((B, L), np.int32), valid=np.zeros((B, L), bool),
               loss_mask=np.zeros((B, L), bool), advantages=np.zeros((B, L), np.float32),
               old_logprobs=np.zeros((B, L), np.float32))
    for i, (t, adv) in enumerate(zip(trajs, advantages)):
        n = len(t.tokens)
        if len(adv) != n:
            raise ValueError(f"trajectory {i}: {len(adv)} advantages for {n} tokens")
        out["tokens"][i, :n] = t.tokens
        out["valid"][i, :n] = True
        out["loss_mask"][i, :n] = t.policy_mask
        out["loss_mask"][i, 0] = False
        out["advantages"][i, :n] = adv
        out["old_logprobs"][i, :n] = t.logprobs
    return {k: v.reshape(B // mb, mb, L) for k, v in out.items()}
