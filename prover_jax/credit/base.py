"""The credit-method contract: named estimators with one signature.

    method = make_credit("prover", config.credit, judge=judge, verifier=verifier)
    method.begin_step()                  # once per step (assign calls it): resets judge / critic budgets
    out = method.assign(groups)          # groups[g] = the G trajectories of task g
    out.advantages[g][i]                 # float32 [len(tokens)] per-token advantage of trajectory i
    out.metrics                          # e.g. prover/accepted, judge/cost_usd
    out.groups                           # None, or the groups trained on (played + extra episodes)

Advantages are zero off the policy tokens. A new method is one module: it registers itself with
`@register_credit`, declares what it needs (`CreditMethod.needs`: a judge, a verifier and its pool, a
critic, extra episodes in the batch, the metrics it reports, its headline figures), owns its config
section (`default_config`: config.credit.<name>) and needs no change to the training loop. The maths
methods share (GRPO's outcome term, the eligibility band, the shortest success) is in `credit.common`;
a method that samples continuations the step pipeline may overlap with the rollout implements
`credit.overlap.OverlapCredit`.

Every method reports `credit/extra_policy_tokens`: the policy tokens it had SAMPLED beyond the
step's own episodes (verification continuations, extra rollouts); inherited history is not counted.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Protocol, Sequence

import ml_collections
import numpy as np

from prover_jax.registry import Registry
from prover_jax.rollout.trajectory import Trajectory


class Continuation(Protocol):
    """What verification needs from a continuation: its outcome and its cost."""

    success: bool
    num_policy_tokens: int


class Verifier(Protocol):
    """Runs K continuations from the start of turn `turn` of `traj` (env + history restored) for each
    (traj, turn, K) in `starts`, all in one batch; returns them per start."""

    def run(self, starts: Sequence[tuple[Trajectory, int, int]]) -> list[list[Continuation]]: ...


@dataclasses.dataclass
class CreditOutput:
    """advantages[g][i]: float32 [len(tokens)] for trajectory i of group g (of `groups` when set,
    else of the groups given to `assign`); groups: the enlarged groups when the method added
    episodes to train on (Needs.extra_episodes), else None; notes: uid -> the method's JSON-able
    fields for an episode it singled out (written with it by train.dump_episodes)."""

    advantages: list[list[np.ndarray]]
    metrics: dict[str, float]
    groups: list[list[Trajectory]] | None = None
    notes: dict[int, dict] = dataclasses.field(default_factory=dict)


EXTRA_TOKENS = "credit/extra_policy_tokens"
JUDGE_SUMS = ("judge/calls", "judge/cost_usd", "judge/input_tokens", "judge/output_tokens")  # Merge.sums
COMMON_METRICS = (EXTRA_TOKENS, "time/rollout_s", "time/credit_wait_s", "time/judge_s", "time/verify_s")


@dataclasses.dataclass(frozen=True)
class Merge:
    """How a method's metrics combine over processes and dynamic-sampling draws
    (`training.metrics.merge_rows`); a metric in none of these is the first row's.

    sums: counts, which add up (a name ending in "/" covers every metric under it);
    means: (mean, count): a mean over `count` things, weighted by them;
    ratios: (rate, num, den): num / den, recomputed from the summed counts.
    """

    sums: tuple[str, ...] = ()
    means: tuple[tuple[str, str], ...] = ()
    ratios: tuple[tuple[str, str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class Figure:
    """A headline figure of a method, over a run's steps: sum(num) / sum(den) (a rate, den set) or
    sum(num) (a count); num and den are metric names the method reports.

    name / short: its label in the summary / the progress bar; key / den_key: the summary.json keys
    of the figure and of sum(den); den_name: what den counts (the summary's "of N <den_name>").
    """

    name: str
    short: str
    key: str
    num: str
    den: str = ""
    den_key: str = ""
    den_name: str = ""


@dataclasses.dataclass(frozen=True)
class Needs:
    """What a credit method asks the trainer for (the trainer wires this and names no method).

    judge: a segment proposer, `judges.make_judge(config.judge.name, ...)`, passed as `judge=`.
    verifier: a `Verifier` over a pool of `verify_envs` envs per process, passed as `verifier=`
        (K continuations from a turn boundary; a start at turn 0 is a fresh episode of the task).
    critic: a turn critic (`credit.critic.make_critic`), passed as `critic=`.
    extra_episodes: `CreditOutput.groups` may hold more episodes than were played; they are trained on.
    metrics: the names the method reports; the trainer writes every one at every step (0 when the
        method had nothing to report), so all rows of a run, and all runs of a method, share keys.
    headline: the figures the progress bar and the run's summary show for the method (`Figure`).
    merge: how its metrics combine over processes and draws (`Merge`).
    contexts: continuations start after turn 0, so the rollout keeps each turn's cache for them
        (rollout.context_budget_mb) and they prefill only the observation before their turn.
    several_turns: the method credits parts of an episode between its turns (segments, cut points,
        step-level groups); the trainer refuses it on an env whose episodes are one turn.
    """

    judge: bool = False
    verifier: bool = False
    verify_envs: int = 0
    critic: bool = False
    extra_episodes: bool = False
    metrics: tuple[str, ...] = ()
    headline: tuple[Figure, ...] = ()
    contexts: bool = False
    merge: Merge = Merge()
    several_turns: bool = False


# old config fields -> where they live now; a config that still sets one is refused by the new name
MOVED = {"prover.band_low": "band_low", "prover.band_high": "band_high"}


def refuse_moved(config: Any) -> None:
    """ValueError naming the new field when the credit config sets a field of `MOVED`."""
    for old, new in MOVED.items():
        section, _, field = old.rpartition(".")
        sub = config.get(section) if hasattr(config, "get") else getattr(config, section, None)
        if sub is not None and (field in sub if hasattr(sub, "keys") else hasattr(sub, field)):
            raise ValueError(f"credit.{old} is now credit.{new}: set --config.credit.{new} instead")


class CreditMethod(abc.ABC):
    """An estimator of per-token advantages for a batch of task groups.

    headline: its `Needs.headline` (class-level, so the progress bar can find it from the metrics).
    """

    headline: tuple[Figure, ...] = ()

    def __init__(self, config: Any, **deps):
        refuse_moved(config)
        self.config = config

    @classmethod
    def needs(cls, config: Any, groups: int, group_size: int) -> Needs:
        """What this method needs for `groups` task groups of `group_size` episodes per process."""
        return Needs(headline=cls.headline)

    @classmethod
    def default_config(cls) -> ml_collections.ConfigDict | None:
        """Its section of the credit config, config.credit.<name> (None: it has none)."""
        return None

    def begin_step(self) -> None:
        """Called once per step before its credit (resets the step's judge / critic budgets)."""

    @abc.abstractmethod
    def assign(self, groups: Sequence[Sequence[Trajectory]]) -> CreditOutput: ...


METHODS: Registry = Registry("credit method", field="credit.method", load="prover_jax.credit")
register_credit = METHODS.register


def credit_class(name: str) -> type[CreditMethod]:
    """The registered class of method `name` (its `needs` can be read before building it)."""
    return METHODS.get(name)


def make_credit(name: str, config: Any, **deps) -> CreditMethod:
    return credit_class(name)(config, **deps)


def credit_names() -> list[str]:
    return METHODS.names()


def method_sections() -> dict[str, ml_collections.ConfigDict]:
    """name -> config.credit.<name>, every registered method's own section (those that have one)."""
    return {name: section for name in credit_names()
            if (section := credit_class(name).default_config()) is not None}


def headlines() -> list[Figure]:
    """Every registered method's headline figures (each once), in name order."""
    out: list[Figure] = []
    for name in credit_names():
        out += [f for f in credit_class(name).headline if f not in out]
    return out
