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
"""

from __future__ import annotations

import abc
import dataclasses
import re
from typing import Any, Callable

ACTION_RE = re.compile(r"<action>(.*?)</action>", re.DOTALL)


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
        """Starts the task determined by `seed`; returns (first observation, info)."""

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

        Default: the last `<action>...</action>` span, stripped. Families with other tags override.
        """
        found = ACTION_RE.findall(response)
        if not found:
            return None
        return found[-1].strip()

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

    def close(self) -> None:
        """Releases resources (processes, files)."""


_REGISTRY: dict[str, Callable[..., Env]] = {}


def register(name: str) -> Callable[[Callable[..., Env]], Callable[..., Env]]:
    """Class decorator: makes `make(name, **kwargs)` build this family."""

    def deco(factory):
        if name in _REGISTRY:
            raise ValueError(f"environment {name!r} registered twice")
        _REGISTRY[name] = factory
        return factory

    return deco


def make(name: str, **kwargs) -> Env:
    """Builds environment family `name` (see `names()`) with family-specific kwargs."""
    from prover_jax import envs as _envs  # noqa: F401  (imports the families so they register)

    if name not in _REGISTRY:
        raise ValueError(f"unknown environment {name!r}; known: {sorted(_REGISTRY)}")
    return _REGISTRY[name](**kwargs)


def names() -> list[str]:
    from prover_jax import envs as _envs  # noqa: F401

    return sorted(_REGISTRY)


def info_dict(*, success: bool = False, score: float | None = None, valid: bool = True,
              admissible: list[str] | None = None, **extra) -> dict:
    """Builds an `info` dict with the contract's keys filled in."""
    out = dict(success=bool(success), score=float(success) if score is None else float(score),
               valid=bool(valid), admissible=admissible)
    out.update(extra)
    return out
