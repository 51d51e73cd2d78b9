"""The environment contract every family implements.

An environment is a single episode of a text task:

    obs, info = env.reset(seed)                  # same seed -> same task, same first observation
    obs, reward, done, info = env.step(action)   # action: the text inside the family's action tags
    snap = env.snapshot(); ...; env.restore(snap) # restores EXACTLY (state + rng + history)

`info` always carries:
    success    bool   terminal success (False until done)
    score      float  graded score; equals float(success) for binary families
    valid      bool   was the action well formed and admissible (False -> state unchanged)
    admissible list[str] | None   the actions the family accepts next, where it has such a list

A malformed action never raises: it returns `valid=False`, an observation that says what was wrong, and
leaves the state as it was (it still costs a turn, as in ALFWorld / WebShop / Search-R1).

Splits. Every family has a train split and a held-out eval split, and the episode seed says which:

    seed >= 0   train task number seed                    split_seed(i, "train") == i
    seed <  0   eval task number -1 - seed                split_seed(i, "eval")  == -1 - i

so `reset(seed)` keeps its signature (pools, rollouts, snapshots and verification pass one int as
before) and the split travels with the seed wherever it goes. `task_id(i, split)` names the task that
task number i of `split` plays (a task file, a goal index, a content digest); the ids of the two
splits never coincide: families with a finite task list split the list, generated families split
their task space by content (see `envs.splits`). `split_sizes()` gives the number of distinct tasks
per split (None: generated, unbounded); task number i of a finite split plays task i % size. A split
that is empty, or a family setting that would make the splits share a task, raises ValueError naming
the setting.

Optional hooks, what the turn critics (`credit.critic`) ask of a family; the default, None, means the
family offers none and the critic that needs it refuses the env by name:

    env.privileged_facts(seed) -> list[str] | None   what the env knows about task `seed` and the agent
                                                     does not (hidden goal details, gold answers), one
                                                     fact a line (the `openai` critic shows them)
    env.reference_policy(eps)  -> policy | None      policy(obs, info) -> {action: probability}, the fixed
                                                     policy pi whose success probability V(s) the `oracle`
                                                     critic computes by exact DP (`envs.testing.dp`); it may
                                                     read the env, which the DP keeps in the evaluated state
    env.pivot(snapshot, action) -> (label, cls) | None   the move `action` from state `snapshot` at one of
                                                     the task's pivotal rules: +1 the right choice where a
                                                     wrong one was open, -1 the mistake, with the rule's
                                                     class; None for a routine move (the `rules` critic
                                                     and the `oracle` judge; may restore the env)
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Callable

from prover_jax.registry import Registry

ACTION_OPEN, ACTION_CLOSE = "<action>", "</action>"
SPLITS = ("train", "eval")


def split_seed(index: int, split: str = "train") -> int:
    """The episode seed of task number `index` (>= 0) of `split`: train -> index, eval -> -1 - index."""
    index = int(index)
    if index < 0:
        raise ValueError(f"task number must be >= 0, got {index}")
    if split == "train":
        return index
    if split == "eval":
        return -1 - index
    raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")


def seed_split(seed: int) -> tuple[str, int]:
    """(split, task number) of an episode seed: the inverse of `split_seed`."""
    seed = int(seed)
    return ("train", seed) if seed >= 0 else ("eval", -1 - seed)


@dataclasses.dataclass(frozen=True)
class PromptSpec:
    """How an agent must talk to a family: shown once in the system prompt.

    Attributes:
      system: the system prompt (role, protocol, action format).
      stop_strings: strings that end one policy turn (the sampler stops on them, inclusive).
      max_turns: turn limit of one episode (the episode is truncated, unsuccessful, after it).
      show_admissible: whether the rollout prompt lists `info["admissible"]` each turn.
    """

    system: str
    stop_strings: tuple[str, ...] = ("</action>",)
    max_turns: int = 30
    show_admissible: bool = True


class Env(abc.ABC):
    """Base class of every environment family (see module docstring for the contract)."""

    name: str = "env"

    @property
    @abc.abstractmethod
    def prompt(self) -> PromptSpec:
        """The family's prompt template, action format and turn limit."""

    @abc.abstractmethod
    def reset(self, seed: int) -> tuple[str, dict]:
        """Starts the task determined by `seed` (>= 0: a train task, < 0: an eval task; see module
        docstring); returns (first observation, info)."""

    @abc.abstractmethod
    def step(self, action: str) -> tuple[str, float, bool, dict]:
        """Applies one action (already extracted from the response); returns (obs, reward, done, info)."""

    @abc.abstractmethod
    def snapshot(self) -> Any:
        """An opaque, picklable record from which `restore` rebuilds this exact state."""

    @abc.abstractmethod
    def restore(self, snapshot: Any) -> None:
        """Puts the env back into the state `snapshot` recorded (exactly)."""

    def extract_action(self, response: str) -> str | None:
        """Action text from a model response; None when the response has no well-formed action.

        Default: the last `<action>...</action>` span, stripped (a span ends at the first `</action>` after
        its opening tag; linear time in the response). Families with other tags override.
        """
        found, pos = None, 0
        while (start := response.find(ACTION_OPEN, pos)) >= 0:
            end = response.find(ACTION_CLOSE, start + len(ACTION_OPEN))
            if end < 0:
                break
            found, pos = response[start + len(ACTION_OPEN):end], end + len(ACTION_CLOSE)
        return None if found is None else found.strip()

    def render_action(self, action: str) -> str:
        """The response text that carries `action` (what `extract_action` reads back).
        Default: `<action>{action}</action>`."""
        return f"<action>{action}</action>"

    def expert_response(self) -> str | None:
        """The expert's next action rendered as a model response (None if there is none)."""
        action = self.expert_action()
        return None if action is None else self.render_action(action)

    def expert_action(self) -> str | None:
        """An action of the family's expert policy from the current state (None if it has none)."""
        return None

    def task_id(self, seed: int, split: str = "train") -> str:
        """A stable identifier of the task that task number `seed` of `split` plays, i.e. that
        `reset(split_seed(seed, split))` starts: equal ids <=> the same task. Default: the episode seed
        (right for families whose distinct seeds are distinct tasks; the others override)."""
        return f"{self.name}:{split_seed(seed, split)}"

    def split_sizes(self) -> dict[str, int | None]:
        """Distinct tasks per split, {"train": n, "eval": n}; None: unbounded (generated), 0: empty."""
        return {"train": None, "eval": None}

    def privileged_facts(self, seed: int) -> list[str] | None:
        """Lines stating what the env knows about task `seed` that the agent does not (may reset the env);
        None: the family offers none (see module docstring)."""
        return None

    def reference_policy(self, eps: float) -> Callable[[str, dict], dict[str, float]] | None:
        """The fixed reference policy (obs, info) -> {action: probability} the oracle critic evaluates,
        mixing the family's expert with `eps` of exploration; None: the family offers none."""
        return None

    def pivot(self, snapshot: Any, action: str | None) -> tuple[int, str] | None:
        """(label in {-1, +1}, class) of `action` from the state `snapshot` at a pivotal rule, None for a
        routine move (see module docstring); the base class offers none (`lacks_hook`)."""
        return None

    def close(self) -> None:
        """Releases resources (processes, files)."""


ENVS: Registry = Registry("environment", field="env.name", load="prover_jax.envs")
register = ENVS.register  # class decorator: `make(name, **kwargs)` builds this family


def make(name: str, **kwargs) -> Env:
    """Builds environment family `name` (see `names()`) with family-specific kwargs."""
    return ENVS.make(name, **kwargs)


def names() -> list[str]:
    return ENVS.names()


def lacks_hook(name: str, hook: str) -> bool:
    """True when family `name` is registered as an Env class that keeps the base class's optional `hook`
    (it offers none: known without building it); False otherwise (ask the built env)."""
    entry = ENVS.get(name)
    return isinstance(entry, type) and getattr(entry, hook, None) is getattr(Env, hook)


def no_pivot_rules(env_name: str, field: str) -> str:
    """The refusal of an env without pivot rules, by the config field that asked for them."""
    return (f"{field} needs the env's pivot rules (Env.pivot); env {env_name!r} (env.name) offers none: "
            "they are privileged labels of the household family (envs.household.pivots)")


def pivot_labels(env: Env, traj) -> list[tuple[int, str] | None]:
    """Per turn of a trajectory (rollout.Trajectory: snapshots, turns): env.pivot(snapshots[t], action_t)
    for valid turns, None for invalid ones. ValueError when its states were not recorded."""
    if len(traj.snapshots) < traj.num_turns + 1:
        raise ValueError(f"trajectory {traj.uid} has {len(traj.snapshots)} snapshots for {traj.num_turns} turns")
    return [env.pivot(traj.snapshots[t], turn.action) if turn.valid else None for t, turn in enumerate(traj.turns)]


def info_dict(*, success: bool = False, score: float | None = None, valid: bool = True,
              admissible: list[str] | None = None, **extra) -> dict:
    """Builds an `info` dict with the contract's keys filled in."""
    out = dict(success=bool(success), score=float(success) if score is None else float(score),
               valid=bool(valid), admissible=admissible)
    out.update(extra)
    return out
