"""Endpoint and reply failures of the openai judge: what a dropped proposal still reports, replies and
responses it cannot read, a server that trickles its answer, and the waits between retries."""

import email.utils
import json
import time

import httpx
import numpy as np
import pytest

from prover_jax.judges import API_ERROR, JUDGE_ERROR, SCHEMA, TIMEOUT, Judge, Proposal
from prover_jax.judges.client import retry_after
from test_openai_judge import (FAILURES, SUCCESS, Server, call, judge_for, make_traj, reply, run,
                               tool_results)

PROPOSE = reply(call("propose_segment", start_turn=1, end_turn=1, failure_mode="m", rationale="r"))
SEARCH = reply(call("search_trajectory", query="cup", k=2), usage=(1000, 100))


def with_message(message, usage=(1000, 100)):
    body = reply(usage=usage)
    body["choices"][0]["message"] = {"role": "assistant", "content": None, **message}
    return body


def raw(text, status=200, headers=None, requests=None):
    """An endpoint answering every request with `text` as its body."""
    def handler(request):
        if requests is not None:
            requests.append(request)
        return httpx.Response(status, text=text, headers={"content-type": "application/json", **(headers or {})})
    return handler


# ------------------------------------------------------------------------------- the spend of a drop

def test_an_exception_keeps_the_spend_made_before_it(monkeypatch):
    class Spender(Judge):
        def _propose(self, success, failures, *, max_segment_turns, rng):
            error = RuntimeError("boom")
            error.spent = Proposal(None, JUDGE_ERROR, calls=2, input_tokens=30, output_tokens=4, cost_usd=0.5,
                                   repairs=1)
            raise error

    p = Spender().propose(SUCCESS, FAILURES, max_segment_turns=2)
    assert p.reason == JUDGE_ERROR and p.segment is None and "RuntimeError: boom" in p.rationale
    assert (p.calls, p.input_tokens, p.output_tokens, p.cost_usd, p.repairs) == (2, 30, 4, 0.5, 1)
    # the openai judge reports what it spent before a tool raised
    import prover_jax.judges.openai_judge as oj

    def broken(self, query, k):
        raise RuntimeError("index broke")

    monkeypatch.setattr(oj.FailureIndex, "search", broken)
    server = Server(SEARCH, PROPOSE)
    p = run(judge_for(server))
    assert p.reason == JUDGE_ERROR and "index broke" in p.rationale and len(server.requests) == 1
    assert (p.calls, p.input_tokens, p.output_tokens) == (1, 1000, 100)
    assert p.cost_usd == pytest.approx(1000 / 1e6 * 2.0 + 100 / 1e6 * 8.0)


MALFORMED = [{"tool_calls": ["propose_segment"]},
             {"tool_calls": [{"id": "a", "type": "function", "function": "propose_segment"}]},
             {"tool_calls": {"id": "a"}},
             {"tool_calls": [None, 3]}]


@pytest.mark.parametrize("message", MALFORMED)
def test_malformed_tool_calls_are_repaired(message):
    server = Server(SEARCH, with_message(message), PROPOSE)
    p = run(judge_for(server))
    assert p.ok and p.repairs == 1 and p.calls == 3 == len(server.requests)
    nudge = server.requests[2]["messages"][-1]
    assert nudge["role"] == "user" and nudge["content"].startswith("REJECTED (schema)")
    # never repaired: dropped as schema, with every call counted
    server = Server(SEARCH, with_message(message))
    p = run(judge_for(server, max_repairs=2))
    assert p.reason == SCHEMA and p.repairs == 2 and p.calls == 4 == len(server.requests)
    assert (p.input_tokens, p.output_tokens) == (4000, 400) and "could not be read" in p.rationale


def test_readable_tool_calls_run_beside_malformed_ones():
    good = {"id": "call_7", "type": "function",
            "function": {"name": "propose_segment", "arguments": {"start_turn": 2, "end_turn": 2}}}
    server = Server(with_message({"tool_calls": ["junk", good]}))
    p = run(judge_for(server))
    assert p.ok and p.segment == (2, 2) and p.repairs == 0


def test_search_over_failed_runs_without_a_searchable_word_is_a_result():
    # every failed turn tokenizes to nothing (one-letter actions, punctuation): no index can be built
    failures = [make_traj([("a", "!"), ("b", "")], False), make_traj([("c", "?")], False)]
    server = Server(reply(call("search_trajectory", query="cabinet", k=3)), PROPOSE)
    p = judge_for(server).propose(SUCCESS, failures, max_segment_turns=2, rng=np.random.default_rng(0))
    assert p.ok and p.segment == (1, 1) and p.calls == 2
    assert tool_results(server.requests[1]) == ["no turn of the failed runs matches 'cabinet'"]


# ------------------------------------------------------------------------------- unusable responses

@pytest.mark.parametrize("text", ["<html>oops</html>", "[1, 2]", '{"choices": [{"message": ', "",
                                  json.dumps({"choices": {"0": {"message": {}}}}), "\xff\xfe{"])
def test_an_unusable_200_is_an_api_error_that_counts_as_a_call(text):
    requests = []
    p = run(judge_for(raw(text, requests=requests)))
    assert p.reason == API_ERROR and p.calls == 1 == len(requests) and p.segment is None
    assert p.rationale.startswith("response ")  # what the endpoint answered, not an exception


@pytest.mark.parametrize("usage, tokens", [({"prompt_tokens": "n/a", "completion_tokens": 7}, (0, 7)),
                                           ({"prompt_tokens": 5.0, "completion_tokens": None}, (5, 0)),
                                           ({"prompt_tokens": [1], "completion_tokens": -3}, (0, 0)),
                                           ("lots", (0, 0))])
def test_unreadable_usage_counts_as_zero(usage, tokens):
    p = run(judge_for(raw(json.dumps({**PROPOSE, "usage": usage}))))
    assert p.ok and p.calls == 1 and (p.input_tokens, p.output_tokens) == tokens


# ------------------------------------------------------------------------------------ whole timeout

def trickle(chunk_s, served):
    """An endpoint that sends the answer 40 bytes at a time, `chunk_s` apart; counts chunks served."""
    body = json.dumps(PROPOSE).encode()

    def chunks():
        for i in range(0, len(body), 40):
            served.append(i)
            yield body[i:i + 40]
            time.sleep(chunk_s)

    return lambda request: httpx.Response(200, headers={"content-type": "application/json"}, content=chunks())


def test_timeout_bounds_the_whole_attempt_not_each_read():
    served = []
    start = time.perf_counter()
    p = run(judge_for(trickle(0.1, served), timeout_s=0.25))  # ~12 chunks: ~1.2 s in all
    took = time.perf_counter() - start
    assert p.reason == TIMEOUT and "timeout_s=0.25" in p.rationale and p.calls == 1
    assert 0.2 < took < 0.8, took
    n = len(served)
    time.sleep(0.3)  # the abandoned attempt stops reading at its next chunk
    assert len(served) <= n + 1 < len(json.dumps(PROPOSE)) // 40
    served = []
    assert run(judge_for(trickle(0.001, served), timeout_s=2.0)).ok and len(served) > 5  # in time: read whole


# -------------------------------------------------------------------------------------------- waits

def limited(headers, requests):
    """429 with `headers` on the first request, then an answer."""
    def handler(request):
        requests.append(request)
        if len(requests) == 1:
            return httpx.Response(429, headers=headers, json={"error": {"message": "slow down"}})
        return httpx.Response(200, json=PROPOSE)
    return handler


@pytest.mark.parametrize("headers, low, high", [
    ({"retry-after": "5"}, 5.0, 5.0),
    ({"retry-after": "100"}, 30.0, 30.0),
    ({"retry-after": "Wed, 21 Oct 2099 07:28:00 GMT"}, 30.0, 30.0),
    ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.01, 0.0125),  # past: the usual backoff
    ({"retry-after-ms": "2500", "retry-after": "3"}, 2.5, 2.5),
    ({"retry-after-ms": "900000"}, 30.0, 30.0),
    ({"retry-after": "soon"}, 0.01, 0.0125)])
def test_the_server_asked_wait_is_honoured_up_to_the_cap(headers, low, high):
    delays, requests = [], []
    p = run(judge_for(limited(headers, requests), delays, backoff_max_s=30.0))
    assert p.ok and len(requests) == 2 and len(delays) == 1 and low <= delays[0] <= high, delays


def test_an_http_date_is_a_wait_until_then():
    delays, requests = [], []
    headers = {"retry-after": email.utils.formatdate(time.time() + 8, usegmt=True)}  # whole seconds
    assert run(judge_for(limited(headers, requests), delays)).ok and 6.0 <= delays[0] <= 8.0, delays


def test_every_wait_is_within_backoff_max_s():
    delays = []
    p = run(judge_for(Server(500), delays, max_retries=6, backoff_base_s=1.0, backoff_max_s=1.1))
    assert p.reason == API_ERROR and len(delays) == 6 and max(delays) <= 1.1 and delays[0] >= 1.0
    assert retry_after({"retry-after": "Thu, 01 Jan 1970 00:01:40 GMT"}, now=90.0) == pytest.approx(10.0)
    assert retry_after({"retry-after": "nan"}) is None and retry_after(None) is None

