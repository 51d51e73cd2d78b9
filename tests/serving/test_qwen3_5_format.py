"""Qwen3.5's formats on a served random model (its tool-call and thinking template):
- forced tool calls in XML: a chat template showing `<function=` gets forced calls constrained to
  `<function=NAME><parameter=KEY>VALUE</parameter></function>` (typed by the schema); they come back as
  schema-valid `tool_calls`, 10 of 10;
- max_thinking_tokens closes the think block the generation prompt opened;
- a response_format with thinking on closes the think block first: the JSON is the content."""

import json

import openai
import pytest

from prover_jax.judges.tools import tool_specs

from helpers import serving as SF
from helpers.qwen_vocab import chat_template

MODEL = "tiny-qwen-xml"
MSGS = [{"role": "user", "content": "Propose the segment."}]


@pytest.fixture(scope="module", params=[False, True], ids=["tags-plain", "tags-special"])
def served(request, tmp_path_factory):
    """The server, with <tool_call> / <think> plain added tokens or special ones (which decoding used to
    drop, turning every forced call into content)."""
    path = SF.make_serving_checkpoint(str(tmp_path_factory.mktemp("xml")))
    SF.save_tokenizer(path, markup_special=request.param, chat_template=chat_template())  # XML tool calls
    yield from SF.serve_folder(path, MODEL, max_prefill_length=256, max_concurrent_decodes=10,
                               max_target_length=4096, max_pending=4, max_string_chars=24)


def test_the_format_is_read_from_the_template(served):
    assert served[0].grammars.tool_call_format == "qwen3_xml"


def test_forced_xml_calls_are_schema_valid(served):
    service, client = served
    tools = tool_specs(4)
    schema = tools[2]["function"]["parameters"]
    r = client.chat.completions.create(model=MODEL, messages=MSGS, tools=tools, temperature=1.0, seed=3, n=10,
                                       max_tokens=600,
                                       tool_choice={"type": "function", "function": {"name": "propose_segment"}})
    assert len(r.choices) == 10
    for choice in r.choices:
        assert choice.finish_reason == "tool_calls", choice.message.content
        [call] = choice.message.tool_calls
        args = json.loads(call.function.arguments)
        assert call.function.name == "propose_segment" and set(args) == set(schema["required"]), args
        assert isinstance(args["start_turn"], int) and isinstance(args["end_turn"], int), args
        assert isinstance(args["failure_mode"], str) and isinstance(args["rationale"], str), args
    # 'required': any one of the tools, in XML, streamed as one tool_calls delta
    chunks = list(client.chat.completions.create(model=MODEL, messages=MSGS, tools=tools, temperature=1.0, seed=4,
                                                 max_tokens=600, tool_choice="required", stream=True))
    [[streamed]] = [c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert streamed.function.name in [t["function"]["name"] for t in tools]
    assert isinstance(json.loads(streamed.function.arguments), dict)


def test_max_thinking_tokens_closes_the_think_block(served):
    """The template opens <think>; a random model rarely closes it, so without a budget the whole reply is
    reasoning. With max_thinking_tokens=5 the block ends after at most 5 tokens and the answer follows."""
    service, client = served
    tok = service.tokenizer

    def ask(**kw):
        return client.chat.completions.create(model=MODEL, messages=MSGS, temperature=1.0, seed=5, n=4,
                                              max_tokens=40, **kw).choices

    def think_tokens(choice):  # generated tokens before </think> (all of them when it never came)
        tokens = [e.token for e in choice.logprobs.content]
        return tokens.index("</think>") if "</think>" in tokens else len(tokens)

    assert max(think_tokens(c) for c in ask(logprobs=True)) > 5
    for c in ask(logprobs=True, extra_body={"max_thinking_tokens": 5}):
        assert think_tokens(c) <= 5 and c.message.reasoning_content is not None, c.logprobs.content
        tokens = [e.token for e in c.logprobs.content]
        assert tokens[think_tokens(c):think_tokens(c) + 3] == ["</think>", "\n", "\n"]  # closed, then a blank line
    with pytest.raises(openai.BadRequestError, match="max_thinking_tokens"):
        ask(extra_body={"max_thinking_tokens": -1})


def test_response_format_with_thinking_on_is_content(served):
    """The generation prompt opens <think> (thinking on by default); the JSON grammar closes it first, so
    the JSON comes back as content (before, it was constrained inside the block: all reasoning)."""
    service, client = served
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
              "additionalProperties": False}
    ask = dict(model=MODEL, messages=MSGS, temperature=1.0, seed=1, max_tokens=60,
               response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    for choice in client.chat.completions.create(n=2, **ask).choices:
        assert isinstance(json.loads(choice.message.content)["a"], int), choice.message
        assert choice.message.reasoning_content == "" and choice.finish_reason == "stop"
    chunks = list(client.chat.completions.create(stream=True, **ask))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert isinstance(json.loads(text)["a"], int)
    r = client.chat.completions.create(response_format={"type": "json_object"},
                                       **{k: v for k, v in ask.items() if k != "response_format"})
    assert isinstance(json.loads(r.choices[0].message.content), dict)
