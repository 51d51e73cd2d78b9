"""The rollout's layout from a checkpoint's own chat template, and the check that the layout follows it.

    template = resolve("auto", enable_thinking=False, tokenizer=tok)   # a ChatTemplate (chat.py)
    check(tok, template, enable_thinking=False)                        # ValueError naming the first token that differs

rollout.chat_template:
    auto    the tokenizer's own template (tokenizer_config.json / chat_template.jinja of the checkpoint),
            rendered by transformers' `apply_chat_template`; a tokenizer without one (the built-in,
            trained ones) gets ChatML;
    chatml  ChatML (`ChatTemplate()`), whatever the tokenizer ships.

The pieces come from rendering a conversation of sentinels: the opening (system + task + generation prompt)
is text before / between / after them, so `opening` and `after_response` (chat.py) rebuild exactly what
the template writes, the generation prompt included (Qwen3.5: `<|im_start|>assistant\\n<think>\\n` with
thinking on, `...<think>\\n\\n</think>\\n\\n` with it off).

History. Qwen3 / Qwen3.5 templates drop the reasoning (and the empty think block) of the assistant turns
before the latest user message, so the rendering of turn t + 1 is not the rendering of turn t extended.
The rule here: the rollout keeps the APPEND-ONLY sequence (as token-in-token-out pipelines do): each turn's
prompt is the previous prompt, the policy's response as sampled, and the template's text for the new
observation and the next generation prompt. The prompt of turn t equals `apply_chat_template` of the
conversation so far except inside earlier assistant turns, where it keeps what the policy wrote; the
trainer trains on exactly these tokens, and the decode cache is extended turn by turn (re-rendering
instead would prefill the whole history again after every turn: O(T^2) prefill tokens per episode).

`check` renders a three-turn conversation both ways and refuses a template the layout cannot follow: any
difference outside that rule, named by the first token that differs. Thinking on: the policy's response
is `reasoning </think> answer`, the env acts on the answer (`ChatTemplate.answer`), and an expert's
response (SFT) is the template's empty think block closed, then the action (`ChatTemplate.expert`).
"""

from __future__ import annotations

import re

from prover_jax.rollout.chat import ChatTemplate

CHOICES = ("auto", "chatml")
END_THINK = "</think>"
_S, _T, _R, _O = "SENTINELSYSTEMQ", "SENTINELTASKQ", "SENTINELREPLYQ", "SENTINELOBSERVATIONQ"
_THINK_BLOCK = re.compile(r"<think>\n.*?</think>\s*\Z", re.DOTALL)


def _render(tok, messages, generation: bool, thinking: bool) -> str:
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation,
                                   enable_thinking=thinking)


def _fail(why: str) -> ValueError:
    return ValueError(f"rollout.chat_template=auto: the tokenizer's chat template {why}; set "
                      "rollout.chat_template=chatml to use ChatML instead")


def derive(tok, enable_thinking: bool, observation_role: str = "user") -> ChatTemplate:
    """The ChatTemplate whose pieces the tokenizer's template writes (module docstring); observations as
    `observation_role` messages (user, or tool: the template's tool-response wrapping)."""
    text = _render(tok, [{"role": "system", "content": _S}, {"role": "user", "content": _T}], True, enable_thinking)
    if text.count(_S) != 1 or text.count(_T) != 1 or text.index(_S) > text.index(_T):
        raise _fail("does not write a system message then a user message once each")
    system, rest = text.split(_S)
    between, after = rest.split(_T)
    end = tok.decode(tok.encode(between, add_special_tokens=False)[:1]) if between else ""
    if not end or not between.startswith(end) or not after.startswith(end):
        raise _fail(f"does not close a message with one token (between the system and the user message: {between!r})")
    nl = re.match(r"\s*", between[len(end):]).group(0)
    if not after.startswith(end + nl):
        raise _fail(f"closes the system message with {between[:len(end) + len(nl)]!r} and the user message with "
                    f"{after[:len(end) + len(nl)]!r}")
    user, assistant = between[len(end) + len(nl):], after[len(end) + len(nl):]
    think_skip = ""
    if enable_thinking:
        off = _render(tok, [{"role": "user", "content": _T}], True, False).split(_T)[1]
        on = after
        if END_THINK not in off or not off.startswith(on):
            raise _fail("opens no think block that thinking off closes (rollout.enable_thinking=True needs one)")
        think_skip = off[len(on):]  # the empty reasoning, closed: what an expert response starts with
    observation = observation_end = None
    if observation_role == "tool":
        msgs = [{"role": "system", "content": _S}, {"role": "user", "content": _T},
                {"role": "assistant", "content": _R}, {"role": "tool", "content": _O}]
        text = _render(tok, msgs, True, enable_thinking)
        rest = text.split(_R)[-1] if text.count(_R) == 1 and text.count(_O) == 1 else ""
        head, _, tail = rest.partition(_O)
        if not head.startswith(end + nl) or not tail.endswith(nl + assistant):
            raise _fail("does not write a tool message between an assistant turn and the generation prompt "
                        "(rollout.observation_role=tool)")
        observation, observation_end = head[len(end + nl):], tail[:-len(nl + assistant)]
    elif observation_role != "user":
        raise ValueError(f"rollout.observation_role: unknown {observation_role!r}; expected user or tool")
    return ChatTemplate(system=system, user=user, assistant=assistant, end=end, newline=nl,
                        think_end=END_THINK if enable_thinking else "", think_skip=think_skip,
                        observation=observation, observation_end=observation_end)


def resolve(choice: str, enable_thinking: bool, tokenizer=None, observation_role: str = "user") -> ChatTemplate:
    """rollout.chat_template / enable_thinking / observation_role -> the layout (checked against the
    template)."""
    if choice not in CHOICES:
        raise ValueError(f"rollout.chat_template: unknown {choice!r}; expected one of {', '.join(CHOICES)}")
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if choice == "chatml" or not has_template:
        if observation_role != "user":
            raise ValueError(f"rollout.observation_role={observation_role!r} needs the checkpoint's own template "
                             "(rollout.chat_template=auto on a tokenizer with one); ChatML observations are user turns")
        if enable_thinking:
            raise ValueError("rollout.enable_thinking=True needs the checkpoint's own template "
                             "(rollout.chat_template=auto on a tokenizer with a chat template that thinks); "
                             + ("the tokenizer has none" if choice == "auto" else "ChatML has no think block"))
        return ChatTemplate()
    template = derive(tokenizer, enable_thinking, observation_role)
    check(tokenizer, template, enable_thinking, observation_role=observation_role)
    return template


def _policy_text(template: ChatTemplate, k: int) -> tuple[str, dict]:
    """Turn k's response as the policy writes it (after the generation prompt) and as a message."""
    reply = f"{_R}{k}"
    message = {"role": "assistant", "content": reply}
    if template.think_end:
        message["reasoning_content"] = f"thought {k}"
        return f"thought {k}\n{template.think_end}\n\n{reply}{template.end}", message
    return f"{reply}{template.end}", message


def _first_difference(tok, ours: list[int], theirs: list[int], where: str) -> ValueError:
    i = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))

    def name(ids):
        return f"{tok.decode(ids[i:i + 1])!r} (id {ids[i]})" if i < len(ids) else "nothing (it ends)"

    return _fail(f"cannot be followed append-only: at token {i} of {where} the rollout writes {name(ours)} where the "
                 f"template writes {name(theirs)}")


def check(tok, template: ChatTemplate, enable_thinking: bool, turns: int = 3, observation_role: str = "user") -> None:
    """Renders a `turns`-turn conversation both ways; at each turn's prompt the rollout's tokens must equal
    `apply_chat_template` (add_generation_prompt=True) except inside earlier assistant turns, where the
    template may drop the think block (module docstring). ValueError names the first differing token."""
    encode = lambda text: list(tok.encode(text, add_special_tokens=False))  # noqa: E731
    messages = [{"role": "system", "content": _S}, {"role": "user", "content": _T}]
    ours_text = [template.opening(_S, _T)]  # pieces: opening, response 1, after 1, response 2, ...
    for t in range(turns):
        theirs = _render(tok, messages, True, enable_thinking)
        where = f"turn {t + 1}'s prompt"
        if t == 0:
            ids = [i for piece in ours_text for i in encode(piece)]
            if ids != encode(theirs):
                raise _first_difference(tok, ids, encode(theirs), where)
        else:  # split both at the replies: the text between them must agree, up to dropped think blocks
            mine = "".join(ours_text).split(_R)
            parts = theirs.split(_R)
            if len(parts) != len(mine):
                raise _fail(f"writes {len(parts) - 1} of the {len(mine) - 1} earlier replies in {where}")
            for k, (a, b) in enumerate(zip(mine, parts)):
                if a != b and not (k < len(mine) - 1 and _THINK_BLOCK.sub("", a) == b):
                    raise _first_difference(tok, encode(a), encode(b), f"{where} (after reply {k})")
            if "".join(ours_text) == theirs:  # nothing rewritten: the whole prompt, token for token
                ids = [i for piece in ours_text for i in encode(piece)]
                if ids != encode(theirs):
                    raise _first_difference(tok, ids, encode(theirs), where)
            elif encode(mine[-1]) != encode(parts[-1]):  # the newest piece, token for token
                raise _first_difference(tok, encode(mine[-1]), encode(parts[-1]), f"{where} (after the last reply)")
        response, message = _policy_text(template, t + 1)
        observation = f"{_O}{t + 1}"
        ours_text += [response, template.after_response(observation, response_closed=True)]
        messages += [message, {"role": observation_role, "content": observation}]
