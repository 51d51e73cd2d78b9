"""Reasoning blocks of thinking checkpoints (Qwen3 / Qwen3.5): `<think> ... </think>` before the answer.

    thinks(chat_template)          the template knows <think>: its replies are split
    opens_thinking(prompt_text)    the rendered prompt ends inside a think block (the generation prompt
                                   opened it, as Qwen3.5's does when thinking is on)
    split(text, opened)            (reasoning | None, content) of a reply
    hold_back(text)                the length of `text` that may be sent while streaming: a trailing
                                   piece that could begin a tag is held until it is decided

A reply that never closes its think block is all reasoning, unless a `<tool_call>` opens inside it: the
call (and what follows) is content, so the call still counts.
"""

from __future__ import annotations

THINK, END_THINK, TOOL_CALL = "<think>", "</think>", "<tool_call>"
TAGS = (THINK, END_THINK, TOOL_CALL)


def thinks(chat_template: str | None) -> bool:
    return bool(chat_template) and THINK in chat_template


def opens_thinking(prompt_text: str) -> bool:
    return prompt_text.rfind(THINK) > prompt_text.rfind(END_THINK)


def split(text: str, opened: bool) -> tuple[str | None, str]:
    """(reasoning, content): the think block's text (stripped; None when the reply has none) and the
    rest. `opened`: the prompt already opened the block, so the reply starts inside it."""
    body = text
    if not opened:
        head = text.lstrip()
        if not head.startswith(THINK):
            return None, text
        body = head[len(THINK):]
    end = body.find(END_THINK)
    if end >= 0:
        return body[:end].strip(), body[end + len(END_THINK):].lstrip()
    call = body.find(TOOL_CALL)
    if call >= 0:
        return body[:call].strip(), body[call:]
    return body.strip(), ""


def hold_back(text: str) -> int:
    """len(text) less the longest suffix that is a proper prefix of a tag."""
    for k in range(max(len(t) for t in TAGS) - 1, 0, -1):
        if len(text) >= k and any(t.startswith(text[-k:]) for t in TAGS):
            return len(text) - k
    return len(text)
