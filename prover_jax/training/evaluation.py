"""Held-out evaluation: greedy episodes on the eval split's tasks, success and graded score with
their standard errors.

    row = evaluate(greedy_rollout, pool, n)     # {"eval/success", "eval/success_se", "eval/score",
                                                #  "eval/score_se", "eval/episodes"}
    row |= evaluate_sampled(rollout, pool, n, k) # train.eval_samples = k: sampled success, pass@2, 4, ...

Eval task i is episode seed -1 - i (`envs.base.split_seed`), never a training task; the n episodes
are split over processes and gathered, so every process returns the same row.
"""

from __future__ import annotations

import math

import numpy as np
from absl import logging

from prover_jax import distributed as dist
from prover_jax.envs.base import split_seed


def task_splits(pool, env_name: str) -> dict:
    """The env's distinct tasks per split (None: generated); an empty split raises the family's own
    error, which names the setting that emptied it."""
    sizes = pool.call("split_sizes", [0])[0]
    for split in ("train", "eval"):
        if sizes.get(split) == 0:
            pool.reset_some({0: split_seed(0, split)})
            raise ValueError(f"{env_name}: the {split} split holds no task (see c.env.kwargs)")
    return sizes


def eval_task_count(config, splits: dict, episodes: int | None = None) -> int:
    """Eval tasks one evaluation plays: `episodes` (default train.eval_episodes), capped by
    env.eval_seeds (when > 0) and by the distinct tasks of the env's eval split (a task played twice
    greedily adds no information)."""
    n = int(episodes or config.train.eval_episodes)
    for cap in (config.env.eval_seeds, splits.get("eval")):
        if cap and cap < n:
            logging.info("evaluation: %d episodes asked for, %d eval tasks available", n, cap)
            n = int(cap)
    if n < 1:
        raise ValueError(f"no evaluation episode: c.train.eval_episodes={config.train.eval_episodes}, "
                         f"episodes={episodes}")
    return n


def evaluate(greedy, pool, n: int, played: list | None = None) -> dict[str, float]:
    """`eval_metrics` of greedy episodes (rollout `greedy`) on eval tasks 0 .. n-1, over all processes;
    this process's trajectories are appended to `played` when given."""
    seeds = [split_seed(i, "eval") for i in range(n)]
    lo, hi = dist.uneven_share(len(seeds))
    mine = seeds[lo:hi]
    results = []
    for i in range(0, len(mine), pool.num_envs):
        trajs = greedy.run(pool, mine[i:i + pool.num_envs])
        results += [[bool(t.success), float(t.score)] for t in trajs]
        if played is not None:
            played += trajs
    every = [r for part in dist.allgather_json(results) for r in part]
    return eval_metrics([s for s, _ in every], [x for _, x in every])


SAMPLED_UID_BASE = 1 << 40  # uids of sampled evaluation episodes: apart from training's, so their sampling seeds are too


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of a task with c successes in n samples: 1 - C(n - c, k) / C(n, k) (k <= n)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def evaluate_sampled(rollout, pool, n: int, samples: int) -> dict[str, float]:
    """`samples` episodes per eval task 0 .. n-1 with `rollout` (train.eval_temperature), over all processes:
    eval/sampled_success (the mean over every episode: pass@1) and eval/pass@k for k = 2, 4, ... up to
    `samples` (the unbiased estimator, averaged over tasks), each with its standard error over tasks."""
    if samples > pool.num_envs:
        raise ValueError(f"train.eval_samples={samples} is more than the {pool.num_envs} envs of a step's pool "
                         "(rollout.groups_per_step x group_size on this process)")
    seeds = [split_seed(i, "eval") for i in range(n)]
    lo, hi = dist.uneven_share(len(seeds))
    mine, per = seeds[lo:hi], max(1, pool.num_envs // samples)
    counts = []
    for i in range(0, len(mine), per):
        chunk = mine[i:i + per]
        uids = [SAMPLED_UID_BASE + (lo + i + j) * samples + s for j in range(len(chunk)) for s in range(samples)]
        trajs = rollout.run(pool, [seed for seed in chunk for _ in range(samples)], uids=uids)
        counts += [sum(bool(t.success) for t in trajs[j * samples:(j + 1) * samples]) for j in range(len(chunk))]
    every = [c for part in dist.allgather_json(counts) for c in part]
    rates = np.asarray(every, np.float64) / samples
    row = {"eval/sampled_success": float(rates.mean()),
           "eval/sampled_success_se": float(rates.std() / math.sqrt(len(rates))), "eval/samples": samples}
    k = 2
    while k <= samples:
        per_task = np.asarray([pass_at_k(samples, c, k) for c in every], np.float64)
        row[f"eval/pass@{k}"] = float(per_task.mean())
        row[f"eval/pass@{k}_se"] = float(per_task.std() / math.sqrt(len(per_task)))
        k *= 2
    return row


def check_task_config(c) -> None:
    """Task ranges of a config: train seeds must be >= 0 (negative seeds are eval tasks, envs.base)."""
    e = c.env
    for field, value in (("train_seed_start", e.train_seed_start), ("train_tasks", e.train_tasks),
                         ("eval_seeds", e.eval_seeds)):
        if int(value) < 0:
            raise ValueError(f"c.env.{field}={value} must be >= 0" + (
                ": negative episode seeds are eval tasks, training on them would train on the eval split"
                if field == "train_seed_start" else ""))
    if int(c.train.eval_episodes) < 1:
        raise ValueError(f"c.train.eval_episodes={c.train.eval_episodes} must be >= 1")
    if not float(c.train.eval_temperature) > 0:
        raise ValueError(f"c.train.eval_temperature={c.train.eval_temperature} must be > 0 (greedy is eval/success)")
    if int(c.train.eval_samples) < 0:
        raise ValueError(f"c.train.eval_samples={c.train.eval_samples} must be >= 0")


def eval_metrics(successes, scores) -> dict[str, float]:
    """One evaluation's row over n episodes: success rate and mean graded score, each with its standard
    error: sqrt(p (1 - p) / n) for the success rate, std(scores) / sqrt(n) (population std, the same
    formula for a binary score) for the score."""
    n = len(successes)
    if n == 0 or len(scores) != n:
        raise ValueError(f"eval_metrics needs n >= 1 successes and as many scores, got {n} and {len(scores)}")
    p = float(np.mean(np.asarray(successes, np.float64)))
    x = np.asarray(scores, np.float64)
    return {"eval/success": p, "eval/success_se": math.sqrt(p * (1.0 - p) / n),
            "eval/score": float(x.mean()), "eval/score_se": float(x.std() / math.sqrt(n)),
            "eval/episodes": n}
