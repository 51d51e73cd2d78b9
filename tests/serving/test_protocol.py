"""Request validation: malformed tool fields are 400s naming the field (not 500s from deep inside), and an
assistant turn's reasoning_content reaches the chat template."""

import pytest

from prover_jax.serving import protocol as P

HI = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def parse(**kw):
    return P.parse_chat_request({"model": "m", "messages": HI, **kw})


@pytest.mark.parametrize("body, param", [
    ({"tools": [TOOL], "tool_choice": {"type": "function", "function": "f"}}, "tool_choice"),
    ({"messages": [{"role": "assistant", "content": "x", "tool_calls": 3}]}, "messages[0].tool_calls"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"properties": ["x"]}}}]}, "tools[0]"),
    ({"messages": [{"role": "assistant", "content": "x", "reasoning_content": 3}]}, "messages[0].reasoning_content"),
])
def test_malformed_tool_fields_are_400s(body, param):
    with pytest.raises(P.ApiError) as e:
        parse(**body)
    assert e.value.status == 400 and e.value.param == param


def test_reasoning_content_of_an_assistant_turn_is_kept():
    msgs = [*HI, {"role": "assistant", "content": None, "reasoning_content": "call f",
                  "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "assistant", "content": "done", "reasoning": "all set"}, {"role": "user", "content": "ok"}]
    got = parse(messages=msgs).messages
    assert [m.get("reasoning_content") for m in got] == [None, "call f", "all set", None]
