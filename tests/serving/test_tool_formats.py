"""Qwen's XML tool calls (`<function=NAME><parameter=KEY>VALUE</parameter></function>` inside
`<tool_call>`, the qwen3_xml format) parsed next to the JSON ones: values typed by the tool's schema,
JSON literals read without one, the text before the first call as the content, what is no call left in
it (recovering malformed and cut-off calls: test_tool_parsing.py)."""

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
    assert content == "I will propose.\n" and [c["function"]["name"] for c in calls] == ["propose"]
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
    "<tool_call>\n<function=>\n</function>\n</tool_call>",  # no name
    "<tool_call>\n<function=propo",  # cut inside the function tag
    "<tool_call> is the tag\n<parameter=x>\n1\n</parameter>\n</tool_call>",  # no function
    "<tool_call>\n<function name=\"f\">\n<parameter name=\"x\">\n1\n</parameter>\n</function>\n</tool_call>",
])
def test_malformed_xml_is_content(text):
    assert parse_tool_calls(text, TOOLS) == (text, [])


def test_a_mention_of_the_tag_before_a_call_is_content():
    """A `<tool_call>` not followed by `<function=` opens no call (vLLM's parsers cut the content there)."""
    text = "I reply inside <tool_call> tags.\n" + xml("propose", start=2)
    content, calls = parse_tool_calls(text, TOOLS)
    assert content == "I reply inside <tool_call> tags.\n" and args_of(calls) == [{"start": 2}]


def test_arguments_are_always_valid_json():
    """NaN / Infinity are not JSON (JSON.parse refuses them): a number the model spells so stays text, and a
    JSON block holding one is malformed."""
    _, calls = parse_tool_calls(xml("propose", score="inf", meta='{"a": NaN}', turns="[1e999]"), TOOLS)
    assert args_of(calls) == [{"score": "inf", "meta": '{"a": NaN}', "turns": "[1e999]"}]
    text = '<tool_call>{"name": "propose", "arguments": {"score": -Infinity}}</tool_call>'
    assert parse_tool_calls(text, TOOLS) == (text, [])


OPTIONAL = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
    "n": {"type": ["integer", "null"]}, "s": {"type": ["string", "null"]}, "t": {"type": ["string", "null"]}},
    "required": ["n"]}}}]


def test_an_untyped_enum_of_strings_stays_strings():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "level": {"enum": ["1", "2"]}, "flag": {"enum": ["true", "false"]}}}}}]
    _, calls = parse_tool_calls(xml("f", level=1, flag="true"), tools)
    assert args_of(calls) == [{"level": "1", "flag": "true"}]


def test_a_list_of_types_reads_the_first_that_fits():
    _, calls = parse_tool_calls(xml("f", n=5, s="null", t=42), OPTIONAL)
    assert args_of(calls) == [{"n": 5, "s": None, "t": "42"}]
    _, calls = parse_tool_calls(xml("f", n="null"), OPTIONAL)
    assert args_of(calls) == [{"n": None}]


def accepts(tmp_path, tools, reply):
    """Whether the forced-call grammar (Qwen3.5's XML format) of `tools` takes `reply` whole."""
    pytest.importorskip("llguidance")
    from prover_jax.serving import protocol as P
    from prover_jax.serving.grammar import Grammars

    from helpers import serving as SF
    from helpers.qwen_vocab import chat_template

    grammars = Grammars(SF.save_tokenizer(str(tmp_path), chat_template=chat_template()), SF.VOCAB)
    req = P.parse_chat_request({"model": "m", "messages": [{"role": "user", "content": "q"}], "tools": tools,
                                "tool_choice": "required"})
    matcher = grammars.factory(grammars.for_request(req))().m
    return all(matcher.consume_token(t) for t in grammars.hf.encode(reply, add_special_tokens=False)) and \
        not matcher.is_error() and matcher.is_accepting()


def test_forced_xml_strings_end_before_their_bound(tmp_path):
    """The string's greedy lexeme used to swallow the closing newline: only 200-character strings ended."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "why": {"type": "string"}, "n": {"type": "integer"}}, "required": ["why", "n"]}}}]
    assert accepts(tmp_path, tools, xml("f", why="two lines,\nshort", n=3))


def test_forced_xml_calls_take_a_list_of_types(tmp_path):
    reply = xml("f", n="null", s="null", t="a few words")
    assert accepts(tmp_path, OPTIONAL, reply)
    assert args_of(parse_tool_calls(reply, OPTIONAL)[1]) == [{"n": None, "s": None, "t": "a few words"}]
