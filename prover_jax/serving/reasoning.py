"""Reasoning blocks of thinking checkpoints (Qwen3 / Qwen3.5): `<think> ... </think>` before the answer.

    thinks(chat_template)          the template knows <think>: its replies are split
    opens_thinking(prompt_text)    the rendered prompt ends inside a think block (the generation prompt
                                   opened it, as Qwen3.5's does when thinking is on)
    split(text, opened, calls)     (reasoning | None, content) of a reply
    hold_back(text)                the length of `text` that may be sent while streaming: a trailing
                                   piece that could begin a tag is held until it is decided
    ThinkBudget                    the constraint that closes a think block after max_thinking_tokens

A reply that never closes its think block is all reasoning, unless tools are active (`calls`) and a
`<tool_call>` opens inside it: the call (and what follows) is content, so the call still counts.
"""

from __future__ import annotations

from prover_jax.serving.tools import CLOSE as END_TOOL_CALL
from prover_jax.serving.tools import OPEN as TOOL_CALL

THINK, END_THINK = "<think>", "</think>"
TAGS = (THINK, END_THINK, TOOL_CALL)  # the tags a streamed piece may begin
MARKUP = (*TAGS, END_TOOL_CALL)  # the tags the parsers read: kept in the decoded text


def thinks(chat_template: str | None) -> bool:
    return bool(chat_template) and THINK in chat_template


def opens_thinking(prompt_text: str) -> bool:
    return prompt_text.rfind(THINK) > prompt_text.rfind(END_THINK)


def split(text: str, opened: bool, calls: bool = True) -> tuple[str | None, str]:
    """(reasoning, content): the think block's text (stripped; None when the reply has none) and the
    rest. `opened`: the prompt already opened the block, so the reply starts inside it; `calls`: a
    `<tool_call>` ends a block that never closes (without tools it is text of the reasoning)."""
    body = text
    if not opened:
        head = text.lstrip()
        if not head.startswith(THINK):
            return None, text
        body = head[len(THINK):]
    end = body.find(END_THINK)
    if end >= 0:
        return body[:end].strip(), body[end + len(END_THINK):].lstrip()
    call = body.find(TOOL_CALL) if calls else -1
    if call >= 0:
        return body[:call].strip(), body[call:]
    return body.strip(), ""


def hold_back(text: str) -> int:
    """len(text) less the longest suffix that is a proper prefix of a tag."""
    for k in range(max(len(t) for t in TAGS) - 1, 0, -1):
        if len(text) >= k and any(t.startswith(text[-k:]) for t in TAGS):
            return len(text) - k
    return len(text)


class ThinkBudget:
    """A TokenConstraint (sampling.driver_types) that ends a think block after `budget` tokens: free
    sampling until then (all tokens allowed); at the budget the `close` ids (`</think>` and a blank
    line) are forced one by one, then sampling is free again. The block counts from the start when
    the prompt opened it (`opened`), else from the sample's own `<think>` id; a `</think>` the model
    writes itself ends the count."""

    def __init__(self, budget: int, think_id: int, end_id: int, close: list[int], opened: bool):
        self.left, self.think_id, self.end_id, self.close = int(budget), think_id, end_id, list(close)
        self.inside = opened
        self.forced = 0 if opened and self.left <= 0 else None  # index into `close` while forcing it

    def fill_bitmask(self, row) -> None:
        import numpy as np

        from prover_jax.sampling.sampler import MASK_BITS

        if self.forced is None:
            row[:] = -1  # every bit: any token
            return
        t = self.close[self.forced]
        row[:] = 0
        row[t // MASK_BITS] = np.uint32(1 << (t % MASK_BITS)).view(np.int32)

    def consume(self, token: int) -> None:
        if self.forced is not None:
            self.forced += 1
            if self.forced == len(self.close):
                self.forced, self.inside, self.left = None, False, -1
            return
        if not self.inside:
            self.inside = token == self.think_id and self.left >= 0
            return
        if token == self.end_id:
            self.inside, self.left = False, -1
            return
        self.left -= 1
        if self.left <= 0:
            self.forced = 0
