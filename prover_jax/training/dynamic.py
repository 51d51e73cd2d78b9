"""DAPO's dynamic sampling: which of the step's played groups the update trains on.

    draws = [Draw(seeds, trajs, credit, lo, G), ...]        # task batches played (and credited) this step
    more = wants_more(draws, mode, max_draws, groups_per_step) # refill: play another task batch?
    step = select(draws, mode, groups_per_step)               # Selected(seeds, played, credit, context, metrics)

A group is informative when its episodes' outcomes are not all equal (for a method that adds episodes
to a group, over the enlarged group): a uniform group has zero GRPO advantage, so it only dilutes the
loss's token mean. Modes (rollout.dynamic_sampling):
    off     every group of the one task batch is trained on (nothing changes);
    drop    only the informative groups of the task batch are;
    refill  task batches are drawn and played until groups_per_step informative groups are in hand
            or rollout.max_draws batches have been played; the first groups_per_step informative
            groups (in draw order) are trained on.
A step whose draws hold no informative group trains on its first batch as `off` would
(dynamic/kept_groups = 0 says so). Dropped groups are dropped whatever credit they got (a method
with turn-level credit on a uniform group loses it). Every process decides the same from the
informative-group indices of all processes (`allgather_json`), so multi-host runs agree; a process
left with no group lends one of its groups as context only (in the batch, out of the loss).

Metrics (over every process, the same on each): dynamic/draws (task batches played),
dynamic/kept_groups and dynamic/dropped_groups (groups trained on / played and not trained on),
dynamic/extra_episodes (episodes played beyond the first batch). Credit metrics are merged over the draws (`_merged_credit`).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from prover_jax import distributed as dist
from prover_jax.credit.base import CreditOutput, Merge
from prover_jax.credit.common import rewards
from prover_jax.credit.pipeline import split_groups
from prover_jax.rollout.trajectory import Trajectory
from prover_jax.training.metrics import merge_rows

MODES = ("off", "drop", "refill")
METRICS = ("dynamic/draws", "dynamic/kept_groups", "dynamic/dropped_groups", "dynamic/extra_episodes")


def check_mode(mode: str, max_draws: int) -> None:
    if mode not in MODES:
        raise ValueError(f"rollout.dynamic_sampling: unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    if max_draws < 1:
        raise ValueError(f"rollout.max_draws must be >= 1, got {max_draws}")


@dataclasses.dataclass
class Draw:
    """One task batch of the step: its seeds (all processes'), this process's played episodes (G per
    group, groups lo, lo + 1, ... of the batch) and their CreditOutput."""

    seeds: list[int]
    trajs: list[Trajectory]
    credit: CreditOutput
    lo: int
    group_size: int

    def groups(self) -> list[list[Trajectory]]:
        """The groups the credit scored (enlarged when the method added episodes)."""
        if self.credit.groups is not None:
            return [list(g) for g in self.credit.groups]
        return split_groups(self.trajs, self.group_size)


@dataclasses.dataclass
class Selected:
    """What the update trains on: `credit.groups` / `credit.advantages` (this process's kept groups),
    `context` (uids in the batch but out of the loss), `played` (every episode played, for metrics)."""

    seeds: list[int]
    played: list[Trajectory]
    credit: CreditOutput
    context: set[int]
    metrics: dict[str, float]


def informative(group: Sequence[Trajectory]) -> bool:
    r = rewards(group)
    return bool(len(r)) and bool(r.min() != r.max())


def _global_informative(draws: Sequence[Draw], groups_per_step: int) -> list[int]:
    """Global indices (draw * groups_per_step + group) of the informative groups of every process,
    ascending (the same list on every process)."""
    local = [d * groups_per_step + draw.lo + g for d, draw in enumerate(draws)
             for g, group in enumerate(draw.groups()) if informative(group)]
    return sorted(i for part in dist.allgather_json(local) for i in part)


def wants_more(draws: Sequence[Draw], mode: str, max_draws: int, groups_per_step: int) -> bool:
    """refill only: fewer than groups_per_step informative groups so far and a draw left."""
    if mode != "refill" or len(draws) >= max_draws:
        return False
    return len(_global_informative(draws, groups_per_step)) < groups_per_step


def select(draws: Sequence[Draw], mode: str, groups_per_step: int, merge: Merge = Merge()) -> Selected:
    seeds = [s for d in draws for s in d.seeds]
    played = [t for d in draws for t in d.trajs]
    extra = (len(draws) - 1) * groups_per_step * draws[0].group_size  # over every process
    credit = _merged_credit(draws, merge)
    total = groups_per_step * len(draws)
    if mode == "off":
        return Selected(seeds, played, credit, set(), {})
    chosen = set(_global_informative(draws, groups_per_step)[:groups_per_step if mode == "refill" else None])
    metrics = {"dynamic/draws": float(len(draws)), "dynamic/kept_groups": float(len(chosen)),
               "dynamic/dropped_groups": float(total - len(chosen)), "dynamic/extra_episodes": float(extra)}
    if not chosen:  # nothing informative anywhere: the first batch, as `off`
        first = draws[0]
        return Selected(seeds, played, dataclasses.replace(credit, groups=first.groups(),
                                                           advantages=first.credit.advantages), set(), metrics)
    groups, advantages, context = [], [], set()
    for d, draw in enumerate(draws):
        for g, (group, adv) in enumerate(zip(draw.groups(), draw.credit.advantages, strict=True)):
            if d * groups_per_step + draw.lo + g in chosen:
                groups.append(group)
                advantages.append(adv)
    if not groups:  # other processes hold every kept group: lend one group as context only
        groups, advantages = [draws[0].groups()[0]], [draws[0].credit.advantages[0]]
        context = {t.uid for t in groups[0]}
    return Selected(seeds, played, dataclasses.replace(credit, groups=groups, advantages=advantages), context,
                    metrics)


def _merged_credit(draws: Sequence[Draw], merge: Merge) -> CreditOutput:
    """The first draw's CreditOutput with its metrics merged over the draws as rows of processes are
    (`merge_rows` with the method's `merge`: counts summed, rates re-weighted or recomputed), wall
    times summed (the draws ran one after another)."""
    first = draws[0].credit
    if len(draws) == 1:
        return first
    rows = [dict(d.credit.metrics, policy_tokens=sum(t.num_policy_tokens for t in d.trajs)) for d in draws]
    metrics = merge_rows(rows, merge)
    metrics.pop("policy_tokens")
    for k in metrics:
        if k.startswith("time/"):
            metrics[k] = sum(r.get(k, 0.0) for r in rows)
    notes = {uid: note for d in draws for uid, note in d.credit.notes.items()}
    return dataclasses.replace(first, metrics=metrics, notes=notes)
