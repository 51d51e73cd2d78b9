"""Qwen's XML tool calls (`<function=NAME><parameter=KEY>VALUE</parameter></function>` inside
`<tool_call>`, the qwen3_xml format) parsed next to the JSON ones: values typed by the tool's schema,
JSON literals read without one, malformed blocks left in the content."""

import json

import pytest

from prover_jax.serving.tools import parse_tool_calls

TOOLS = [{"type": "function", "function": {"name": "propose", "parameters": {"type": "object", "properties": {
    "start": {"type": "integer"}, "why": {"type": "string"}, "score": {"type": "number"},
    "ok": {"type": "boolean"}, "meta": {"type": "object"}, "turns": {"type": "array"}}}}}]


def xml(name, **params):
    inner = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{inner}</function>\n</tool_call>"


def args_of(calls):
    return [json.loads(c["function"]["arguments"]) for c in calls]


def test_xml_values_follow_the_schema():
    text = "I will propose.\n" + xml("propose", start=3, why=42, score=0.5, ok="true", meta='{"a": [1]}',
                                     turns="[2, 3]")
    content, calls = parse_tool_calls(text, TOOLS)
    assert content == "I will propose." and [c["function"]["name"] for c in calls] == ["propose"]
    assert args_of(calls) == [{"start": 3, "why": "42", "score": 0.5, "ok": True, "meta": {"a": [1]}, "turns": [2, 3]}]


def test_xml_without_a_schema_reads_json_literals_and_keeps_text():
    content, calls = parse_tool_calls(xml("f", n=7, flag="false", text="a line\nand another", quoted='"x"'))
    assert content is None
    assert args_of(calls) == [{"n": 7, "flag": False, "text": "a line\nand another", "quoted": "x"}]


def test_a_value_the_schema_types_but_the_model_misspelled_stays_text():
    _, calls = parse_tool_calls(xml("propose", start="three", ok="maybe"), TOOLS)
    assert args_of(calls) == [{"start": "three", "ok": "maybe"}]


def test_json_and_xml_calls_in_one_reply():
    text = '<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n' + xml("b", y=2)
    content, calls = parse_tool_calls(text)
    assert content is None and [c["function"]["name"] for c in calls] == ["a", "b"]
    assert args_of(calls) == [{"x": 1}, {"y": 2}] and len({c["id"] for c in calls}) == 2


@pytest.mark.parametrize("text", [
    "<tool_call>\n<function=f>\nstray text\n</function>\n</tool_call>",  # text outside any parameter
    "<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n</tool_call>",  # no </function>
    "<tool_call>\n<function=>\n</function>\n</tool_call>",  # no name
    "<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n</function>\n",  # unterminated
])
def test_malformed_xml_is_content(text):
    assert parse_tool_calls(text, TOOLS) == (text, [])
