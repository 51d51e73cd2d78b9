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
  timeout        the request timed out (not retried: a slow server would stall the step k times over)
  rate_limited   HTTP 429 on every attempt: 1 + max_retries attempts, exponential backoff
                 backoff_base_s * 2**attempt (capped at backoff_max_s, honouring Retry-After up to the cap)
  api_error      5xx / 408 / 409 / connection errors after the same retries; other HTTP errors (400,
                 401, 404...) and unusable responses (no choices[0].message) at once
The client's own retries are disabled so that this policy is the only one.

API key: read from the environment variable named by api_key_env. Missing -> ValueError at
construction (naming the config section `config` that sets it), unless base_url points to a
self-hosted server (loopback or private IP, `localhost`, or a single-label host name such as `vllm`),
which gets the placeholder key "EMPTY" (vLLM, SGLang, Ollama ignore it).

Cache: with cache_dir, responses are stored there (`cache.ResponseCache`) under the hash of the
request payload (`cache.content_key`); the caller decides which responses are worth storing.
"""

from __future__ import annotations

import ipaddress
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
    return bool(choices) and isinstance(choices[0], dict) and isinstance(choices[0].get("message"), dict)


class Usage:
    """Counters of requests sent, cache hits and tokens (any object with these attributes will do)."""

    def __init__(self):
        self.calls = self.cached = self.input_tokens = self.output_tokens = 0


class ChatEndpoint:
    """See the module docstring. `who` ("openai judge") and `config` ("judge.openai", the config
    section of the caller) name the caller in errors; `http_client` (an httpx.Client) and `sleep` are
    for tests."""

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
        tokens = (data.get("usage") or {}) if data is not None else {}
        with self._lock:
            usage.calls += 1
            usage.input_tokens += int(tokens.get("prompt_tokens") or 0)
            usage.output_tokens += int(tokens.get("completion_tokens") or 0)
        return data, reason, detail

    def _backoff(self, attempt: int, error) -> float:
        delay = self.backoff_base_s * 2 ** attempt
        response = getattr(error, "response", None)
        try:
            delay = max(delay, float(response.headers.get("retry-after")))
        except (AttributeError, TypeError, ValueError):
            pass
        return min(delay, self.backoff_max_s) * self._jitter.uniform(1.0, 1.25)

    def request(self, payload: dict) -> tuple[dict | None, str, str]:
        """One chat completion with retries: (response dict, 'ok', '') or (None, reason, detail)."""
        oa = self._openai
        reason, detail, error = API_ERROR, "", None
        for attempt in range(self.max_retries + 1):
            if attempt:
                self._sleep(self._backoff(attempt - 1, error))
            try:
                completion = self.client.chat.completions.create(**payload, **self.extras)
            except oa.APITimeoutError as e:
                return None, TIMEOUT, str(e)
            except oa.RateLimitError as e:
                error, reason, detail = e, RATE_LIMITED, str(e)
                continue
            except oa.APIStatusError as e:
                error, reason, detail = e, API_ERROR, f"HTTP {e.status_code}: {e}"
                if e.status_code >= 500 or e.status_code in RETRY_STATUS:
                    continue
                return None, API_ERROR, detail
            except oa.APIConnectionError as e:
                error, reason, detail = e, API_ERROR, f"connection error: {e}"
                continue
            except oa.OpenAIError as e:  # e.g. a response that does not parse
                return None, API_ERROR, f"{type(e).__name__}: {e}"
            data = completion.model_dump(mode="json", exclude_unset=True)
            if not has_message(data):
                return None, API_ERROR, f"response without a message: {str(data)[:300]}"
            return data, OK, ""
        return None, reason, f"{detail} (after {self.max_retries + 1} attempts)"
