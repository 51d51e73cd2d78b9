"""The record of one episode: its token sequence, which tokens the policy wrote, and every turn.

    tokens      [L] the whole conversation (prompt, responses, observations), as the policy saw it
    policy_mask [L] True on tokens the policy sampled (the only ones trained)
    logprobs    [L] log-prob of each policy token under the sampling policy (0 elsewhere)
    turns[t]    span [start, end) of turn t's policy tokens, its response text, the extracted action,
                validity, the observation that followed, reward
    snapshots[t] environment state BEFORE turn t (snapshots[T] = final state)

Turn spans partition the policy tokens: policy_mask is True exactly on the union of the spans.
`tokens[:turns[t].start]` is the full agent history before turn t, so restoring snapshots[t] and that
history puts the agent back exactly where it was (see `Rollout.continue_from`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

# how an episode ended: the env said done | the turn limit | the next turn would not fit the cache |
# the policy played its max_invalid-th inadmissible action (RolloutConfig.max_invalid)
DONE, TURN_LIMIT, CONTEXT_LIMIT, INVALID_LIMIT = "done", "turn_limit", "context_limit", "invalid_limit"


@dataclasses.dataclass
class Turn:
    start: int
    end: int
    response: str
    action: str | None
    valid: bool
    observation: str
    reward: float
    finish_reason: str | None


@dataclasses.dataclass
class Trajectory:
    """One episode of `env` (task `seed`); `uid` is unique within a rollout, `parent` = (uid, turn)
    for a continuation of an earlier trajectory."""

    env: str
    seed: int
    uid: int
    task: str
    tokens: list[int] = dataclasses.field(default_factory=list)
    policy_mask: list[bool] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    turns: list[Turn] = dataclasses.field(default_factory=list)
    snapshots: list[Any] = dataclasses.field(default_factory=list)
    success: bool = False
    score: float = 0.0
    termination: str | None = None
    parent: tuple[int, int] | None = None
    # contexts[t]: the sampler's live cache after turn t's response (a driver `Context`), kept by a
    # Rollout with a context budget so continuations from turn t + 1 prefill only the observation;
    # None where not kept. Device memory, never saved.
    contexts: list[Any] = dataclasses.field(default_factory=list, repr=False, compare=False)

    def append(self, tokens, policy: bool, logprobs=None) -> None:
        tokens = [int(t) for t in tokens]
        self.tokens += tokens
        self.policy_mask += [policy] * len(tokens)
        self.logprobs += [0.0] * len(tokens) if logprobs is None else [float(x) for x in logprobs]

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def num_policy_tokens(self) -> int:
        return int(sum(self.policy_mask))

    @property
    def finished(self) -> bool:
        return self.termination is not None

    def turn_ids(self) -> np.ndarray:
        """int32 [L]: turn index of each policy token, -1 on prompt / observation tokens."""
        out = np.full(len(self.tokens), -1, np.int32)
        for t, turn in enumerate(self.turns):
            out[turn.start:turn.end] = t
        return out

    def history_before(self, turn: int) -> list[int]:
        """Token history the policy had seen when it started turn `turn`."""
        return list(self.tokens[:self.turns[turn].start])
