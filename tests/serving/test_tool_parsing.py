"""Qwen3 XML tool calls read as vLLM's qwen3_xml and qwen3_coder parsers read them where the two agree
(missing closing tags, cut-off replies, a bare `<function=`, anyOf / oneOf types, Python literals, the
content before the first call), and more robustly where both lose a value: markup inside a string value
(a doc about tool calls, a stray `</parameter>`) stays in it and never replaces the real call. Streamed
replies give the same calls. Forced XML calls follow the whole parameter schema: numeric bounds, enums
of any type, string lengths and patterns, nested objects, strings holding `<`."""

import asyncio
import json

import pytest

from prover_jax.sampling.driver import Completion
from prover_jax.serving import protocol as P
from prover_jax.serving.tools import parse_tool_calls

from helpers import serving as SF
from helpers.qwen_vocab import chat_template

PROPS = {"path": {"type": "string"}, "content": {"type": "string"}, "n": {"type": "integer"},
         "obj": {"type": "object"}, "arr": {"type": "array"}, "flag": {"type": "boolean"}}
TOOLS = [{"type": "function", "function": {"name": "write", "parameters": {"type": "object", "properties": PROPS}}}]


def xml(name="write", **params):
    inner = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{inner}</function>\n</tool_call>"


def calls_of(text, tools=TOOLS):
    content, calls = parse_tool_calls(text, tools)
    return content, [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


NESTED = xml("other", x=1)  # a complete call, written as text inside a value
DOCS = [f"Call it like this:\n{NESTED}\nThen wait.", "end a value with </parameter> on its own line",
        "the <tool_call> tag and <function=x> open a call", "<b>bold</b> & a < b", "<parameter=x> names x"]


@pytest.mark.parametrize("doc", DOCS)
def test_markup_inside_a_string_value_stays_in_it(doc):
    """Both vLLM parsers cut such a value (at the nested `</parameter>`, `<function=`, `</parameter>`), and
    qwen3_xml returns the nested call as a second one."""
    assert calls_of("I'll write it.\n" + xml(path="docs.md", content=doc, n=2)) == (
        "I'll write it.\n", [("write", {"path": "docs.md", "content": doc, "n": 2})])


def test_a_nested_call_of_the_same_function_never_replaces_the_real_one():
    doc = "Example:\n" + xml(path="inner.md", n=1) + "\nend"
    assert calls_of(xml(content=doc, n=3)) == (None, [("write", {"content": doc, "n": 3})])


@pytest.mark.parametrize("text, want", [
    # test_extract_tool_calls_missing_closing_parameter_tag: a value ends at another parameter
    ("Let me check:\n<tool_call>\n<function=write>\n<parameter=path>\na.txt\n<parameter=n>\n3\n</parameter>\n"
     "</function>\n</tool_call>", ("Let me check:\n", {"path": "a.txt", "n": 3})),
    ("<tool_call>\n<function=write>\n<parameter=path>\na.txt\n</function>\n</tool_call>", (None, {"path": "a.txt"})),
    ("<tool_call>\n<function=write>\n<parameter=n>\n1\n</parameter>\n</tool_call>", (None, {"n": 1})),  # </function>
    ("<tool_call>\n<function=write>\n<parameter=n>\n1\n</parameter>\n</function>\n", (None, {"n": 1})),  # </tool_call>
    ("Hi\n<tool_call>\n<function=write>\n<parameter=path>\na.txt\n</parameter>\n<parameter=content>\nhalf a li",
     ("Hi\n", {"path": "a.txt", "content": "half a li"})),  # cut inside a value: what was written (qwen3_coder)
    ("<tool_call>\n<function=write>\n<parameter=path>\na.txt\n</param", (None, {"path": "a.txt"})),
    ("<tool_call>\n<function=write>\n<parameter=n>\n1\n</parameter>\n<parame", (None, {"n": 1})),
    ("<tool_call>\n<function=write>\n<parameter=n>\n1\n</parameter>\n<parameter=pa", (None, {"n": 1})),
    ("<tool_call>\n<function=write>\n", (None, {})),
    ("<tool_call>\n<function=write>\nstray text\n<parameter=n>\n1\n</parameter>\n</function>\n</tool_call>",
     (None, {"n": 1})),  # text outside the parameters is ignored
    ("<tool_call>\n<function=write>\n<parameter=content>\nuse </parameter> to close",
     (None, {"content": "use </parameter> to close"})),  # cut, with a stray </parameter> in the value
])
def test_malformed_and_cut_off_calls_are_recovered(text, want):
    content, args = want
    assert calls_of(text) == (content, [("write", args)])


def test_the_calls_before_a_cut_one_are_kept_whole():
    text = xml(n=1) + "\n<tool_call>\n<function=write>\n<parameter=n>\n2"
    assert calls_of(text) == (None, [("write", {"n": 1}), ("write", {"n": 2})])


def test_a_bare_function_and_several_functions_in_one_block():
    """test_extract_tool_calls_fallback_no_tags: a call without <tool_call>; both parsers also read each
    `<function=` of one block as a call."""
    bare = "Sure.\n<function=write>\n<parameter=n>\n4\n</parameter>\n</function>"
    assert calls_of(bare) == ("Sure.\n", [("write", {"n": 4})])
    block = "<tool_call>\n<function=write>\n<parameter=n>\n1\n</parameter>\n</function>\n" \
            "<function=write>\n<parameter=n>\n2\n</parameter>\n</function>\n</tool_call>"
    assert calls_of(block) == (None, [("write", {"n": 1}), ("write", {"n": 2})])
    assert calls_of("Call <function=write> with a path.") == ("Call <function=write> with a path.", [])


def test_content_is_the_text_before_the_first_call():
    """As both parsers return it: not stripped, None when empty; text after the last call is dropped
    (qwen3_xml keeps text between calls, qwen3_coder drops it: dropped here)."""
    assert calls_of("  lead  \n" + xml(n=1) + "\nB\n" + xml(n=2) + "\nafter")[0] == "  lead  \n"
    assert calls_of(xml(n=1) + "\nafter")[0] is None
    assert calls_of("no call here <tool_call>\n") == ("no call here <tool_call>\n", [])


OPTIONAL = {
    "a": {"anyOf": [{"type": "integer"}, {"type": "null"}]}, "b": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "c": {"oneOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
    "d": {"anyOf": [{"type": "object"}, {"type": "null"}]}, "e": {"type": ["number", "null"]},
    "g": {"$ref": "#/$defs/G"}, "h": {"anyOf": [{"type": "boolean"}, {"type": "null"}]},
    "f": {"type": "float"}, "i": {"type": "int"}, "s": {"type": "string"}, "k": {"type": "integer"},
    "u": {"enum": [1, 2, "x"]}}
F = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": OPTIONAL}}}]


def test_anyof_oneof_and_aliases_type_values():
    """test_extract_tool_calls_anyof_type_conversion / test_anyof_parameter_not_double_encoded: the types
    of anyOf / oneOf variants, $ref as an object, the type aliases (float, int) both parsers accept."""
    text = xml("f", a=5, b=42, c='["x", "y"]', d='{"k": 1}', e="2.5", g='{"z": 1}', h="true", f="2.5", i="7", u=2)
    assert calls_of(text, F)[1] == [("f", {"a": 5, "b": "42", "c": ["x", "y"], "d": {"k": 1}, "e": 2.5,
                                           "g": {"z": 1}, "h": True, "f": 2.5, "i": 7, "u": 2})]
    nulls = xml("f", a="null", b="null", c="Null", d="NULL", e="null", k="null", s="null", u="x")
    assert calls_of(nulls, F)[1] == [("f", {"a": None, "b": None, "c": None, "d": None, "e": None, "k": None,
                                            "s": "null", "u": "x"})]  # a string-only parameter keeps "null"
    assert calls_of(xml("f", a="five", c="not a list"), F)[1] == [("f", {"a": "five", "c": "not a list"})]


@pytest.mark.parametrize("raw, want", [
    ("{'a': 1, 'b': True, 'c': None}", {"a": 1, "b": True, "c": None}),
    ("[1, 'x', None, (2, 3)]", [1, "x", None, [2, 3]]),
    ("None", None),
    ("{'a': float('nan')}", "{'a': float('nan')}"),  # calls are no literals
    ("__import__('os').getcwd()", "__import__('os').getcwd()"),
    ("{'a': 1e999}", "{'a': 1e999}"),  # not finite: not JSON
    ("{1: 'a'}", "{1: 'a'}"),  # JSON keys are strings
    ("{'a': {1, 2}}", "{'a': {1, 2}}"),  # sets are not JSON
    ("[" * 100 + "None" + "]" * 100, "[" * 100 + "None" + "]" * 100),  # nested past the bound
])
def test_python_literals_for_object_and_array_parameters(raw, want):
    """Both parsers fall back to ast.literal_eval for object / array values; here on bounded input, and
    only for what is JSON."""
    assert calls_of(xml(obj=raw))[1] == [("write", {"obj": want})]


def test_degenerate_replies_are_read_quickly():
    import time

    start = time.perf_counter()
    for text in ["<function=a>\n<parameter=b>\n" * 3000, "<tool_call>\n" * 5000, "{" * 5000 + "<tool_call>",
                 "<tool_call>\n" + "{" * 5000, xml(content="<function=x>\n<parameter=y>\nv\n</parameter>\n" * 2000)]:
        parse_tool_calls(text, TOOLS)  # returns (content, calls), never raises
    assert time.perf_counter() - start < 5  # about 0.2 s: the readings share a bounded budget of tag visits


# Streamed replies: the text is buffered while tools are active and parsed once, as the plain reply.
@pytest.fixture(scope="module", params=[False, True], ids=["tags-plain", "tags-special"])
def service(request, tmp_path_factory):
    from prover_jax.serving.chat import ChatService

    tok = SF.save_tokenizer(str(tmp_path_factory.mktemp("tok")), markup_special=request.param,
                            chat_template=chat_template())
    return ChatService(None, tok, "m", 4096)  # no engine: replies only


def test_streamed_calls_equal_the_plain_ones(service):
    reply = ("plan</think>\n\nWriting the docs.\n" + xml(path="docs.md", content=DOCS[0], n=2) +
             "\n<tool_call>\n<function=write>\n<parameter=n>\n3\n</parameter>\n<parameter=path>\nb.t")
    tokens = service.tokenizer.encode(reply, add_special_tokens=False) + [SF.EOS_ID]
    done = Completion(tokens=tokens, logprobs=[0.0] * len(tokens), finish_reason="length")
    req = P.parse_chat_request({"model": "m", "messages": [{"role": "user", "content": "q"}], "tools": TOOLS,
                                "stream": True})
    content, calls, reason, thought = service.finish(req, done, True)
    events = asyncio.Queue()
    for k in range(1, len(tokens)):
        events.put_nowait(("tokens", 0, (tokens[:k], done.logprobs[:k])))
    events.put_nowait(("done", 0, done))

    async def lines():
        return [line async for line in service._lines(req, events, 5, True, None)]

    chunks = [json.loads(x[6:])["choices"][0] for x in asyncio.run(lines()) if x != "data: [DONE]\n\n"]
    deltas = [c["delta"] for c in chunks]
    streamed = [c for d in deltas for c in d.get("tool_calls", [])]
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in streamed] == [
        (c["function"]["name"], c["function"]["arguments"]) for c in calls]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [
        {"path": "docs.md", "content": DOCS[0], "n": 2}, {"n": 3, "path": "b.t"}]
    assert "".join(d.get("content") or "" for d in deltas) == content == "Writing the docs.\n"
    assert "".join(d.get("reasoning_content", "") for d in deltas) == thought == "plan"
    assert chunks[-1]["finish_reason"] == reason == "tool_calls"


# Forced calls in the XML format: the grammar and the matcher over the tokens of a reply.
@pytest.fixture(scope="module")
def grammars(tmp_path_factory):
    pytest.importorskip("llguidance")
    from prover_jax.serving.grammar import Grammars

    return Grammars(SF.save_tokenizer(str(tmp_path_factory.mktemp("g")), chat_template=chat_template()), SF.VOCAB)


def forced(grammars, props, close_think=False):
    """(whether the forced XML call of f(props, all required) takes the tokens of a reply whole)."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": props, "required": list(props), "$defs": {"D": {"type": "integer"}}}}}]
    req = P.parse_chat_request({"model": "m", "messages": [{"role": "user", "content": "q"}], "tools": tools,
                                "tool_choice": {"type": "function", "function": {"name": "f"}}})
    factory = grammars.factory(grammars.for_request(req, close_think))

    def takes(reply, tokens=None):
        m = factory().m
        ids = tokens or grammars.hf.encode(reply, add_special_tokens=False)
        return all(m.consume_token(t) for t in ids) and not m.is_error() and m.is_accepting()
    return tools, takes


def check(grammars, props, good, bad, close_think=False):
    """Each of `good` ({key: value text}) is taken and reads back as `good`'s JSON; each of `bad` is refused."""
    tools, takes = forced(grammars, props, close_think)
    for params, want in good:
        assert takes(xml("f", **params)), params
        assert calls_of(xml("f", **params), tools) == (None, [("f", want)])
    for params in bad:
        assert not takes(xml("f", **params)), params


def test_forced_integers_stay_in_bounds(grammars):
    props = {"n": {"type": "integer", "minimum": 0, "maximum": 9}}
    check(grammars, props, [({"n": "9"}, {"n": 9}), ({"n": "0"}, {"n": 0})],
          [{"n": "10"}, {"n": "-1"}, {"n": "254"}, {"n": "-5340003"}])
    props = {"x": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}}
    check(grammars, props, [({"x": "0.5"}, {"x": 0.5})], [{"x": "0"}, {"x": "1"}, {"x": "1.5"}])


def test_forced_strings_follow_length_and_pattern(grammars):
    props = {"s": {"type": "string", "pattern": "^[a-z]+-[0-9]{2}$"}, "t": {"type": "string", "minLength": 2,
                                                                          "maxLength": 4}}
    check(grammars, props, [({"s": "abc-12", "t": "ab"}, {"s": "abc-12", "t": "ab"})],
          [{"s": "abc-1", "t": "ab"}, {"s": "Abc-12", "t": "ab"}, {"s": "abc-12", "t": "a"},
           {"s": "ab-12", "t": "abcde"}])
    check(grammars, {"s": {"type": "string", "pattern": "x[0-9]"}},  # unanchored, as JSON Schema reads it
          [({"s": "ax1b"}, {"s": "ax1b"})], [{"s": "ab"}])


def test_forced_strings_hold_lt_but_not_an_end_of_their_value(grammars):
    props = {"s": {"type": "string"}, "t": {"type": "string"}}
    good = ["<b>bold</b>", "a < b\n", "<function=u> and <parameter=u>", "", "two\nlines"]
    check(grammars, props, [({"s": v, "t": "x"}, {"s": v, "t": "x"}) for v in good],
          [{"s": v, "t": "x"} for v in ["a\n</parameter>\nb", "x</parameter>y", "see <parameter=t>"]])
    _, takes = forced(grammars, {"s": {"type": "string"}}, close_think=True)
    head, tail = "<tool_call>\n<function=f>\n<parameter=s>\na</", "think>b\n</parameter>\n</function>\n</tool_call>"
    spelt = grammars.hf.encode(head, add_special_tokens=False) + grammars.hf.encode(tail, add_special_tokens=False)
    assert not takes(None, spelt)  # `</think>`, spelt out, would end the think block the prompt opened
    assert forced(grammars, {"s": {"type": "string"}})[1](None, spelt)


def test_the_regex_of_strings_avoiding_words():
    import random
    import re

    from prover_jax.serving.grammar import avoiding

    words = ["</parameter>", "<parameter=a>", "<parameter=a.b-c>", "</think>"]
    rx, rng = re.compile(avoiding(words), re.S), random.Random(0)
    for _ in range(20000):
        s = "".join(rng.choice("<>/=parmetrhink.-bc\nx") for _ in range(rng.randint(0, 12)))
        w = rng.choice(words)
        k = rng.randint(0, len(s))
        s = s[:k] + w[:rng.randint(0, len(w))] + s[k:]
        assert (rx.fullmatch(s) is not None) == (not any(w in s for w in words)), s


def test_forced_enums_of_any_type(grammars):
    props = {"e": {"enum": [1, 2.5, True, None, "a<b"]}, "k": {"type": "integer", "enum": [3, 4]}}
    good = [({"e": "2.5", "k": "4"}, {"e": 2.5, "k": 4}), ({"e": "a<b", "k": "3"}, {"e": "a<b", "k": 3}),
            ({"e": "null", "k": "3"}, {"e": None, "k": 3}), ({"e": "true", "k": "3"}, {"e": True, "k": 3})]
    check(grammars, props, good,
          [{"e": "3", "k": "3"}, {"e": '"a<b"', "k": "3"}, {"e": "1", "k": "5"}])
    with pytest.raises(P.ApiError, match="enum"):
        forced(grammars, {"e": {"enum": ["x</parameter>"]}})


def test_forced_nested_objects_and_anyof(grammars):
    props = {"o": {"type": "object", "properties": {"a": {"type": "integer", "maximum": 3},
                                                    "b": {"type": "array", "items": {"type": "string"}}},
                   "required": ["a"], "additionalProperties": False},
             "r": {"$ref": "#/$defs/D"},
             "m": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]},
             "i": {"type": ["integer", "null"], "minimum": 1}}
    check(grammars, props, [({"o": '{"a":3,"b":["x"]}', "r": "7", "m": "a<b", "i": "2"},
                             {"o": {"a": 3, "b": ["x"]}, "r": 7, "m": "a<b", "i": 2}),
                            ({"o": '{"a":0}', "r": "0", "m": "null", "i": "null"},
                             {"o": {"a": 0}, "r": 0, "m": None, "i": None})],
          [{"o": '{"a":4}', "r": "1", "m": "x", "i": "1"}, {"o": '{"a":1}', "r": "x", "m": "x", "i": "1"},
           {"o": '{"a":1}', "r": "1", "m": "abcd", "i": "1"}, {"o": '{"a":1}', "r": "1", "m": "x", "i": "0"}])
