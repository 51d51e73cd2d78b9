"""The agentic openai judge driven through the REAL openai client against a scripted mock endpoint."""

import glob
import json
import os

import httpx
import numpy as np
import pytest

from prover_jax.judges import (API_ERROR, BUDGET, INVALID_ACTION, NO_CANDIDATE, NO_PROPOSAL, NO_TOOL_CALL,
                               RATE_LIMITED, TIMEOUT, make_judge)
from prover_jax.judges.openai_judge import OpenAIJudge, is_self_hosted
from prover_jax.rollout.trajectory import Trajectory, Turn
from prover_jax.training.config import default_config

LOCAL = "http://localhost:8000/v1"


def make_traj(steps, success, valid=None):
    valid = valid or [True] * len(steps)
    turns = [Turn(0, 0, f"<action>{a}</action>", a if v else None, v, o, 0.0, "stop")
             for (a, o), v in zip(steps, valid)]
    return Trajectory(env="household", seed=3, uid=0, task="Your task is to: put a clean mug in cabinet 1.",
                      turns=turns, snapshots=list(range(len(steps) + 1)), success=success,
                      score=float(success), termination="done")


SUCCESS = make_traj([("go to sinkbasin 1", "You arrive at sinkbasin 1. You see a mug 1 and a cup 1."),
                     ("take mug 1 from sinkbasin 1", "You pick up the mug 1."),
                     ("clean mug 1 with sinkbasin 1", "You clean the mug 1."),
                     ("fly", "Nothing happens."),
                     ("go to cabinet 1", "You arrive at cabinet 1."),
                     ("put mug 1 in/on cabinet 1", "You put the mug 1 in/on the cabinet 1.")], True,
                    valid=[True, True, True, False, True, True])
FAILURES = [make_traj([("go to sinkbasin 1", "You arrive at sinkbasin 1. You see a mug 1 and a cup 1."),
                       ("take cup 1 from sinkbasin 1", "You pick up the cup 1."),
                       ("go to cabinet 1", "You arrive at cabinet 1."),
                       ("put cup 1 in/on cabinet 1", "You put the cup 1 in/on the cabinet 1. Wrong.")],
                      False),
            make_traj([("go to cabinet 1", "You arrive at cabinet 1."), ("close cabinet 1", "It locks for good.")],
                      False),
            make_traj([("go to sinkbasin 1", "You arrive at sinkbasin 1."),
                       ("take cup 1 from sinkbasin 1", "You pick up the cup 1."),
                       ("put cup 1 in/on cabinet 1", "Nothing happens.")], False)]


def call(name, **args):
    return name, json.dumps(args)


def reply(*calls, content=None, usage=(100, 10)):
    """A chat.completions response body; calls = (name, arguments JSON text) pairs."""
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
                                 for i, (n, a) in enumerate(calls)]
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "judge-model",
            "choices": [{"index": 0, "finish_reason": "tool_calls" if calls else "stop", "message": message}],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                      "total_tokens": usage[0] + usage[1]}}


class Server:
    """Scripted endpoint: each entry is a response body (dict), an int HTTP status, or an exception
    to raise; the last entry repeats forever. Records every request body."""

    def __init__(self, *script):
        self.script, self.requests = list(script), []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(json.loads(request.content))
        item = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(item, Exception):
            raise item
        if isinstance(item, int):
            return httpx.Response(item, json={"error": {"message": f"status {item}", "type": "x"}})
        return httpx.Response(200, json=item)


def judge_for(server, delays=None, **kw):
    kw = {"model": "judge-model", "base_url": LOCAL, "max_retries": 2, "backoff_base_s": 0.01,
          "usd_per_m_input": 2.0, "usd_per_m_output": 8.0, "cache": False, **kw}
    return OpenAIJudge(http_client=httpx.Client(transport=httpx.MockTransport(server)),
                       sleep=(delays.append if delays is not None else (lambda s: None)), **kw)


def run(judge, k=2):
    return judge.propose(SUCCESS, FAILURES, max_segment_turns=k, rng=np.random.default_rng(0))


def tool_results(request):
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def test_search_get_segment_then_propose():
    server = Server(reply(call("search_trajectory", query="cup cabinet", k=3), usage=(100, 10)),
                    reply(call("get_segment", traj_id=0, start_turn=1, end_turn=3), usage=(200, 20)),
                    reply(call("propose_segment", start_turn=1, end_turn=2, failure_mode="takes the cup decoy",
                               rationale="takes and cleans the mug"), usage=(300, 30)))
    p = run(judge_for(server))
    assert p.ok and p.segment == (1, 2) and p.reason == "ok" and p.repairs == 0 and not p.cached
    assert p.failure_mode == "takes the cup decoy" and p.rationale == "takes and cleans the mug"
    assert (p.calls, p.input_tokens, p.output_tokens) == (3, 600, 60)
    assert p.cost_usd == pytest.approx(600 / 1e6 * 2.0 + 60 / 1e6 * 8.0)
    first = server.requests[0]
    assert first["model"] == "judge-model" and [t["function"]["name"] for t in first["tools"]] == [
        "search_trajectory", "get_segment", "propose_segment"]
    system, user = first["messages"][0]["content"], first["messages"][1]["content"]
    assert "at most 2 turn(s)" in system and "end_turn <= 4" in system
    assert "[turn 3] (INVALID)" in user and "### failed run 2" in user
    assert "t1: take cup 1 from sinkbasin 1" in user
    [search] = tool_results(server.requests[1])
    assert "failed run 0, turn 3: action: put cup 1 in/on cabinet 1" in search
    segment = tool_results(server.requests[2])[1]
    assert "failed run 0, turns 1..3" in segment and "[turn 2] (valid) action: go to cabinet 1" in segment
    # the assistant's tool calls are echoed back with their ids, the results answer them
    assert server.requests[2]["messages"][2]["tool_calls"][0]["id"] == "call_0"
    assert server.requests[2]["messages"][3]["tool_call_id"] == "call_0"


def test_tool_errors_are_results_not_exceptions():
    server = Server(reply(call("get_segment", traj_id=7, start_turn=0, end_turn=1),
                          call("get_segment", traj_id=1, start_turn=1, end_turn=5),
                          ("get_segment", "{broken"), call("search_trajectory", query="the", k=2),
                          call("search_trajectory", query="zebra", k="x"), call("dance")),
                    reply(call("propose_segment", start_turn=1, end_turn=1, failure_mode="m", rationale="r")))
    p = run(judge_for(server))
    assert p.ok and p.repairs == 0
    results = tool_results(server.requests[1])
    assert "traj_id 7 does not exist" in results[0] and "has turns 0..1" in results[1]
    assert "not valid JSON" in results[2] and "no searchable words" in results[3]
    assert "k must be an integer" in results[4] and "unknown tool 'dance'" in results[5]


def test_repairs_out_of_bounds_then_terminal_then_valid():
    server = Server(reply(call("propose_segment", start_turn=0, end_turn=9, failure_mode="m", rationale="r")),
                    reply(call("propose_segment", start_turn=4, end_turn=5, failure_mode="m", rationale="r")),
                    reply(call("propose_segment", start_turn=2, end_turn=2, failure_mode="m", rationale="r")))
    p = run(judge_for(server))
    assert p.ok and p.segment == (2, 2) and p.repairs == 2 and p.calls == 3
    assert "REJECTED (out_of_bounds)" in tool_results(server.requests[1])[0]
    assert "REJECTED (terminal)" in tool_results(server.requests[2])[1]


def test_dropped_after_max_repairs_with_the_last_reason():
    server = Server(reply(call("propose_segment", start_turn=5, end_turn=5, failure_mode="m", rationale="r")),
                    reply(call("propose_segment", start_turn=3, end_turn=3, failure_mode="m", rationale="r")))
    p = run(judge_for(server, max_repairs=3))
    assert p.reason == INVALID_ACTION and p.segment is None and p.repairs == 3 and p.calls == 4
    assert len(server.requests) == 4


def test_invalid_proposals_of_one_reply_cost_one_repair():
    bad = [call("propose_segment", start_turn=l, end_turn=r, failure_mode="m", rationale="r")
           for l, r in ((5, 5), (3, 3), (0, 9), (4, 5))]
    server = Server(reply(*bad), reply(call("propose_segment", start_turn=1, end_turn=1, failure_mode="m",
                                            rationale="r")))
    p = run(judge_for(server, max_repairs=3))
    assert p.ok and p.segment == (1, 1) and p.repairs == 1 and p.calls == 2
    results = tool_results(server.requests[1])
    assert len(results) == 4 and all("REJECTED" in x and "repair 1 of 3" in x for x in results)


def test_malformed_arguments_are_repaired():
    server = Server(reply(("propose_segment", '{"start_turn": 1, "end_turn": ')),
                    reply(("propose_segment", '{"start_turn": "one", "end_turn": 1}')),
                    reply(("propose_segment", '{"start_turn": "1", "end_turn": 2.0, "failure_mode": "m"}')))
    p = run(judge_for(server))
    assert p.ok and p.segment == (1, 2) and p.repairs == 2
    assert "REJECTED (schema)" in tool_results(server.requests[1])[0]
    assert "not valid JSON" in tool_results(server.requests[1])[0]


def test_reply_without_tool_call_is_nudged_then_dropped():
    server = Server(reply(content="The answer is turns 1-2."),
                    reply(call("propose_segment", start_turn=1, end_turn=2, failure_mode="m", rationale="r")))
    p = run(judge_for(server))
    assert p.ok and p.repairs == 1 and server.requests[1]["messages"][-1]["role"] == "user"
    server = Server(reply(content="no idea"))
    p = run(judge_for(server, max_repairs=1))
    assert p.reason == NO_TOOL_CALL and p.calls == 2


def test_no_valid_segment_spends_no_call():
    # one turn (its only turn is terminal), or every non-terminal turn invalid: nothing can be proposed
    one = make_traj([("go to cabinet 1", "You win.")], True)
    invalid = make_traj([("fly", "Nothing happens."), ("swim", "Nothing happens."), ("go", "You win.")], True,
                        valid=[False, False, True])
    for success in (one, invalid):
        server = Server(reply(call("propose_segment", start_turn=0, end_turn=0, failure_mode="m", rationale="r")))
        p = judge_for(server).propose(success, FAILURES, max_segment_turns=4, rng=np.random.default_rng(0))
        assert p.reason == NO_CANDIDATE and p.segment is None and p.calls == 0 and p.cost_usd == 0
        assert server.requests == []


def test_call_cap_without_proposal():
    server = Server(reply(call("search_trajectory", query="cup", k=2)))
    p = run(judge_for(server, max_tool_rounds=3, max_repairs=1))
    assert p.reason == NO_PROPOSAL and p.calls == 4 == len(server.requests)


def test_rate_limits_and_server_errors():
    delays = []
    server = Server(429, 429, reply(call("propose_segment", start_turn=1, end_turn=1, failure_mode="m",
                                         rationale="r")))
    p = run(judge_for(server, delays))
    assert p.ok and p.calls == 1 and len(server.requests) == 3
    assert len(delays) == 2 and 0.01 <= delays[0] < delays[1] <= 0.05  # exponential backoff
    server = Server(429)
    p = run(judge_for(server))
    assert p.reason == RATE_LIMITED and len(server.requests) == 3 and "3 attempts" in p.rationale
    server = Server(500)
    p = run(judge_for(server))
    assert p.reason == API_ERROR and len(server.requests) == 3
    server = Server(400)  # not retried
    p = run(judge_for(server))
    assert p.reason == API_ERROR and len(server.requests) == 1 and "400" in p.rationale
    server = Server(httpx.ConnectError("refused"))
    assert run(judge_for(server)).reason == API_ERROR and len(server.requests) == 3
    server = Server({"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": []})
    assert run(judge_for(server)).reason == API_ERROR


def test_timeout():
    server = Server(httpx.ReadTimeout("slow"))
    p = run(judge_for(server))
    assert p.reason == TIMEOUT and p.segment is None and len(server.requests) == 1


def test_budget():
    search = reply(call("search_trajectory", query="cup", k=2))
    server = Server(search)
    judge = judge_for(server, max_calls_per_step=3)
    p = run(judge)
    assert p.reason == BUDGET and p.calls == 3 and len(server.requests) == 3
    p = run(judge)  # spent: no request at all
    assert p.reason == BUDGET and p.calls == 0 and len(server.requests) == 3
    judge.begin_step()
    server.script = [reply(call("propose_segment", start_turn=0, end_turn=0, failure_mode="m", rationale="r"))]
    assert run(judge).ok and len(server.requests) == 4
    server = Server(search)
    assert run(judge_for(server, max_calls_per_step=0)).reason == BUDGET and not server.requests


def test_budget_and_cache_under_concurrent_proposals(tmp_path):
    """Eight groups judged at once (the pipelined step's worker threads): exactly the budget's
    calls go out, the rest are budget drops; the cache written concurrently serves every repeat."""
    import threading
    import time as _time

    def slow(request):
        _time.sleep(0.05)  # calls overlap
        return server_ok(request)

    server_ok = Server(reply(call("propose_segment", start_turn=1, end_turn=2, failure_mode="m", rationale="r")))
    kw = {"max_calls_per_step": 5, "cache": True, "workdir": str(tmp_path)}
    judge = judge_for(slow, **kw)
    trajs = [make_traj([("go to sinkbasin 1", f"obs {i}"), ("take mug 1 from sinkbasin 1", "ok"),
                        ("clean mug 1 with sinkbasin 1", "ok"), ("go to cabinet 1", "ok")], True)
             for i in range(8)]
    out = [None] * 8

    def one(i):
        out[i] = judge.propose(trajs[i], FAILURES, max_segment_turns=2, rng=np.random.default_rng(i))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(server_ok.requests) == 5
    assert sum(p.ok for p in out) == 5 and sum(p.reason == BUDGET for p in out) == 3
    judge.begin_step()
    again = [None] * 8
    for i in range(8):  # cached answers cost no call; the three new ones fit the fresh budget
        again[i] = judge.propose(trajs[i], FAILURES, max_segment_turns=2, rng=np.random.default_rng(i))
    assert all(p.ok for p in again) and len(server_ok.requests) == 8
    assert sum(p.cached for p in again) == 5


def test_cache(tmp_path):
    script = [reply(call("search_trajectory", query="cup", k=2), usage=(100, 10)),
              reply(call("propose_segment", start_turn=1, end_turn=2, failure_mode="m", rationale="r"),
                    usage=(200, 20))]
    server = Server(*script)
    judge = judge_for(server, cache=True, workdir=str(tmp_path))
    p = run(judge)
    assert p.ok and p.calls == 2 and not p.cached and len(server.requests) == 2
    files = sorted(glob.glob(str(tmp_path / "judge_cache" / "*" / "*.json")))
    assert len(files) == 2 and not glob.glob(str(tmp_path / "judge_cache" / "*" / ".tmp-*"))
    again = run(judge)
    assert again.ok and again.segment == (1, 2) and again.cached and again.calls == 0
    assert again.cost_usd == 0 and again.input_tokens == 0 and len(server.requests) == 2
    # a resumed run (new judge, same workdir) with an exhausted budget is still served from disk
    resumed = judge_for(server, cache=True, workdir=str(tmp_path), max_calls_per_step=0)
    assert run(resumed).cached and len(server.requests) == 2
    # a different request (max_segment_turns changes the brief) is not a hit
    server.script = list(script)
    assert run(judge, k=3).ok and len(server.requests) == 4
    # corrupt entries are ignored, refetched and overwritten
    with open(files[0], "w") as f:
        f.write('{"key": "trunc')
    with open(files[1], "w") as f:
        json.dump({"key": "someone else", "value": {}}, f)
    server.script = list(script)
    p = run(judge)
    assert p.ok and not p.cached and p.calls == 2 and len(server.requests) == 6
    for path in files:
        with open(path) as f:
            assert json.load(f)["key"] == os.path.basename(path)[:-5]


def test_api_key_handling(monkeypatch):
    monkeypatch.delenv("PROVER_TEST_KEY", raising=False)
    with pytest.raises(ValueError, match="PROVER_TEST_KEY"):
        OpenAIJudge(model="m", api_key_env="PROVER_TEST_KEY")
    with pytest.raises(ValueError, match="PROVER_TEST_KEY"):
        OpenAIJudge(model="m", base_url="https://api.example.com/v1", api_key_env="PROVER_TEST_KEY")
    local = OpenAIJudge(model="m", base_url="http://127.0.0.1:8000/v1", api_key_env="PROVER_TEST_KEY")
    assert local.client.api_key == "EMPTY"
    monkeypatch.setenv("PROVER_TEST_KEY", "sk-test")
    assert OpenAIJudge(model="m", api_key_env="PROVER_TEST_KEY").client.api_key == "sk-test"
    for url, local in [("http://localhost:8000/v1", True), ("http://10.1.2.3/v1", True),
                       ("http://vllm:8000", True), ("http://[::1]:8000/v1", True),
                       ("https://api.openai.com/v1", False), ("", False), ("https://8.8.8.8/v1", False)]:
        assert is_self_hosted(url) == local, url


def test_make_judge_from_the_trainer_config(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    cfg = default_config().judge
    cfg.max_repairs = 1
    server = Server(reply(call("propose_segment", start_turn=1, end_turn=1, failure_mode="m", rationale="r"),
                          usage=(1_000_000, 1_000_000)))
    client = httpx.Client(transport=httpx.MockTransport(server))
    judge = make_judge("openai", cfg, str(tmp_path), http_client=client)
    assert judge.model == cfg.openai.model and judge.max_repairs == 1 and judge.cache is not None
    p = run(judge)
    assert p.ok and p.cost_usd == pytest.approx(cfg.openai.usd_per_m_input + cfg.openai.usd_per_m_output)
    assert glob.glob(str(tmp_path / "judge_cache" / "*" / "*.json"))


def test_tool_choice_in_the_payload(monkeypatch):
    answer = reply(call("propose_segment", start_turn=1, end_turn=1, failure_mode="m", rationale="r"))
    server = Server(reply(call("search_trajectory", query="cup", k=2)), answer)
    p = run(judge_for(server, tool_choice="required"))
    assert p.ok and len(server.requests) == 2
    # every round carries it, with all three tools still offered (inspection first is allowed)
    assert [r["tool_choice"] for r in server.requests] == ["required", "required"]
    assert all(len(r["tools"]) == 3 for r in server.requests)
    server = Server(answer)
    assert run(judge_for(server)).ok and "tool_choice" not in server.requests[0]  # auto: not sent
    with pytest.raises(ValueError, match="tool_choice"):
        judge_for(server, tool_choice="sometimes")
    # from the trainer's config: default auto, "required" read from judge.openai.tool_choice
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    cfg = default_config().judge
    assert cfg.openai.tool_choice == "auto" and make_judge("openai", cfg).tool_choice == "auto"
    cfg.openai.tool_choice = "required"
    server = Server(answer)
    judge = make_judge("openai", cfg, None, http_client=httpx.Client(transport=httpx.MockTransport(server)))
    assert run(judge).ok and server.requests[0]["tool_choice"] == "required"


def test_enable_thinking_reaches_a_thinking_judges_template(monkeypatch, tmp_path):
    """judge.openai.enable_thinking is sent as chat_template_kwargs (prover-serve's and vLLM's), keys
    its own cache entries, and is not sent at all when unset."""
    answer = reply(call("propose_segment", start_turn=1, end_turn=1, failure_mode="m", rationale="r"))
    server = Server(answer)
    assert run(judge_for(server)).ok and "chat_template_kwargs" not in server.requests[0]  # unset: not sent
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    cfg = default_config().judge
    assert cfg.openai.enable_thinking is None
    cfg.openai.enable_thinking = False
    server = Server(answer, answer)
    judge = make_judge("openai", cfg, str(tmp_path), http_client=httpx.Client(transport=httpx.MockTransport(server)))
    assert run(judge).ok and server.requests[0]["chat_template_kwargs"] == {"enable_thinking": False}
    assert run(judge).cached and len(server.requests) == 1  # the same setting: a cache hit
    cfg.openai.enable_thinking = True  # another setting is another request, not the cached reply
    judge = make_judge("openai", cfg, str(tmp_path), http_client=httpx.Client(transport=httpx.MockTransport(server)))
    assert not run(judge).cached and server.requests[1]["chat_template_kwargs"] == {"enable_thinking": True}
