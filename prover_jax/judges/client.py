"""One OpenAI-compatible chat-completions endpoint, shared by the LLM judge and the LLM critic.

    endpoint = ChatEndpoint(who="openai judge", config="judge.openai", api_key_env="OPENAI_API_KEY",
                            base_url=url, cache_dir=join_path(workdir, "judge_cache"))
    key, hit = endpoint.lookup(payload, usable)  # a usable cached response, or None
    if hit is None and endpoint.take_call():     # the step's call budget (begin_step resets it)
        data, reason, detail = endpoint.send(payload, usage)  # counts calls and tokens into `usage`
        if data is not None:
            endpoint.store(key, data)
    cost = endpoint.cost_usd(usage)

Requests (`request`, never raises for an endpoint failure; returns (response dict, 'ok', '') or
(None, reason, detail)):
  timeout        no complete response within timeout_s: it bounds each attempt as a whole (connecting,
                 waiting, reading the body; a server that trickles bytes is cut off at timeout_s, the
                 worker thread reading it stops at its next chunk); not retried: a slow server would
                 stall the step k times over
  rate_limited   HTTP 429 on every attempt: 1 + max_retries attempts, exponential backoff
                 backoff_base_s * 2**attempt * U(1, 1.25), or longer when the server asks (retry-after-ms,
                 Retry-After in seconds or as an HTTP date); every wait is at most backoff_max_s
  api_error      5xx / 408 / 409 / connection errors after the same retries; other HTTP errors (400,
                 401, 404...) and unusable responses (a body that is not a JSON object with
                 choices[0].message: HTML, a list, truncated JSON) at once
`send` counts every request made as a call, usable or not; token counts it cannot read count as 0.
The client's own retries are disabled so that this policy is the only one.

API key: read from the environment variable named by api_key_env. Missing -> ValueError at
construction (naming the config section `config` that sets it), unless base_url points to a
self-hosted server (loopback or private IP, `localhost`, or a single-label host name such as `vllm`),
which gets the placeholder key "EMPTY" (vLLM, SGLang, Ollama ignore it).

Cache: with cache_dir, responses are stored there (`cache.ResponseCache`) under the hash of the
request payload (`cache.content_key`); the caller decides which responses are worth storing.
"""

from __future__ import annotations

import concurrent.futures
import email.utils
import importlib
import ipaddress
import json
import math
import os
import random
import threading
import time
import urllib.parse
from typing import Any, Callable

from prover_jax.judges.base import API_ERROR, OK, RATE_LIMITED, TIMEOUT
from prover_jax.judges.cache import ResponseCache, content_key

RETRY_STATUS = (408, 409)


def is_self_hosted(base_url: str) -> bool:
    """True for a loopback / private address, `localhost`, or a single-label host (a cluster service)."""
    if not base_url:
        return False
    host = urllib.parse.urlsplit(base_url if "//" in base_url else f"//{base_url}").hostname or ""
    if host == "localhost" or host.endswith(".localhost") or host.endswith(".local"):
        return True
    try:
        ip = ipaddress.ip_address(host)
        return ip.is_loopback or ip.is_private or ip.is_unspecified or ip.is_link_local
    except ValueError:
        return bool(host) and "." not in host


def join_path(root: str, name: str) -> str:
    """root/name for a local folder or a gs:// one."""
    return f"{root.rstrip('/')}/{name}" if "://" in str(root) else os.path.join(root, name)


def has_message(data: Any) -> bool:
    """True for a response dict whose choices[0] holds a message dict."""
    choices = data.get("choices") if isinstance(data, dict) else None
    return (isinstance(choices, list) and bool(choices) and isinstance(choices[0], dict)
            and isinstance(choices[0].get("message"), dict))


def http_errors() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """(timeout, request error) exception classes of the HTTP libraries the openai client may use;
    reading a streamed body raises them unwrapped."""
    timeouts, errors = [], []
    for name in ("httpx", "httpx2"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        timeouts.append(module.TimeoutException)
        errors.append(module.RequestError)
    return tuple(timeouts), tuple(errors)


def token_count(value: Any) -> int:
    """A usage counter as an int; 0 for anything that is not a non-negative number."""
    if isinstance(value, bool):
        return 0
    try:
        return max(int(value), 0)
    except (TypeError, ValueError, OverflowError):
        return 0


def retry_after(headers: Any, now: float | None = None) -> float | None:
    """Seconds the server asks to wait: retry-after-ms, else Retry-After (seconds or an HTTP date);
    None when absent or unreadable."""
    get = getattr(headers, "get", None)
    if get is None:
        return None
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except (TypeError, ValueError):
            try:
                when = email.utils.parsedate_to_datetime(str(value))
                seconds = when.timestamp() - (time.time() if now is None else now)
            except (TypeError, ValueError, IndexError, OverflowError):
                continue
        if not math.isnan(seconds):
            return max(seconds, 0.0)
    return None


class Usage:
    """Counters of requests sent, cache hits and tokens (any object with these attributes will do)."""

    def __init__(self):
        self.calls = self.cached = self.input_tokens = self.output_tokens = 0


class ChatEndpoint:
    """See the module docstring. `who` ("openai judge") and `config` ("judge.openai", the config
    section of the caller) name the caller in errors; timeout_s bounds each attempt's whole duration
    (not each read); `http_client` (an httpx.Client) and `sleep` are for tests."""

    def __init__(self, *, who: str, config: str, base_url: str = "", api_key_env: str = "OPENAI_API_KEY",
                 api_key: str | None = None, timeout_s: float = 60.0, max_retries: int = 4,
                 max_calls_per_step: int = 64, usd_per_m_input: float = 0.0, usd_per_m_output: float = 0.0,
                 cache_dir: str | None = None, backoff_base_s: float = 1.0, backoff_max_s: float = 30.0,
                 enable_thinking: bool | None = None, http_client: Any = None,
                 sleep: Callable[[float], None] = time.sleep):
        import openai

        self._openai = openai
        self.base_url = base_url or ""
        if api_key is None:
            api_key = os.environ.get(api_key_env) if api_key_env else None
        if not api_key:
            if not is_self_hosted(self.base_url):
                where = self.base_url or "the OpenAI API (base_url is empty)"
                raise ValueError(f"{who}: no API key for {where}: set the environment variable "
                                 f"{api_key_env or f'(config {config}.api_key_env is empty)'}, or point "
                                 f"{config}.base_url to a self-hosted server")
            api_key = "EMPTY"
        self.client = openai.OpenAI(api_key=api_key, base_url=self.base_url or None, timeout=float(timeout_s),
                                    max_retries=0, http_client=http_client)
        self.timeout_s = float(timeout_s)
        self._timeouts, self._request_errors = http_errors()
        self.max_retries, self.max_calls_per_step = int(max_retries), int(max_calls_per_step)
        self.usd_per_m_input, self.usd_per_m_output = float(usd_per_m_input), float(usd_per_m_output)
        self.backoff_base_s, self.backoff_max_s = float(backoff_base_s), float(backoff_max_s)
        self.cache = ResponseCache(cache_dir) if cache_dir else None
        self._sleep, self._jitter = sleep, random.Random()
        self._lock = threading.Lock()  # the budget and the usage counters, updated by concurrent calls
        self._step_calls = 0
        # what every request adds to its payload: a thinking checkpoint's enable_thinking (prover-serve /
        # vLLM read chat_template_kwargs); nothing when unset, so payloads and cache keys stay as they were
        self.extras = ({} if enable_thinking is None else
                       {"extra_body": {"chat_template_kwargs": {"enable_thinking": bool(enable_thinking)}}})

    def close(self) -> None:
        self.client.close()

    # ------------------------------------------------------------------------------- budget and usage

    def begin_step(self) -> None:
        """A fresh budget of max_calls_per_step requests."""
        with self._lock:
            self._step_calls = 0

    def take_call(self) -> bool:
        """Counts one request against the step's budget; False (and nothing counted) when it is spent."""
        with self._lock:
            if self._step_calls >= self.max_calls_per_step:
                return False
            self._step_calls += 1
            return True

    def cost_usd(self, usage: Any) -> float:
        return usage.input_tokens / 1e6 * self.usd_per_m_input + usage.output_tokens / 1e6 * self.usd_per_m_output

    # -------------------------------------------------------------------------------------- the cache

    def lookup(self, payload: dict, usable: Callable[[Any], bool] = has_message) -> tuple[str | None, Any]:
        """(cache key or None without a cache, the cached response if `usable` accepts it, else None)."""
        if self.cache is None:
            return None, None
        key = content_key({**payload, **self.extras})
        hit = self.cache.get(key)
        return key, hit if hit is not None and usable(hit) else None

    def store(self, key: str | None, data: Any) -> None:
        if self.cache is not None:
            self.cache.put(key, data)

    # --------------------------------------------------------------------------------------- requests

    def send(self, payload: dict, usage: Any) -> tuple[dict | None, str, str]:
        """`request`, counting the call and its tokens into `usage` (already counted against the budget)."""
        data, reason, detail = self.request(payload)
        tokens = data.get("usage") if data is not None else None
        tokens = tokens if isinstance(tokens, dict) else {}
        with self._lock:
            usage.calls += 1
            usage.input_tokens += token_count(tokens.get("prompt_tokens"))
            usage.output_tokens += token_count(tokens.get("completion_tokens"))
        return data, reason, detail

    def _backoff(self, attempt: int, error) -> float:
        """Seconds before retry attempt + 1: the jittered exponential delay or the server's, if longer;
        at most backoff_max_s."""
        delay = self.backoff_base_s * 2 ** attempt * self._jitter.uniform(1.0, 1.25)
        asked = retry_after(getattr(getattr(error, "response", None), "headers", None))
        return min(delay if asked is None else max(delay, asked), self.backoff_max_s)

    def _attempt(self, payload: dict) -> bytes:
        """One request's response body, within timeout_s overall: raises what the request raised, or
        TimeoutError at the deadline (the worker then stops reading at its next chunk)."""
        future, cancel = concurrent.futures.Future(), threading.Event()

        def work():
            try:
                with self.client.chat.completions.with_streaming_response.create(**payload, **self.extras) as r:
                    body = bytearray()
                    for chunk in r.iter_bytes():
                        if cancel.is_set():
                            return
                        body += chunk
                future.set_result(bytes(body))
            except BaseException as e:  # noqa: BLE001  (handed to the waiting thread)
                future.set_exception(e)

        threading.Thread(target=work, name="chat-endpoint", daemon=True).start()
        try:
            return future.result(timeout=self.timeout_s)
        finally:
            cancel.set()

    def request(self, payload: dict) -> tuple[dict | None, str, str]:
        """One chat completion with retries: (response dict, 'ok', '') or (None, reason, detail)."""
        oa = self._openai
        reason, detail, error = API_ERROR, "", None
        for attempt in range(self.max_retries + 1):
            if attempt:
                self._sleep(self._backoff(attempt - 1, error))
            try:
                body = self._attempt(payload)
            except TimeoutError:
                return None, TIMEOUT, f"no complete response within timeout_s={self.timeout_s:g} s"
            except (oa.APITimeoutError, *self._timeouts) as e:
                return None, TIMEOUT, f"{type(e).__name__}: {e}"
            except oa.RateLimitError as e:
                error, reason, detail = e, RATE_LIMITED, str(e)
                continue
            except oa.APIStatusError as e:
                error, reason, detail = e, API_ERROR, f"HTTP {e.status_code}: {e}"
                if e.status_code >= 500 or e.status_code in RETRY_STATUS:
                    continue
                return None, API_ERROR, detail
            except (oa.APIConnectionError, *self._request_errors) as e:
                error, reason, detail = e, API_ERROR, f"connection error: {type(e).__name__}: {e}"
                continue
            except Exception as e:  # noqa: BLE001  (anything else the client raises is an unusable answer)
                return None, API_ERROR, f"{type(e).__name__}: {e}"
            try:
                data = json.loads(body)
            except ValueError as e:  # also undecodable bytes
                return None, API_ERROR, f"response is not JSON ({e}): {body[:300]!r}"
            if not has_message(data):
                return None, API_ERROR, f"response without a message: {str(data)[:300]}"
            return data, OK, ""
        return None, reason, f"{detail} (after {self.max_retries + 1} attempts)"
