"""prover-serve against the official `openai` client: chat completions (plain, streamed, n > 1, seeds,
stop strings, usage), greedy output equal to prover-generate's on the same rendered prompt, tool-call
parsing, and errors in OpenAI's shape (400 / 404 / 503) after which the server keeps serving."""

import json

import httpx
import openai
import pytest
from absl import flags

from prover_jax.serving.app import create_app
from prover_jax.serving.service import ServerThread, build_service
from prover_jax.serving.tools import parse_tool_calls

from helpers import serving as SF
from helpers.serving import judge_traj

MODEL = "tiny-qwen"
MAX_TARGET = 4096
# Free-text strings of constrained output end after this many characters. Small: the byte-level test
# tokenizer spends up to 4 tokens on a character, and the random model rarely closes a string itself.
MAX_STRING_CHARS = 24
HELLO = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from SF.serve(str(tmp_path_factory.mktemp("serve")), MODEL, max_concurrent_decodes=4,
                        max_target_length=MAX_TARGET, max_pending=8, max_string_chars=MAX_STRING_CHARS)


@pytest.fixture(scope="module")
def client(server):
    yield from SF.openai_client(server[2])


def chat(client, **kw):
    args = dict(model=MODEL, messages=HELLO, temperature=0, max_tokens=8)
    args.update(kw)
    return client.chat.completions.create(**args)


def test_models(client):
    assert [m.id for m in client.models.list().data] == [MODEL]


def test_completion_and_usage(server, client):
    service = server[1]
    r = chat(client)
    [choice] = r.choices
    assert r.object == "chat.completion" and r.model == MODEL and choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.finish_reason in ("stop", "length")
    rendered = service.tokenizer.apply_chat_template(HELLO, add_generation_prompt=True, tokenize=False)
    assert rendered.endswith("<|im_start|>assistant\n")
    n_prompt = len(service.tokenizer.encode(rendered, add_special_tokens=False))
    assert r.usage.prompt_tokens == n_prompt
    assert 1 <= r.usage.completion_tokens <= 8
    assert r.usage.total_tokens == n_prompt + r.usage.completion_tokens
    if choice.finish_reason == "length":
        assert r.usage.completion_tokens == 8


def test_greedy_equals_prover_generate(server, client, capsys):
    from prover_jax.sampling import cli

    path, service = server[0], server[1]
    r = chat(client, max_tokens=10)
    rendered = service.tokenizer.apply_chat_template(HELLO, add_generation_prompt=True, tokenize=False)
    ids = service.tokenizer.encode(rendered, add_special_tokens=False)
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["prover-generate", f"--model={path}", "--prompt_ids=" + ",".join(map(str, ids)),
                 "--max_new_tokens=10"])
    try:
        assert cli.main(["prover-generate"]) == 0
    finally:
        flags.FLAGS.unparse_flags()
    [line] = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.strip()]
    assert r.usage.completion_tokens == len(line["tokens"])
    assert r.choices[0].message.content == service.tokenizer.decode(line["tokens"], skip_special_tokens=True)
    assert r.choices[0].finish_reason == {"stop": "stop", "length": "length"}[line["finish_reason"]]


def test_streaming_matches_plain(client):
    plain = chat(client, max_tokens=12)
    chunks = list(chat(client, max_tokens=12, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert text == plain.choices[0].message.content
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == [plain.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == plain.usage.prompt_tokens


def test_n_and_seeds(client):
    a = chat(client, n=3, temperature=1.0, seed=11, max_tokens=10)
    b = chat(client, n=3, temperature=1.0, seed=11, max_tokens=10)
    c = chat(client, n=3, temperature=1.0, seed=12, max_tokens=10)
    texts = lambda r: [ch.message.content for ch in sorted(r.choices, key=lambda ch: ch.index)]
    assert [ch.index for ch in a.choices] == [0, 1, 2]
    assert texts(a) == texts(b)  # a seed reproduces every sample
    assert texts(a) != texts(c)
    assert len(set(texts(a))) > 1  # the n samples differ from each other
    assert a.usage.completion_tokens == b.usage.completion_tokens
    assert a.usage.prompt_tokens == chat(client).usage.prompt_tokens  # the prompt counts once


def test_stop_string(client):
    full = chat(client, max_tokens=16).choices[0].message.content
    k = next(i for i in range(2, len(full)) if full[i].isascii() and full[i].isprintable()
             and full[i] not in full[:i])
    r = chat(client, max_tokens=16, stop=[full[k]])
    assert r.choices[0].message.content == full[:k]
    assert r.choices[0].finish_reason == "stop"
    streamed = "".join(c.choices[0].delta.content or "" for c in chat(client, max_tokens=16, stop=full[k], stream=True)
                       if c.choices)
    assert streamed == full[:k]


# Tool-call parsing of hand-written Qwen-format outputs.
def test_parse_one_call():
    content, calls = parse_tool_calls('<tool_call>\n{"name": "get_segment", "arguments": {"traj_id": 0, '
                                      '"start_turn": 1, "end_turn": 2}}\n</tool_call>')
    assert content is None
    [c] = calls
    assert c["type"] == "function" and c["id"].startswith("call_") and c["function"]["name"] == "get_segment"
    assert json.loads(c["function"]["arguments"]) == {"traj_id": 0, "start_turn": 1, "end_turn": 2}


def test_parse_several_calls_and_text():
    text = ('Let me look.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
            '<tool_call>{"name": "b", "arguments": "{\\"y\\": [2]}"}</tool_call>')
    content, calls = parse_tool_calls(text)
    assert content == "Let me look.\n"  # the text before the first call, as vLLM's parsers return it
    assert [c["function"]["name"] for c in calls] == ["a", "b"]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"x": 1}, {"y": [2]}]
    assert len({c["id"] for c in calls}) == 2


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": "a", "arguments": {"x": 1}</tool_call>',  # bad JSON
    '<tool_call>{"arguments": {}}</tool_call>',  # no name
    '<tool_call>{"name": "a", "arguments": [1]}</tool_call>',  # arguments not an object
    '<tool_call>{"name": "a", "arguments": {"x": 1}}',  # unterminated (cut by max_tokens)
    'no calls at all',
])
def test_parse_malformed_is_content(text):
    assert parse_tool_calls(text) == (text, [])


def test_parse_keeps_malformed_next_to_good():
    bad = '<tool_call>{oops}</tool_call>'
    content, calls = parse_tool_calls(bad + '<tool_call>{"name": "a", "arguments": {}}</tool_call>')
    assert content == bad and [c["function"]["name"] for c in calls] == ["a"]


# Errors.
def error_of(exc):
    body = exc.response.json()
    assert set(body) == {"error"} and {"message", "type", "param", "code"} <= set(body["error"])
    return body["error"]


@pytest.mark.parametrize("kw, status, needle", [
    (dict(messages=[{"role": "wizard", "content": "hi"}]), 400, "unknown role"),
    (dict(model="no-such-model"), 404, "does not exist"),
    (dict(messages=[{"role": "user", "content": "x" * MAX_TARGET}]), 400, f"maximum context length is {MAX_TARGET}"),
    (dict(max_tokens=MAX_TARGET), 400, f"maximum context length is {MAX_TARGET}"),
    (dict(temperature=7), 400, "temperature"),
    (dict(tool_choice={"type": "function", "function": {"name": "nope"}},
          tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]), 400, "nope"),
    (dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": 5}}), 400, "schema"),
    (dict(messages=[{"role": "user", "content": "hi"}, {"role": "system", "content": "late"}]), 400, "template"),
])
def test_bad_requests_then_serving(client, kw, status, needle):
    with pytest.raises(openai.APIStatusError) as info:
        chat(client, **kw)
    assert info.value.status_code == status
    err = error_of(info.value)
    assert needle in err["message"]
    assert chat(client).choices[0].message.content is not None  # the server keeps serving


def test_bad_json_body(server, client):
    r = httpx.post(server[2].base_url + "/chat/completions", content=b"{not json", timeout=30,
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.get(server[2].base_url + "/nothing-here", timeout=30)
    assert r.status_code == 404 and "error" in r.json()
    assert chat(client).choices


def test_overload_503_then_serving(server, client):
    worker = server[1].worker
    worker.max_pending = 0
    try:
        with pytest.raises(openai.APIStatusError) as info:
            chat(client)
        assert info.value.status_code == 503
        assert info.value.response.headers["retry-after"] == "1"
        assert error_of(info.value)["code"] == "overloaded"
    finally:
        worker.max_pending = 8
    assert chat(client).choices


def test_concurrent_requests_are_batched(server, client):
    from concurrent.futures import ThreadPoolExecutor

    stats = server[1].worker.driver.stats
    before = stats["admitted"]
    with ThreadPoolExecutor(6) as pool:
        outs = list(pool.map(lambda i: chat(client, temperature=1.0, seed=i, max_tokens=12), range(6)))
    assert len(outs) == 6 and all(o.choices[0].message.content is not None for o in outs)
    assert stats["admitted"] - before == 6
    # the same seeds alone give the same texts: batching does not change a request's samples
    assert chat(client, temperature=1.0, seed=3, max_tokens=12).choices[0].message.content == \
        outs[3].choices[0].message.content


# Constrained decoding (llguidance bitmasks applied inside the engine's sampling).
def test_forced_propose_segment_is_schema_valid(client):
    from prover_jax.judges.tools import tool_specs

    tools = tool_specs(4)
    schema = tools[2]["function"]["parameters"]
    msgs = [{"role": "user", "content": "Propose the segment."}]
    r = chat(client, messages=msgs, tools=tools, temperature=1.0, seed=1, max_tokens=1500,
             tool_choice={"type": "function", "function": {"name": "propose_segment"}})
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice.message.content
    [call] = choice.message.tool_calls
    assert call.function.name == "propose_segment" and call.id.startswith("call_")
    args = json.loads(call.function.arguments)
    assert set(args) == set(schema["required"]) == set(schema["properties"])
    assert isinstance(args["start_turn"], int) and isinstance(args["end_turn"], int)
    assert isinstance(args["failure_mode"], str) and isinstance(args["rationale"], str)
    # tool_choice 'required' picks one of the tools, with that tool's schema; streamed as tool_calls
    chunks = list(chat(client, messages=msgs, tools=tools, temperature=1.0, seed=2, max_tokens=1500,
                       tool_choice="required", stream=True))
    deltas = [c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    [[streamed]] = deltas
    assert streamed.function.name in [t["function"]["name"] for t in tools]
    assert isinstance(json.loads(streamed.function.arguments), dict)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_json_schema_response(client):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}},
              "required": ["ok", "n"], "additionalProperties": False}
    r = chat(client, temperature=1.0, seed=4, max_tokens=200, n=2,
             response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    for choice in r.choices:
        value = json.loads(choice.message.content)
        assert set(value) == {"ok", "n"} and isinstance(value["ok"], bool) and isinstance(value["n"], int)
        assert choice.finish_reason == "stop"
    r = chat(client, temperature=0, max_tokens=300, response_format={"type": "json_object"})
    assert r.choices[0].finish_reason == "stop" and isinstance(json.loads(r.choices[0].message.content), dict)


def test_unsupported_schema_is_400(client):
    with pytest.raises(openai.BadRequestError) as info:
        chat(client, response_format={"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "frobnicate"}}}}})
    assert "frobnicate" in error_of(info.value)["message"]
    assert chat(client).choices


def schema_errors(value, schema, where="$"):
    """What in `value` breaks `schema` (the keywords the judge's tools use), [] when it conforms."""
    kind = schema.get("type")
    checks = {"object": lambda v: isinstance(v, dict), "string": lambda v: isinstance(v, str),
              "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
              "boolean": lambda v: isinstance(v, bool), "array": lambda v: isinstance(v, list)}
    if kind is not None and not checks[kind](value):
        return [f"{where}: {value!r} is not of type {kind}"]
    errors = []
    if "const" in schema and value != schema["const"]:
        errors.append(f"{where}: {value!r} != {schema['const']!r}")
    if kind == "string" and len(value) > schema.get("maxLength", len(value)):
        errors.append(f"{where}: longer than {schema['maxLength']}")
    if kind == "object":
        props = schema.get("properties", {})
        errors += [f"{where}: missing {k}" for k in schema.get("required", []) if k not in value]
        if schema.get("additionalProperties") is False:
            errors += [f"{where}: unexpected {k}" for k in value if k not in props]
        for k, v in value.items():
            if k in props:
                errors += schema_errors(v, props[k], f"{where}.{k}")
    return errors


def test_bound_strings():
    from prover_jax.serving.grammar import bound_strings

    schema = {"type": "object", "properties": {
        "a": {"type": "string"}, "b": {"type": "string", "maxLength": 500}, "c": {"enum": ["x", "y"]},
        "d": {"type": "array", "items": {"type": ["string", "null"]}}, "e": {"type": "string", "pattern": "^z+$"},
        "f": {"anyOf": [{"$ref": "#/$defs/s"}, {"type": "integer"}]}, "g": {"not": {"type": "string"}}},
        "$defs": {"s": {"type": "string", "minLength": 40}}}
    out = bound_strings(schema, 30)
    p = out["properties"]
    assert p["a"]["maxLength"] == 30 and p["b"]["maxLength"] == 500  # the schema's own bound wins
    assert p["d"]["items"]["maxLength"] == 30 and out["$defs"]["s"]["maxLength"] == 40  # >= minLength
    assert "maxLength" not in p["e"] and p["c"] == schema["properties"]["c"] and p["g"] == schema["properties"]["g"]
    assert "maxLength" not in schema["properties"]["a"]  # a copy
    assert bound_strings(schema, 0) is schema and bound_strings(5, 30) == 5


def test_forced_propose_segment_fits_a_small_budget(client):
    """A forced propose_segment call from the random model ends (tool_calls) within max_tokens=256:
    compact JSON, free-text strings bounded by the server; the arguments follow the tool's schema."""
    from prover_jax.judges.tools import tool_specs

    tools = tool_specs(4)
    schema = tools[2]["function"]["parameters"]
    bounded = {**schema, "properties": {k: {**v, "maxLength": MAX_STRING_CHARS} if v["type"] == "string" else v
                                        for k, v in schema["properties"].items()}}
    forced = {"type": "function", "function": {"name": "propose_segment"}}
    r = chat(client, messages=[{"role": "user", "content": "Propose the segment."}], tools=tools, n=3,
             temperature=1.0, seed=5, max_tokens=256, tool_choice=forced)
    for choice in r.choices:
        assert choice.finish_reason == "tool_calls", choice.message.content
        [call] = choice.message.tool_calls
        args = json.loads(call.function.arguments)
        assert call.function.name == "propose_segment" and schema_errors(args, bounded) == [], args
    assert r.usage.completion_tokens <= 3 * 256
    # no free whitespace: the raw JSON text is the compact dump of its value
    numbers = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "array", "items":
               {"type": "boolean"}}}, "required": ["a", "b"], "additionalProperties": False}
    r = chat(client, temperature=1.0, seed=6, max_tokens=256,
             response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": numbers}})
    text = r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop" and schema_errors(json.loads(text), numbers) == []
    assert text == json.dumps(json.loads(text), separators=(",", ":"))


def test_openai_judge_end_to_end(server):
    """The openai judge (tool_choice required) on prover-serve: a valid proposal or a counted drop."""
    import numpy as np

    from prover_jax.judges import JUDGE_ERROR, NO_TOOL_CALL
    from prover_jax.judges import base as B
    from prover_jax.judges.openai_judge import OpenAIJudge

    success = judge_traj([("go to sinkbasin 1", "You see a mug 1."), ("take mug 1", "You pick up the mug 1."),
                          ("clean mug 1", "You clean the mug 1."), ("go to cabinet 1", "You arrive."),
                          ("put mug 1 in cabinet 1", "Done.")], True)
    failures = [judge_traj([("go to cabinet 1", "You arrive."), ("close cabinet 1", "It locks.")], False),
                judge_traj([("take cup 1", "You pick up the cup 1."), ("put cup 1 in cabinet 1", "Wrong.")], False)]
    # the judge's brief and tool schemas alone are ~3k byte-level tokens: a server with a longer context
    service = build_service(server[0], served_model_name=MODEL, max_concurrent_decodes=2, max_target_length=8192,
                            max_prefill_length=512, max_pending=4, dtype="float32", max_string_chars=MAX_STRING_CHARS)
    srv = ServerThread(create_app(service)).start()
    judge = OpenAIJudge(model=MODEL, base_url=srv.base_url, tool_choice="required", cache=False,
                        max_tool_rounds=1, max_repairs=1, preview_chars=300, timeout_s=300, max_retries=0)
    try:
        p = judge.propose(success, failures, max_segment_turns=2, rng=np.random.default_rng(0))
    finally:
        judge.close()
        srv.stop()
        service.worker.stop()
    known = {B.SCHEMA, B.OUT_OF_BOUNDS, B.TOO_LONG, B.TERMINAL, B.INVALID_ACTION, B.NO_PROPOSAL, B.TIMEOUT,
             B.RATE_LIMITED, B.API_ERROR, B.BUDGET}
    if p.ok:
        assert B.validate_segment(success, *p.segment, 2) is None
    else:  # a weak model's answer is dropped with a reason, counted in the step's judge metrics
        assert p.reason in known and p.segment is None, p
        assert B.summarize([p])[f"drop/{p.reason}"] == 1.0
    assert p.reason not in (JUDGE_ERROR, NO_TOOL_CALL), p  # required: every reply was a tool call
    assert 1 <= p.calls <= 2 and p.input_tokens > 0 and p.output_tokens > 0, p
    print(p)


def test_responses_validate_against_the_openai_packages_models(server):
    """Raw responses validated strictly by the openai package's own models (its client does not validate):
    the model list, plain, n > 1 with log-probs, a forced tool call, every streamed chunk with usage."""
    from openai.types import Model
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    from prover_jax.judges.tools import tool_specs
    forced = {"type": "function", "function": {"name": "propose_segment"}}
    with httpx.Client(base_url=server[2].base_url, timeout=120) as http:
        models = http.get("/models").json()
        assert [Model.model_validate(m, strict=True).id for m in models["data"]] == [MODEL]
        bodies = [dict(messages=HELLO, max_tokens=6, temperature=0),
                  dict(messages=HELLO, max_tokens=6, temperature=1.0, seed=3, n=2, logprobs=True),
                  dict(messages=HELLO, tools=tool_specs(4), max_tokens=1500, temperature=1.0, seed=1,
                       tool_choice=forced)]
        for body in bodies:
            r = http.post("/chat/completions", json={"model": MODEL, **body})
            assert r.status_code == 200, r.text
            ChatCompletion.model_validate(r.json(), strict=True)
        with http.stream("POST", "/chat/completions", json={"model": MODEL, **bodies[0], "stream": True,
                                                             "stream_options": {"include_usage": True}}) as r:
            lines = [line[len("data: "):] for line in r.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "[DONE]"
        chunks = [ChatCompletionChunk.model_validate(json.loads(x), strict=True) for x in lines[:-1]]
        assert chunks[-1].usage is not None and chunks[-1].choices == []
