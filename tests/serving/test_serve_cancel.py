"""prover-serve: a request whose client goes away is cancelled on the engine (streamed or not, before
or after admission), and `logprobs` returns each generated token's log-probability."""

import math
import time
import types

import httpx
import openai
import pytest

from prover_jax.sampling.driver import Completion
from prover_jax.serving.worker import EngineWorker

from helpers import serving as SF

MODEL = "tiny-qwen"
HELLO = [{"role": "user", "content": "Say hello."}]
LONG = 3000  # tokens: seconds of decoding for the tiny model on a CPU


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from SF.serve(str(tmp_path_factory.mktemp("serve")), MODEL, max_concurrent_decodes=2,
                        max_target_length=4096, max_pending=8)


@pytest.fixture(scope="module")
def client(server):
    yield from SF.openai_client(server[2])


def body(**kw):
    return dict(model=MODEL, messages=HELLO, temperature=0, **kw)


def wait_idle(service, cancelled_before, deadline_s=20.0):
    """Seconds until the worker holds no request and the driver has cancelled something new."""
    t0 = time.time()
    stats = service.worker.driver.stats
    while service.worker.pending or stats["cancelled"] == cancelled_before:
        assert time.time() - t0 < deadline_s, (service.worker.pending, dict(stats))
        time.sleep(0.05)
    return time.time() - t0


def test_greedy_runs_long(server, client):
    """The premise of the cancellation tests: greedy decoding of this checkpoint does not stop early."""
    r = client.chat.completions.create(**body(max_tokens=200))
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 200


def test_disconnect_cancels_a_plain_request(server, client):
    _, service, srv = server
    before = service.worker.driver.stats["cancelled"]
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(srv.base_url + "/chat/completions", json=body(max_tokens=LONG), timeout=1.0)
    wait_idle(service, before)
    assert service.worker.driver.stats["cancelled"] == before + 1
    assert client.chat.completions.create(**body(max_tokens=4)).choices  # the server keeps serving


def test_disconnect_cancels_a_stream(server, client):
    _, service, srv = server
    before = service.worker.driver.stats["cancelled"]
    with httpx.stream("POST", srv.base_url + "/chat/completions", json=body(max_tokens=LONG, stream=True, n=2),
                      timeout=60) as r:
        lines = r.iter_lines()
        got = [next(lines) for _ in range(6)]  # a few deltas, then the client hangs up
    assert all(x.startswith("data: ") or not x for x in got)
    wait_idle(service, before)
    assert service.worker.driver.stats["cancelled"] == before + 2  # both samples
    assert client.chat.completions.create(**body(max_tokens=4)).choices


def test_logprobs(server, client):
    r = client.chat.completions.create(**body(max_tokens=12, logprobs=True))
    [choice] = r.choices
    entries = choice.logprobs.content
    assert len(entries) == r.usage.completion_tokens  # no EOS within 12 greedy tokens (see above)
    assert "".join(e.token for e in entries) == choice.message.content
    assert b"".join(bytes(e.bytes) for e in entries).decode("utf-8", "replace") == choice.message.content
    assert all(e.logprob <= 0 and math.isfinite(e.logprob) and e.top_logprobs == [] for e in entries)
    streamed = client.chat.completions.create(**body(max_tokens=12, logprobs=True, stream=True))
    parts = [e for ch in streamed if ch.choices and ch.choices[0].logprobs for e in ch.choices[0].logprobs.content]
    assert [e.token for e in parts] == [e.token for e in entries]
    assert [e.logprob for e in parts] == pytest.approx([e.logprob for e in entries], abs=1e-5)
    assert client.chat.completions.create(**body(max_tokens=4)).choices[0].logprobs is None


def test_top_logprobs_is_refused(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(**body(max_tokens=4, logprobs=True, top_logprobs=3))
    assert "top_logprobs" in info.value.body["message"]


class FakeDriver:
    """Records what the worker asks of a driver; every request decodes forever."""

    def __init__(self):
        self.submitted, self.cancelled, self.stats = [], [], {"cancelled": 0}

    @property
    def idle(self):
        return not self.submitted or len(self.cancelled) == len(self.submitted)

    def submit(self, request):
        self.submitted.append(request)
        return len(self.submitted) - 1

    def cancel(self, ticket):
        self.cancelled.append(ticket)
        return 1

    def step(self):
        time.sleep(0.001)
        return []

    def partial(self):
        return [(t, 0, Completion([1], [0.0])) for t in range(len(self.submitted)) if t not in self.cancelled]


def test_worker_cancel_before_and_after_admission():
    driver, events = FakeDriver(), []
    worker = EngineWorker(driver, max_pending=4)
    req = {name: types.SimpleNamespace(name=name, num_samples=1) for name in ("early", "late")}
    early = worker.submit(req["early"], lambda *e: events.append(("early",) + e))
    worker.cancel(early)  # before the worker thread ever saw it
    assert worker.pending == 1
    worker.start()
    try:
        late = worker.submit(req["late"], lambda *e: events.append(("late",) + e), stream=True)
        t0 = time.time()
        while not driver.submitted:
            assert time.time() - t0 < 10
            time.sleep(0.01)
        assert driver.submitted == [req["late"]] and worker.pending == 1  # "early" never reached the driver
        worker.cancel(late)
        while worker.pending:
            assert time.time() - t0 < 10
            time.sleep(0.01)
        assert driver.cancelled == [0]
        n = len(events)
        time.sleep(0.1)
        assert len(events) == n and all(e[0] == "late" for e in events)  # nothing after the cancel
        worker.cancel(late)  # again: a no-op
        time.sleep(0.1)
        assert driver.cancelled == [0]
    finally:
        worker.stop()
    assert not worker._thread.is_alive()
