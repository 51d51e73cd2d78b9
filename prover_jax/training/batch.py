"""Trajectories -> the training batch (token-aligned, right-padded, split into micro-batches).

    batch = pack(trajs, advantages, micro_batch_size=8)
    batch["tokens"]        [M, mb, L] int32   the whole conversation of each trajectory
    batch["valid"]         [M, mb, L] bool    real tokens
    batch["loss_mask"]     [M, mb, L] bool    policy tokens (trained); never a trajectory's first token
    batch["advantages"]    [M, mb, L] f32     per-token advantage (credit method's output)
    batch["old_logprobs"]  [M, mb, L] f32     log-prob of each token under the sampling policy
    batch["segment_ids"]   [M, mb, L] int32   packed rows only: 1, 2, ... per trajectory of a row, 0 at padding
    batch["policy_at"]     [M, mb, P] int32   with train.logits = "policy" only: each row's policy-token
                                              positions, ascending, 0-padded (`policy_positions`)

One trajectory per row by default: L is rounded up to a multiple of `length_multiple` and the rows to
a multiple of micro_batch_size (padding rows are all-invalid), so few shapes compile. Packed
(`max_tokens_per_row` > 0): trajectories are placed first-fit by decreasing length into rows of
exactly that many positions (`first_fit`), told apart by `segment_ids`; the model restarts attention,
the delta-rule state and positions at each trajectory (`models.packing`), so every trajectory's
log-probs are those it has alone. Token t is predicted from position t - 1.
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


def first_fit(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Rows of trajectory indices: first-fit by decreasing length into rows of `capacity` tokens
    (each row's lengths sum to <= capacity; ties keep the input order)."""
    if lengths and max(lengths) > capacity:
        raise ValueError(f"a trajectory of {max(lengths)} tokens exceeds train.max_tokens_per_row = {capacity}")
    rows: list[list[int]] = []
    free: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        j = next((j for j, f in enumerate(free) if f >= lengths[i]), None)
        if j is None:
            rows.append([])
            free.append(capacity)
            j = len(rows) - 1
        rows[j].append(i)
        free[j] -= lengths[i]
    return rows


def pack(trajs: Sequence[Trajectory], advantages: Sequence[np.ndarray], micro_batch_size: int,
         length_multiple: int = 128, max_length: int | None = None,
         length: int | None = None, max_tokens_per_row: int = 0, num_rows: int = 0,
         trained: Sequence[bool] | None = None) -> dict[str, np.ndarray]:
    """`length` fixes L (e.g. agreed over processes); else L = padded_length(longest, ...).
    max_tokens_per_row > 0: packed rows of L = max_tokens_per_row, at least `num_rows` of them.
    `trained[i]` False: trajectory i is in the batch but not in loss_mask (context only)."""
    if len(trajs) != len(advantages) or not trajs or (trained is not None and len(trained) != len(trajs)):
        raise ValueError("pack: one advantage array (and `trained` flag) per trajectory, at least one trajectory")
    lengths = [len(t.tokens) for t in trajs]
    if max_tokens_per_row > 0:
        L = max_tokens_per_row
        rows = first_fit(lengths, L)
    else:
        if length is not None and max(lengths) > length:
            raise ValueError(f"a trajectory of {max(lengths)} tokens exceeds the batch length {length}")
        L = length if length is not None else padded_length(max(lengths), length_multiple, max_length)
        rows = [[i] for i in range(len(trajs))]
    mb = micro_batch_size
    B = -(-max(len(rows), num_rows) // mb) * mb
    out = dict(tokens=np.zeros((B, L), np.int32), valid=np.zeros((B, L), bool),
               loss_mask=np.zeros((B, L), bool), advantages=np.zeros((B, L), np.float32),
               old_logprobs=np.zeros((B, L), np.float32))
    if max_tokens_per_row > 0:
        out["segment_ids"] = np.zeros((B, L), np.int32)
    for r, members in enumerate(rows):
        at = 0
        for s, i in enumerate(members):
            t, adv, n = trajs[i], advantages[i], lengths[i]
            if len(adv) != n:
                raise ValueError(f"trajectory {i}: {len(adv)} advantages for {n} tokens")
            span = slice(at, at + n)
            out["tokens"][r, span] = t.tokens
            out["valid"][r, span] = True
            out["loss_mask"][r, span] = t.policy_mask if trained is None or trained[i] else False
            out["loss_mask"][r, at] = False
            out["advantages"][r, span] = adv
            out["old_logprobs"][r, span] = t.logprobs
            if "segment_ids" in out:
                out["segment_ids"][r, span] = s + 1
            at += n
    return {k: v.reshape(B // mb, mb, L) for k, v in out.items()}


def micro_batch_buckets(most: int, buckets=()) -> list[int]:
    """The micro-batch counts a packed batch is padded to (train.packed_buckets; ascending): the given ones
    below `most` (the unpacked count: one episode per row) and `most`; () = 1, 2, 4, ... below `most`, and
    `most`. Each is compiled once, so the list trades compiles for padding."""
    most = max(int(most), 1)
    given = sorted({int(b) for b in buckets})
    if any(b < 1 for b in given):
        raise ValueError(f"train.packed_buckets must hold micro-batch counts >= 1, got {list(buckets)}")
    if not given:
        given, b = [], 1
        while b < most:
            given.append(b)
            b *= 2
    return sorted({b for b in given if b < most} | {most})


def bucket(count: int, buckets: Sequence[int]) -> int:
    """The least bucket >= count (ValueError past the largest)."""
    for b in buckets:
        if b >= count:
            return b
    raise ValueError(f"a packed batch of {count} micro-batches is past the largest bucket {buckets[-1]}")


POLICY_MULTIPLE = 128  # the narrowest `policy_at`; wider ones double (`policy_width`): few shapes to compile


def policy_width(most: int, L: int) -> int:
    """P of `policy_at` for [.., L] rows whose fullest holds `most` policy tokens: the least
    POLICY_MULTIPLE * 2^k >= most, capped at L."""
    P = POLICY_MULTIPLE
    while P < most:
        P *= 2
    return min(P, L)


def policy_widths(L: int, most: int) -> list[int]:
    """Every P `policy_width` gives for [.., L] rows of at most `most` policy tokens (ascending): its
    value at one count in each POLICY_MULTIPLE-long run of counts (widths change only at multiples of
    it) and at the largest count."""
    top = max(min(most, L), 1)
    return sorted({policy_width(n, L) for n in [*range(1, top, POLICY_MULTIPLE), top]})


def policy_positions(loss_mask: np.ndarray, P: int) -> np.ndarray:
    """[..., L] bool -> [..., P] int32: the positions of each row's policy tokens, ascending, padded
    with 0 (position 0 is never a policy token)."""
    flat = loss_mask.reshape(-1, loss_mask.shape[-1])
    out = np.zeros((flat.shape[0], P), np.int32)
    for r, row in enumerate(flat):
        at = np.flatnonzero(row)
        if len(at) > P:
            raise ValueError(f"row {r} has {len(at)} policy tokens, more than P = {P}")
        out[r, :len(at)] = at
    return out.reshape(*loss_mask.shape[:-1], P)
