"""prover-serve's errors on an app over a scripted driver (no model, so each test takes about a second):
- bad text and bodies (a lone surrogate in content, tools or stop, a stop over 1024 bytes, JSON nested
  too deeply) are 400s naming the problem, streamed or not (before any byte of a stream);
- a stream the engine refuses is a 400, not a 200 with an error event;
- a refused request (400, 503) takes no place in the server's stop-string table;
- when the engine thread dies every request, decoding or queued, ends with a 500 server_error, the
  worker holds nothing, and later requests get a 500 saying the engine stopped;
- top_p=0 samples the most likely token; a history tool call with arguments "" is a call without any."""

import json
import threading
import time

import httpx
import pytest

from prover_jax.sampling.driver import Completion, Finished, Request
from prover_jax.serving.app import create_app
from prover_jax.serving.chat import ChatService
from prover_jax.serving.service import ServerThread
from prover_jax.serving.worker import EngineWorker, Stopped

from helpers import serving as SF

MODEL = "scripted"
HI = [{"role": "user", "content": "hi"}]
REFUSED = 7  # max_tokens the scripted driver refuses, as the engine refuses a bad request at admission


class ScriptedDriver:
    """A driver without a model: every sample ends on the step after its admission, replying "ok";
    a request with max_new_tokens REFUSED is refused (ValueError); with `fail_after_s`, a step waits
    that long, then raises (a device failure)."""

    def __init__(self, reply, fail_after_s=None):
        self.reply, self.fail_after_s = reply, fail_after_s
        self.submitted, self.queue, self.stats = [], [], {}

    @property
    def idle(self):
        return not self.queue

    def submit(self, request):
        if request.max_new_tokens == REFUSED:
            raise ValueError("refused by the driver")
        self.submitted.append(request)
        self.queue.append(len(self.submitted) - 1)
        return len(self.submitted) - 1

    def cancel(self, ticket):
        self.queue = [t for t in self.queue if t != ticket]

    def step(self):
        if self.fail_after_s is not None:
            time.sleep(self.fail_after_s)
            raise RuntimeError("simulated device failure")
        time.sleep(0.01)
        done, self.queue = self.queue, []
        return [Finished(t, j, Completion(list(self.reply), [0.0] * len(self.reply), "stop"))
                for t in done for j in range(self.submitted[t].num_samples)]

    def partial(self):
        return []


def scripted_app(folder, fail_after_s=None, **kw):
    """Generator: (ChatService over a ScriptedDriver, base URL), then both stopped."""
    tok = SF.save_tokenizer(folder)
    driver = ScriptedDriver(tok.encode("ok", add_special_tokens=False) + [SF.EOS_ID], fail_after_s)
    service = ChatService(EngineWorker(driver, max_pending=4).start(), tok, MODEL, 1024, **kw)
    srv = ServerThread(create_app(service)).start()
    yield service, srv.base_url
    srv.stop()
    service.worker.stop()


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    yield from scripted_app(str(tmp_path_factory.mktemp("tok")))


def post(base, body):
    """POST /chat/completions with `body` (JSON text as is, so it may hold what a client would refuse)."""
    return httpx.post(base + "/chat/completions", content=body if isinstance(body, str) else json.dumps(body),
                      timeout=30, headers={"content-type": "application/json"})


def ask(**kw):
    return {"model": MODEL, "messages": HI, "max_tokens": 4, **kw}


def serves(base):
    r = post(base, ask())
    return r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "ok"


def raw(content='"hi"', more=""):
    """A request body as JSON text: one user message with `content` (JSON), then the fields `more`."""
    return '{"model": "scripted", "messages": [{"role": "user", "content": ' + content + "}]" + more + "}"


@pytest.mark.parametrize("body, needle", [
    (raw('"a\\ud800b"'), "messages[0].content: it holds a lone surrogate"),
    (raw('[{"type": "text", "text": "\\ud800"}]'), "lone surrogate"),
    (raw(more=', "tools": [{"type": "function", "function": {"name": "f", "description": "a\\udc00"}}]'),
     "lone surrogate"),
    (raw(more=', "stop": "\\ud800"'), "stop '\\ud800': it holds a lone surrogate"),
    (raw(more=', "stop": "' + "q" * 1100 + '"'), "1100 UTF-8 bytes"),
    ('{"model": "scripted", "messages": ' + "[" * 100000 + "]" * 100000 + "}", "nested too deeply"),
], ids=["content", "text-part", "tools", "stop-surrogate", "stop-bytes", "nesting"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_bad_text_is_400(app, body, needle, stream):
    if stream:
        body = body[:-1] + ', "stream": true}'
    r = post(app[1], body)
    assert r.status_code == 400 and r.headers["content-type"] == "application/json", r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and needle in error["message"], error
    assert serves(app[1])


def test_a_stream_the_engine_refuses_is_400(app):
    r = post(app[1], ask(max_tokens=REFUSED, stream=True))
    assert r.status_code == 400 and r.json()["error"]["message"] == "refused by the driver", r.text
    r = post(app[1], ask(stream=True))
    assert r.status_code == 200 and r.text.startswith("data: ") and r.text.endswith("data: [DONE]\n\n")


def test_refused_requests_take_no_stop_slot(tmp_path):
    for service, base in scripted_app(str(tmp_path), max_stop_strings=8):
        for i in range(9):  # each a new stop string, each refused
            assert post(base, ask(stop=[chr(65 + i) * 1100])).status_code == 400
            assert post(base, ask(stop=[f"s{i}", "\ud800"])).status_code == 400
            assert post(base, ask(stop=[f"m{i}"], max_tokens=5000)).status_code == 400  # context
        service.worker.max_pending = 0
        assert post(base, ask(stop=["busy"])).status_code == 503
        service.worker.max_pending = 4
        assert service._stops == []
        for k in range(2):  # the whole table is still free: 8 new stop strings
            assert post(base, ask(stop=[f"{k}{j}" for j in range(4)])).status_code == 200
        r = post(base, ask(stop=["one more"]))
        assert r.status_code == 400 and "at most 8 distinct stop strings" in r.json()["error"]["message"]


def test_engine_death_fails_every_request(tmp_path):
    for service, base in scripted_app(str(tmp_path), fail_after_s=1.0):
        driver, out = service.worker.driver, {}

        def call(name, **kw):
            r = post(base, ask(**kw))
            out[name] = (r.status_code, r.json()["error"], time.time())

        threads = [threading.Thread(target=call, args=("decoding",))]
        threads[0].start()
        t0 = time.time()
        while not driver.submitted:  # admitted: the engine is in the step that fails
            assert time.time() - t0 < 10
            time.sleep(0.01)
        threads += [threading.Thread(target=call, args=("queued",)),
                    threading.Thread(target=call, args=("stream",), kwargs={"stream": True})]
        for t in threads[1:]:
            t.start()
        for t in threads:
            t.join(30)
        assert set(out) == {"decoding", "queued", "stream"}
        for status, error, end in out.values():
            assert status == 500 and error["type"] == "server_error" and error["code"] == "engine_stopped"
            assert "simulated device failure" in error["message"] and end - t0 < 10
        assert service.worker.pending == 0
        r = post(base, ask())
        assert r.status_code == 500 and "the engine stopped" in r.json()["error"]["message"]
        with pytest.raises(Stopped):
            service.worker.submit(driver.submitted[0], lambda *e: None)


class Endless(ScriptedDriver):
    def step(self):
        time.sleep(0.2)
        return []


def test_stop_fails_what_the_worker_holds():
    """stop() ends the thread: its decoding and queued requests get "failed", nothing stays pending."""
    driver, events = Endless([1]), []
    worker = EngineWorker(driver, max_pending=4).start()
    for name in ("decoding", "queued"):
        worker.submit(Request([1]), lambda *e, name=name: events.append((name, *e)))
        while not driver.submitted:
            time.sleep(0.01)
    worker.stop()
    assert worker.pending == 0
    assert [(e[0], e[1]) for e in events if e[1] != "accepted"] == [("decoding", "failed"), ("queued", "failed")]
    assert all("shutting down" in e[3] for e in events if e[1] == "failed")
    with pytest.raises(Stopped, match="shutting down"):
        worker.submit(Request([1]), lambda *e: None)


def test_top_p_zero_is_the_most_likely_token(app):
    r = post(app[1], ask(top_p=0, temperature=1.0))
    assert r.status_code == 200, r.text
    sampling = app[0].worker.driver.submitted[-1].sampling
    assert sampling.temperature == 0 and sampling.top_p == 1.0
    assert post(app[1], ask(top_p=-0.1)).status_code == 400


def test_a_history_call_without_arguments(tmp_path):
    from helpers.qwen_vocab import chat_template

    tok = SF.save_tokenizer(str(tmp_path), chat_template=chat_template())  # XML calls: arguments.items()
    service = ChatService(None, tok, MODEL, 4096)
    msgs = [*HI, {"role": "assistant", "content": None,
                  "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "now", "arguments": ""}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "12:00"}]
    req = service.parse(ask(messages=msgs, tools=[{"type": "function", "function": {"name": "now"}}]))
    assert req.messages[1]["tool_calls"][0]["function"]["arguments"] == {}
    ids, _ = service.render(req)
    assert "<function=now>\n</function>" in tok.decode(ids)
