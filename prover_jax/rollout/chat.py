"""The agent's conversation as an append-only token sequence (ChatML layout by default; the checkpoint's
own template with rollout.chat_template=auto, `rollout.template`).

    tokens = opening(system, task)                 <|im_start|>system\\n{system}<|im_end|>\\n
                                                   <|im_start|>user\\n{task}<|im_end|>\\n
                                                   <|im_start|>assistant\\n
    + response_1 (policy tokens, up to its stop string or <|im_end|>)
    + after_response(obs_1)                        [<|im_end|>]\\n<|im_start|>user\\n{obs_1}<|im_end|>\\n
                                                   <|im_start|>assistant\\n
    + response_2 + ...

Each piece is tokenised on its own and appended, never re-tokenised: the sequence the policy saw is
exactly the one trained on, a live decode cache can be EXTENDED turn by turn, and a restored history
is token-identical to the original. The closing <|im_end|> of a response that stopped on a stop string
is added by the environment side (not a policy token).
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, Sequence


class Tokenizer(Protocol):
    """What the rollout needs from a tokenizer (a transformers fast tokenizer satisfies it)."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


@dataclasses.dataclass(frozen=True)
class ChatTemplate:
    """Role markers of the conversation (defaults: Qwen's ChatML; `template.derive` reads them from a
    checkpoint's own template). `end` also ends a response: its token id is an EOS of every policy
    turn. `assistant` is the whole generation prompt (a think block opened or skipped included).
    think_end: non-empty when the policy reasons first: its response is `reasoning think_end answer`;
    think_skip: the empty reasoning, closed, that starts an expert's response then. observation /
    observation_end: what opens and closes an observation (None: `user` and `end`, a user message;
    a tool response's wrapping with rollout.observation_role=tool)."""

    system: str = "<|im_start|>system\n"
    user: str = "<|im_start|>user\n"
    assistant: str = "<|im_start|>assistant\n"
    end: str = "<|im_end|>"
    newline: str = "\n"
    think_end: str = ""
    think_skip: str = ""
    observation: str | None = None
    observation_end: str | None = None

    def answer(self, response: str) -> str:
        """What the env acts on: the response after its reasoning ("" when the reasoning never closed)."""
        if not self.think_end:
            return response
        head, found, tail = response.rpartition(self.think_end)
        return tail.lstrip() if found else ""

    def expert(self, action_text: str) -> str:
        """An expert's response (no reasoning) as the policy would write it."""
        return self.think_skip + action_text

    def opening(self, system_prompt: str, task: str) -> str:
        return (f"{self.system}{system_prompt}{self.end}{self.newline}{self.user}{task}{self.end}"
                f"{self.newline}{self.assistant}")

    def after_response(self, observation: str, response_closed: bool) -> str:
        """Text after a response: closes it (unless the policy emitted `end` itself), then the
        observation (a user message, or as `observation` / `observation_end` wrap it) and the next
        assistant header."""
        close = "" if response_closed else self.end
        head = self.user if self.observation is None else self.observation
        tail = self.end if self.observation_end is None else self.observation_end
        return f"{close}{self.newline}{head}{observation}{tail}{self.newline}{self.assistant}"


def observation_text(obs: str, info: dict, show_admissible: bool, turn: int, max_turns: int) -> str:
    """What the agent reads after a turn: the observation, the turn count (not for a one-turn task), and
    (for families that list them) the admissible actions."""
    parts = [obs.strip()]
    admissible = info.get("admissible") if show_admissible else None
    if admissible:
        parts.append("Admissible actions: " + ", ".join(admissible) + ".")
    if max_turns > 1:
        parts.append(f"[turn {turn + 1} of {max_turns}]")
    return "\n".join(parts)
