"""Thinking checkpoints in prover-serve: the think block split into reasoning_content (plain and while
streaming), a tool call opened inside an unterminated think block still counted, the tags kept when
they are special tokens, and chat_template_kwargs (enable_thinking) reaching the template."""

import pytest

from prover_jax.sampling.driver import Completion
from prover_jax.serving import protocol as P
from prover_jax.serving import reasoning as R
from prover_jax.serving.chat import ChatService

from helpers import serving as SF

# The helper's template with Qwen3.5's generation prompt: a think block opened, or rendered empty when
# enable_thinking is false.
THINKING_TEMPLATE = SF.CHAT_TEMPLATE.replace(
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% else %}<think>\n{% endif %}{% endif %}")
TOOL = {"type": "function", "function": {"name": "propose", "parameters": {"type": "object"}}}


@pytest.mark.parametrize("text, opened, want", [
    ("<think>\nplan\n</think>\n\nanswer", False, ("plan", "answer")),
    ("  <think>plan</think>answer", False, ("plan", "answer")),
    ("plan</think>\nanswer", True, ("plan", "answer")),
    ("plan, unfinished", True, ("plan, unfinished", "")),
    ("plan <tool_call>\n{}\n</tool_call>", True, ("plan", "<tool_call>\n{}\n</tool_call>")),
    ("answer only", False, (None, "answer only")),
    ("\n\n</think>\n\nanswer", True, ("", "answer")),
])
def test_split(text, opened, want):
    assert R.split(text, opened) == want


@pytest.mark.parametrize("text, n", [("abc</thi", 3), ("abc<", 3), ("abc<tool_c", 3), ("abc", 3), ("a>", 2), ("", 0)])
def test_hold_back(text, n):
    assert R.hold_back(text) == n


def test_opens_thinking():
    assert R.opens_thinking("<|im_start|>assistant\n<think>\n")
    assert not R.opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not R.opens_thinking("<|im_start|>assistant\n")


@pytest.fixture(scope="module", params=[False, True], ids=["tags-plain", "tags-special"])
def service(request, tmp_path_factory):
    tok = SF.save_tokenizer(str(tmp_path_factory.mktemp("tok")), markup_special=request.param,
                            chat_template=THINKING_TEMPLATE)
    return ChatService(None, tok, SF.__name__, 1024)  # no engine: rendering and replies only


def reply(service, text):
    return Completion(tokens=service.tokenizer.encode(text, add_special_tokens=False) + [SF.EOS_ID],
                      logprobs=[0.0] * (len(text) + 1), finish_reason="stop")


def request(**kw):
    return P.parse_chat_request({"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw})


def test_enable_thinking_reaches_the_template(service):
    ids, opened = service.render(request())
    assert opened and service.tokenizer.decode(ids).endswith("<think>\n")
    ids, opened = service.render(request(chat_template_kwargs={"enable_thinking": False}))
    assert not opened and service.tokenizer.decode(ids).endswith("<think>\n\n</think>\n\n")
    with pytest.raises(P.ApiError, match="may not set tools"):
        request(chat_template_kwargs={"tools": []})
    with pytest.raises(P.ApiError, match="chat_template_kwargs must be an object"):
        request(chat_template_kwargs=["enable_thinking"])


def test_reasoning_is_split_from_the_answer(service):
    assert service.reasoning
    content, calls, reason, thought = service.finish(request(), reply(service, "weigh it</think>\n\nIt is 4."), True)
    assert (content, calls, reason, thought) == ("It is 4.", [], "stop", "weigh it")
    # thinking off: the prompt closed the block; a reply without one has no reasoning
    assert service.finish(request(), reply(service, "It is 4."), False)[3] is None


@pytest.mark.parametrize("call", [
    '<tool_call>\n{"name": "propose", "arguments": {"start": 3}}\n</tool_call>',
    "<tool_call>\n<function=propose>\n<parameter=start>\n3\n</parameter>\n</function>\n</tool_call>",
], ids=["json", "xml"])
def test_a_tool_call_inside_an_unterminated_think_block_counts(service, call):
    req = request(tools=[TOOL], tool_choice="auto")
    content, calls, reason, thought = service.finish(req, reply(service, "look at turn 3 " + call), True)
    assert thought == "look at turn 3" and reason == "tool_calls"
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [("propose", '{"start": 3}')]
    assert not content


def test_streamed_reasoning_then_content(service):
    import asyncio
    import json

    done = reply(service, "weigh </ it</think>\n\nIt is 4.")
    events = asyncio.Queue()
    for k in range(1, len(done.tokens)):  # the tokens as the engine reads them, one at a time
        events.put_nowait(("tokens", 0, (done.tokens[:k], done.logprobs[:k])))
    events.put_nowait(("done", 0, done))

    async def lines():
        return [line async for line in service._lines(request(stream=True), events, 5, True, None)]

    deltas = [json.loads(x[6:])["choices"][0]["delta"] for x in asyncio.run(lines()) if x != "data: [DONE]\n\n"]
    thought = "".join(d.get("reasoning_content", "") for d in deltas)
    content = "".join(d.get("content", "") for d in deltas)
    assert (thought, content) == ("weigh </ it", "It is 4.")
    assert not any("<" in d.get("content", "") for d in deltas)  # no piece of a tag leaks into the answer
    first_content = next(i for i, d in enumerate(deltas) if d.get("content"))
    assert all("reasoning_content" not in d for d in deltas[first_content:])


def stream(service, done, opened):
    """(reasoning, content) as the streamed deltas of `done` (read one token at a time) add them up."""
    import asyncio
    import json

    events = asyncio.Queue()
    for k in range(1, len(done.tokens)):
        events.put_nowait(("tokens", 0, (done.tokens[:k], done.logprobs[:k])))
    events.put_nowait(("done", 0, done))

    async def lines():
        return [line async for line in service._lines(request(stream=True), events, 5, opened, None)]

    deltas = [json.loads(x[6:])["choices"][0]["delta"] for x in asyncio.run(lines()) if x != "data: [DONE]\n\n"]
    return "".join(d.get("reasoning_content", "") for d in deltas), "".join(d.get("content", "") for d in deltas)


def test_a_tag_mentioned_while_thinking_without_tools_stays_reasoning(service):
    """Without tools a `<tool_call>` in the think block is text: the streamed content used to take it, then
    the answer after `</think>` too."""
    done = reply(service, "no <tool_call> here</think>\n\nIt is 4.")
    content, _, _, thought = service.finish(request(), done, True)
    assert (thought, content) == ("no <tool_call> here", "It is 4.") == stream(service, done, True)
    unterminated = reply(service, "no <tool_call> here, still thinking")
    assert service.finish(request(), unterminated, True)[::3] == ("", "no <tool_call> here, still thinking")


# Qwen3's shape: the generation prompt opens no think block (the model writes <think> itself) and earlier
# turns' reasoning_content is rendered inside one.
QWEN3_TEMPLATE = SF.CHAT_TEMPLATE.replace(
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n",
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n"
    "{% if m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n{% endif %}")


@pytest.fixture
def qwen3(tmp_path):
    return ChatService(None, SF.save_tokenizer(str(tmp_path), chat_template=QWEN3_TEMPLATE), SF.__name__, 1024)


def test_earlier_reasoning_reaches_the_template(qwen3):
    msgs = [{"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "4", "reasoning_content": "add"},
            {"role": "user", "content": "and 3 + 3?"}]
    ids, _ = qwen3.render(request(messages=msgs))
    assert "<|im_start|>assistant\n<think>\nadd\n</think>\n\n4<|im_end|>" in qwen3.tokenizer.decode(ids)


def test_a_think_tag_in_the_messages_opens_nothing(qwen3):
    """Only the generation prompt can open the block: a user's `<think>` used to make the answer reasoning."""
    ids, opened = qwen3.render(request(messages=[{"role": "user", "content": "What is the <think> tag for?"}]))
    assert not opened
    assert qwen3.finish(request(), reply(qwen3, "It marks reasoning."), opened)[::3] == ("It marks reasoning.", None)
