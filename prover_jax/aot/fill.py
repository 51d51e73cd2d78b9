"""Real tokens per step, from a measured distribution of episode lengths: what prover-aot's train-step
time is divided by (`s_per_1k_real_tokens`) and what the packed micro-batch buckets are padded over.

The distribution is a record of `bench/packing_fill.py --scripted` (one JSON line per batch: the
expert's and the wanderer's episode length per task, and the share of successes in each group). Each
line is one step of the config being compiled, rebuilt as the script builds its batch
(`step_lengths`): rollout.groups_per_step groups of rollout.group_size episodes of one task each,
round(share x group_size) of them the expert's, the rest the wanderer's, each cut at
rollout.max_target_length. Every line weighs the same.

Per step s with episode lengths l_s (real tokens T_s = sum l_s):
    m_s = ceil(rows_s / micro_batch_size), rows_s = len(first_fit(l_s, train.max_tokens_per_row))
    b_s = bucket(m_s, buckets)                             (the compiled program it runs)
    padding_waste = 1 - sum m_s / sum b_s                  (micro-batches of padding rows)
    fill = sum T_s / sum (b_s x micro_batch_size x L)      (real tokens over trained positions)
    s_per_1k_real_tokens = sum estimated_s(b_s) / (sum T_s / 1000)
Unpacked, every step runs the one compiled [rows, rollout.max_target_length] batch:
    s_per_1k_real_tokens = estimated_s / (mean T_s / 1000).
"""

from __future__ import annotations

import json
from typing import Sequence

from prover_jax.training.batch import bucket, first_fit


def step_lengths(expert: Sequence[int], wanderer: Sequence[int], wins: int, groups: int, group_size: int,
                 cap: int | None = None) -> list[int]:
    """The episode lengths of one scripted batch: group g plays task g (mod the tasks), `wins` episodes
    the expert's and the rest the wanderer's, each cut at `cap`."""
    out = [x for g in range(groups) for x in [expert[g % len(expert)]] * wins
           + [wanderer[g % len(wanderer)]] * (group_size - wins)]
    return out if cap is None else [min(x, cap) for x in out]


def read_steps(path: str, config) -> list[list[int]]:
    """One step's episode lengths per line of a `bench/packing_fill.py --scripted` record, for `config`."""
    r = config.rollout
    steps = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                wins = round(rec["success_share"] * r.group_size)
                steps.append(step_lengths(rec["expert_lengths"], rec["wanderer_lengths"], wins,
                                          r.groups_per_step, r.group_size, r.max_target_length))
    if not steps:
        raise ValueError(f"--fill {path}: no batches in the record")
    return steps


def packed_counts(steps: list[list[int]], cap: int, micro_batch_size: int) -> list[int]:
    """Each step's packed micro-batch count before bucketing: its first-fit rows over micro_batch_size."""
    return [-(-len(first_fit(lengths, cap)) // micro_batch_size) for lengths in steps]


def packed_figures(steps: list[list[int]], buckets: Sequence[int], cap: int, micro_batch_size: int) -> dict:
    """The bucket list over the steps: the micro-batch counts before and after bucketing, the padding
    waste, the fill and, per bucket, the share of steps it runs and their fill (a bucket no step lands
    in: the fill of the steps' micro-batches before bucketing, i.e. a step that fills it exactly)."""
    counts = packed_counts(steps, cap, micro_batch_size)
    landed = [bucket(m, buckets) for m in counts]
    tokens = [sum(lengths) for lengths in steps]
    row = micro_batch_size * cap  # positions per micro-batch
    unbucketed = sum(tokens) / (sum(counts) * row)
    per_bucket = {}
    for b in buckets:
        mine = [t for t, x in zip(tokens, landed) if x == b]
        per_bucket[b] = {"step_share": round(len(mine) / len(steps), 4),
                         "fill": sum(mine) / (len(mine) * b * row) if mine else unbucketed}
    return {"steps": len(steps), "micro_batches": counts, "bucketed": landed,
            "padding_waste": 1 - sum(counts) / sum(landed), "fill": sum(tokens) / (sum(landed) * row),
            "real_tokens_per_step": sum(tokens) / len(steps), "per_bucket": per_bucket}


def _per_1k(seconds, tokens: float):
    return float(f"{seconds / (tokens / 1000):.4g}") if seconds and tokens else None


def train_row_figures(config, row: dict, steps: list[list[int]]) -> dict:
    """A prover-aot train_step row's fill, real_tokens_per_step and s_per_1k_real_tokens over `steps`:
    unpacked, the steps' mean real tokens over the [rows, rollout.max_target_length] batch; packed, the
    steps its bucket runs (`packed_figures`, over the config's buckets), and their share."""
    from prover_jax.training.assemble import packed_micro_batches
    c = config
    cap = c.train.max_tokens_per_row
    if cap <= 0:
        T = sum(map(sum, steps)) / len(steps)
        n = c.rollout.groups_per_step * c.rollout.group_size
        return {"fill": round(T / (n * c.rollout.max_target_length), 4), "real_tokens_per_step": round(T, 1),
                "s_per_1k_real_tokens": _per_1k(row.get("estimated_s"), T)}
    mb = c.train.micro_batch_size
    f = packed_figures(steps, packed_micro_batches(c), cap, mb)["per_bucket"][row["bucket"]]
    tokens = row["bucket"] * mb * cap * f["fill"]
    return {"step_share": f["step_share"], "fill": round(f["fill"], 4), "real_tokens_per_step": round(tokens, 1),
            "s_per_1k_real_tokens": _per_1k(row.get("estimated_s"), tokens)}


def buckets_row(config, rows: list[dict], steps: list[list[int]] | None, fill_from: str = "") -> dict | None:
    """prover-aot's `train_buckets` row of packed train_step rows: the bucket list, each bucket's compile
    time and their total, and over `steps` the micro-batch counts before and after bucketing, the
    padding waste, the fill and the whole distribution's s_per_1k_real_tokens (the module docstring).
    None unpacked."""
    c = config
    train = [r for r in rows if r["fn"] == "train_step" and r.get("bucket")]
    if c.train.max_tokens_per_row <= 0 or not train:
        return None
    buckets = [r["bucket"] for r in train]
    out = {"fn": "train_buckets", "topology": train[0]["topology"], "buckets": buckets,
           "compile_s": [r["compile_s"] for r in train],
           "compile_s_total": round(sum(r["compile_s"] for r in train), 1)}
    if not steps:
        return out
    fig = packed_figures(steps, buckets, c.train.max_tokens_per_row, c.train.micro_batch_size)
    seconds = {r["bucket"]: r.get("estimated_s") for r in train}
    step_s = None if None in seconds.values() else sum(seconds[b] for b in fig["bucketed"]) / fig["steps"]
    out.update(fill_from=fill_from, steps=fig["steps"], micro_batches=fig["micro_batches"],
               bucketed=fig["bucketed"], padding_waste=round(fig["padding_waste"], 4), fill=round(fig["fill"], 4),
               real_tokens_per_step=round(fig["real_tokens_per_step"], 1), estimated_s_per_step=step_s,
               s_per_1k_real_tokens=_per_1k(step_s, fig["real_tokens_per_step"]))
    return out
