"""prover-serve's access and size limits: Bearer auth on every route (401 in OpenAI's shape, 200 with
the key), the refusal to serve another machine without a key, 400s naming each request limit (body
bytes, messages, tools JSON), and a server that answers as usual after each refusal."""

import httpx
import openai
import pytest

from prover_jax.serving import cli
from prover_jax.serving.app import create_app
from prover_jax.serving.guard import check_bind, is_loopback
from prover_jax.serving.service import ServerThread

from helpers import serving as SF

MODEL = "tiny-qwen"
KEY = "sk-test-0123456789"
MAX_BODY = 4000
MAX_MESSAGES = 4
MAX_TOOL_BYTES = 300
HELLO = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    """A server with KEY and small limits (and the unkeyed one SF.serve starts beside it)."""
    gen = SF.serve(str(tmp_path_factory.mktemp("guard")), MODEL, max_concurrent_decodes=2, max_target_length=1024,
                   max_pending=4, max_messages=MAX_MESSAGES, max_tool_bytes=MAX_TOOL_BYTES)
    _, service, _ = next(gen)
    srv = ServerThread(create_app(service, api_key=KEY, max_body_bytes=MAX_BODY)).start()
    yield srv
    srv.stop()
    next(gen, None)


def client(srv, key=KEY):
    return openai.OpenAI(base_url=srv.base_url, api_key=key, max_retries=0, timeout=120)


def hello(c, **kw):
    return c.chat.completions.create(**{"model": MODEL, "messages": HELLO, "max_tokens": 4, "temperature": 0, **kw})


def test_every_route_wants_the_key(keyed):
    root = keyed.base_url.rsplit("/v1", 1)[0]
    for method, url in (("GET", f"{root}/health"), ("GET", f"{keyed.base_url}/models"),
                        ("GET", f"{keyed.base_url}/models/{MODEL}"), ("POST", f"{keyed.base_url}/chat/completions"),
                        ("GET", f"{keyed.base_url}/no-such-route")):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
            r = httpx.request(method, url, headers=headers, json={}, timeout=30)
            assert r.status_code == 401, (method, url, headers, r.text)
            assert r.json()["error"]["code"] == "invalid_api_key" and set(r.json()["error"]) >= {"message", "type"}
    assert httpx.get(f"{root}/health", headers={"Authorization": f"Bearer {KEY}"}, timeout=30).status_code == 200
    with pytest.raises(openai.AuthenticationError):
        hello(client(keyed, "wrong"))
    assert hello(client(keyed)).choices[0].message.content is not None


@pytest.mark.parametrize("kw, needle, code", [
    (dict(messages=HELLO * (MAX_MESSAGES + 1)), f"at most {MAX_MESSAGES} (--max_messages)", "too_many_messages"),
    (dict(tools=[{"type": "function", "function": {"name": "f", "description": "d" * MAX_TOOL_BYTES,
                                                   "parameters": {"type": "object"}}}]),
     f"at most {MAX_TOOL_BYTES} (--max_tool_bytes)", "tools_too_large"),
    (dict(messages=[{"role": "user", "content": "x" * MAX_BODY}]), f"at most {MAX_BODY} (--max_body_bytes)",
     "request_too_large"),
])
def test_request_limits_are_400s_naming_the_limit(keyed, kw, needle, code):
    c = client(keyed)
    with pytest.raises(openai.BadRequestError) as info:
        hello(c, **kw)
    err = info.value.response.json()["error"]
    assert needle in err["message"] and err["code"] == code, err
    assert hello(c).choices  # the server keeps serving


def test_a_streamed_body_over_the_limit_is_refused_without_a_length(keyed):
    def chunks():  # no Content-Length: the server counts the bytes as they come
        yield b'{"model": "tiny-qwen", "messages": [{"role": "user", "content": "'
        for _ in range(MAX_BODY // 100 + 1):
            yield b"x" * 100
        yield b'"}]}'

    r = httpx.post(f"{keyed.base_url}/chat/completions", content=chunks(), timeout=30,
                   headers={"Authorization": f"Bearer {KEY}", "content-type": "application/json"})
    assert r.status_code == 400 and f"more than {MAX_BODY} bytes" in r.json()["error"]["message"], r.text


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("127.0.0.2", True), ("localhost", True),
                                            ("::1", True), ("[::1]", True), ("0.0.0.0", False), ("::", False),
                                            ("10.0.0.5", False), ("judge-host", False)])
def test_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_an_open_bind_without_a_key_is_refused(capsys, monkeypatch):
    monkeypatch.delenv(cli.KEY_ENV, raising=False)
    with pytest.raises(ValueError, match="--api_key"):
        check_bind("0.0.0.0", None)
    check_bind("0.0.0.0", KEY)
    check_bind("0.0.0.0", None, allow_unauthenticated=True)
    check_bind("127.0.0.1", None)
    # the command line refuses before it loads anything (the model folder does not exist)
    assert cli.main(["--model=/nonexistent", "--host=0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "--api_key" in err and "--allow_unauthenticated" in err
    monkeypatch.setenv(cli.KEY_ENV, KEY)  # the key from the environment counts
    assert cli.main(["--model=/nonexistent", "--host=0.0.0.0"]) == 1  # past the bind check: no such folder
    assert "no such folder" in capsys.readouterr().err
