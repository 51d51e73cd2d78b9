"""`openai`: an agentic LLM judge over any OpenAI-compatible chat-completions endpoint.

The model gets a brief (find one failure mode that recurs across the failed runs, then the shortest
segment of the successful run that avoids or solves it), the successful run in full and compact
previews of the failed runs (ids 0..n-1), and three tools (see `tools`): search_trajectory(query, k)
(BM25 over the failed runs' turns), get_segment(traj_id, start_turn, end_turn) and
propose_segment(start_turn, end_turn, failure_mode, rationale), the answer.

Loop: call the model, run its tool calls, append the results, repeat. A proposal is validated
(`base.segment_problem`); an invalid one, malformed JSON arguments, or a reply without any tool call
costs one repair: the model is told what is wrong and asked again; after max_repairs the proposal is
dropped with the last reason. At most max_tool_rounds + max_repairs model calls per proposal (then
'no_proposal', or the last invalid proposal's reason).

Endpoint failures (never raised; each drops the proposal):
  timeout        the request timed out (not retried: a slow server would stall the step k times over)
  rate_limited   HTTP 429 on every attempt: 1 + max_retries attempts, exponential backoff
                 backoff_base_s * 2**attempt (capped at backoff_max_s, honouring Retry-After up to the cap)
  api_error      5xx / 408 / 409 / connection errors after the same retries; other HTTP errors (400,
                 401, 404...) and unusable responses at once
  budget         the step's max_calls_per_step model calls are spent (begin_step resets; no request made)
The client's own retries are disabled so that this policy is the only one.

API key: read from the environment variable named by api_key_env. Missing -> ValueError at
construction, unless base_url points to a self-hosted server (loopback or private IP, `localhost`, or a
single-label host name such as `vllm`), which gets the placeholder key "EMPTY" (vLLM, SGLang, Ollama
ignore it).

Cost: usage.prompt_tokens / completion_tokens summed over the proposal's calls; cost_usd =
in / 1e6 * usd_per_m_input + out / 1e6 * usd_per_m_output. With cache=True and a workdir, every
response is stored in WORKDIR/judge_cache under the hash of (model, messages, tools): identical
requests of a resumed run are served from disk at no cost and count as no call.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import random
import threading
import time
import urllib.parse
from typing import Any, Callable

import numpy as np

from prover_jax.judges.base import (API_ERROR, BUDGET, NO_PROPOSAL, NO_TOOL_CALL, OK, RATE_LIMITED, SCHEMA,
                                    TIMEOUT, Judge, Proposal, config_get, register, render_trajectory,
                                    segment_problem)
from prover_jax.judges.cache import ResponseCache, content_key
from prover_jax.judges.tools import FailureIndex, as_int, parse_arguments, tool_specs

log = logging.getLogger(__name__)

SYSTEM_BRIEF = """\
You assist a reinforcement-learning trainer with credit assignment. An agent attempted the same task \
several times from the same start. One attempt SUCCEEDED; the others FAILED.

Your job:
1. Work out ONE failure mode that recurs across the failed attempts (a mistake several of them make, \
or a step they all miss).
2. Pick the SHORTEST stretch of consecutive turns of the successful attempt in which the agent avoids \
that failure mode or does what the failed attempts did not.

Rules for the stretch (turn indices of the successful attempt, inclusive):
- at most {max_turns} turn(s): end_turn - start_turn + 1 <= {max_turns};
- 0 <= start_turn <= end_turn <= {last_allowed}: it must end before the final turn ({final});
- every turn in it must be a valid action (turns marked INVALID are not allowed).

Inspect the failed attempts with search_trajectory and get_segment as needed (their ids are given \
below), then answer by calling propose_segment exactly once."""

RETRY_STATUS = (408, 409)
DEFAULT_MAX_TOOL_ROUNDS = 8


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


class _Usage:
    def __init__(self):
        self.calls = self.cached = self.input_tokens = self.output_tokens = 0


@register("openai")
class OpenAIJudge(Judge):
    """See the module docstring. `http_client` (an httpx.Client) and `sleep` are for tests."""

    def __init__(self, *, model: str, base_url: str = "", api_key_env: str = "OPENAI_API_KEY",
                 api_key: str | None = None, timeout_s: float = 60.0, max_retries: int = 4,
                 max_calls_per_step: int = 64, usd_per_m_input: float = 0.0, usd_per_m_output: float = 0.0,
                 cache: bool = True, workdir: str | None = None, max_repairs: int = 3,
                 max_tool_rounds: int = DEFAULT_MAX_TOOL_ROUNDS, backoff_base_s: float = 1.0,
                 backoff_max_s: float = 30.0, preview_chars: int = 2500, http_client: Any = None,
                 sleep: Callable[[float], None] = time.sleep):
        import openai

        self._openai = openai
        self.model, self.base_url = model, base_url or ""
        if api_key is None:
            api_key = os.environ.get(api_key_env) if api_key_env else None
        if not api_key:
            if not is_self_hosted(self.base_url):
                where = self.base_url or "the OpenAI API (base_url is empty)"
                raise ValueError(f"openai judge: no API key for {where}: set the environment variable "
                                 f"{api_key_env or '(config judge.openai.api_key_env is empty)'}, or point "
                                 "judge.openai.base_url to a self-hosted server")
            api_key = "EMPTY"
        self.client = openai.OpenAI(api_key=api_key, base_url=self.base_url or None, timeout=float(timeout_s),
                                    max_retries=0, http_client=http_client)
        self.max_retries, self.max_calls_per_step = int(max_retries), int(max_calls_per_step)
        self.usd_per_m_input, self.usd_per_m_output = float(usd_per_m_input), float(usd_per_m_output)
        self.max_repairs, self.max_tool_rounds = int(max_repairs), int(max_tool_rounds)
        self.backoff_base_s, self.backoff_max_s = float(backoff_base_s), float(backoff_max_s)
        self.preview_chars = int(preview_chars)
        self.cache = ResponseCache(_join(workdir, "judge_cache")) if cache and workdir else None
        self._sleep, self._jitter = sleep, random.Random()
        self._lock = threading.Lock()
        self._step_calls = 0

    @classmethod
    def from_config(cls, section, workdir=None, **kwargs):
        """`section` is the trainer's config.judge (uses .openai and .max_repairs) or its openai part."""
        sub = config_get(section, "openai", section)
        keys = ("base_url", "model", "api_key_env", "timeout_s", "max_retries", "max_calls_per_step",
                "usd_per_m_input", "usd_per_m_output", "cache", "max_tool_rounds", "backoff_base_s",
                "backoff_max_s", "preview_chars")
        args = {k: config_get(sub, k) for k in keys if config_get(sub, k) is not None}
        repairs = config_get(section, "max_repairs", config_get(sub, "max_repairs"))
        if repairs is not None:
            args["max_repairs"] = repairs
        args.setdefault("model", "gpt-4.1-mini")
        return cls(**{**args, "workdir": workdir, **kwargs})

    def begin_step(self) -> None:
        with self._lock:
            self._step_calls = 0

    def close(self) -> None:
        self.client.close()

    # --------------------------------------------------------------------------------------- one call

    def _backoff(self, attempt: int, error) -> float:
        delay = self.backoff_base_s * 2 ** attempt
        response = getattr(error, "response", None)
        try:
            delay = max(delay, float(response.headers.get("retry-after")))
        except (AttributeError, TypeError, ValueError):
            pass
        return min(delay, self.backoff_max_s) * self._jitter.uniform(1.0, 1.25)

    def _request(self, payload: dict) -> tuple[dict | None, str, str]:
        """One chat completion with retries: (response dict, 'ok', '') or (None, reason, detail)."""
        oa = self._openai
        reason, detail, error = API_ERROR, "", None
        for attempt in range(self.max_retries + 1):
            if attempt:
                self._sleep(self._backoff(attempt - 1, error))
            try:
                completion = self.client.chat.completions.create(**payload)
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
            choices = data.get("choices")
            if not choices or not isinstance(choices[0].get("message"), dict):
                return None, API_ERROR, f"response without a message: {str(data)[:300]}"
            return data, OK, ""
        return None, reason, f"{detail} (after {self.max_retries + 1} attempts)"

    def _complete(self, messages: list[dict], tools: list[dict], usage: _Usage) -> tuple[dict | None, str, str]:
        payload = {"model": self.model, "messages": messages, "tools": tools}
        key = content_key(payload) if self.cache else None
        if self.cache:
            hit = self.cache.get(key)
            if hit is not None and hit.get("choices") and isinstance(hit["choices"][0].get("message"), dict):
                usage.cached += 1
                return hit, OK, ""
        with self._lock:
            if self._step_calls >= self.max_calls_per_step:
                return None, BUDGET, f"the step's budget of {self.max_calls_per_step} judge calls is spent"
            self._step_calls += 1
        usage.calls += 1
        data, reason, detail = self._request(payload)
        if data is not None:
            tokens = data.get("usage") or {}
            usage.input_tokens += int(tokens.get("prompt_tokens") or 0)
            usage.output_tokens += int(tokens.get("completion_tokens") or 0)
            if self.cache:
                self.cache.put(key, data)
        return data, reason, detail

    # ---------------------------------------------------------------------------------------- the loop

    def messages(self, success, failures, max_segment_turns: int) -> list[dict]:
        """The opening conversation: the brief, the successful run in full, previews of the failed ones."""
        n = success.num_turns
        system = SYSTEM_BRIEF.format(max_turns=max_segment_turns, last_allowed=n - 2, final=n - 1)
        index = FailureIndex(failures)
        user = (f"SUCCESSFUL attempt (turns 0..{n - 1}):\n{render_trajectory(success, full=True)}\n\n"
                f"FAILED attempts (compact previews; ids 0..{len(failures) - 1}):\n"
                f"{index.previews(self.preview_chars) if failures else '(none)'}")
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def _result(self, usage: _Usage, reason: str, repairs: int, segment=None, rationale: str = "",
                failure_mode: str = "") -> Proposal:
        cost = usage.input_tokens / 1e6 * self.usd_per_m_input + usage.output_tokens / 1e6 * self.usd_per_m_output
        return Proposal(segment, reason, rationale=rationale, failure_mode=failure_mode, calls=usage.calls,
                        input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, cost_usd=cost,
                        repairs=repairs, cached=usage.cached > 0 and usage.calls == 0)

    def _check(self, raw, success, max_segment_turns) -> tuple[tuple[int, int] | None, dict, tuple | None]:
        args, problem = parse_arguments(raw)
        if args is None:
            return None, {}, (SCHEMA, problem)
        l, r = as_int(args.get("start_turn")), as_int(args.get("end_turn"))
        if l is None or r is None:
            return None, args, (SCHEMA, "start_turn and end_turn must be integers, got "
                                        f"{args.get('start_turn')!r} and {args.get('end_turn')!r}")
        return (l, r), args, segment_problem(success, l, r, max_segment_turns)

    def _propose(self, success, failures, *, max_segment_turns: int, rng: np.random.Generator) -> Proposal:
        usage, repairs, last = _Usage(), 0, None
        index = FailureIndex(failures)
        tools = tool_specs(max_segment_turns)
        messages = self.messages(success, failures, max_segment_turns)
        for _ in range(self.max_tool_rounds + self.max_repairs):
            data, reason, detail = self._complete(messages, tools, usage)
            if data is None:
                return self._result(usage, reason, repairs, rationale=detail)
            msg = data["choices"][0]["message"]
            calls = []
            for j, c in enumerate(msg.get("tool_calls") or []):
                fn = c.get("function") or {}
                args = fn.get("arguments")
                calls.append({"id": c.get("id") or f"call_{j}", "type": "function",
                              "function": {"name": str(fn.get("name") or ""),
                                           "arguments": args if isinstance(args, str) else json.dumps(args)}})
            assistant = {"role": "assistant", "content": msg.get("content") or ""}
            if calls:
                assistant["tool_calls"] = calls
            messages.append(assistant)
            if not calls:
                last = (NO_TOOL_CALL, "the reply called no tool")
                if repairs >= self.max_repairs:
                    return self._result(usage, NO_TOOL_CALL, repairs, rationale=str(msg.get("content") or ""))
                repairs += 1
                messages.append({"role": "user", "content": "You did not call a tool. Inspect the failed "
                                 "attempts if needed, then answer by calling propose_segment."})
                continue
            for call in calls:
                name, raw = call["function"]["name"], call["function"]["arguments"]
                if name == "propose_segment":
                    segment, args, problem = self._check(raw, success, max_segment_turns)
                    rationale, mode = str(args.get("rationale") or ""), str(args.get("failure_mode") or "")
                    if problem is None:
                        return self._result(usage, OK, repairs, segment, rationale, mode)
                    last = problem
                    if repairs >= self.max_repairs:
                        return self._result(usage, problem[0], repairs,
                                            rationale=f"{rationale} [rejected: {problem[1]}]".strip(),
                                            failure_mode=mode)
                    repairs += 1
                    content = (f"REJECTED ({problem[0]}): {problem[1]}. Call propose_segment again with a "
                               f"valid segment (repair {repairs} of {self.max_repairs}).")
                else:
                    args, problem = parse_arguments(raw)
                    if args is None:
                        content = f"error: {problem}"
                    elif name == "search_trajectory":
                        content = index.search(args.get("query"), args.get("k", 5))
                    elif name == "get_segment":
                        content = index.segment(args.get("traj_id"), args.get("start_turn"), args.get("end_turn"))
                    else:
                        content = (f"error: unknown tool {name!r}; use search_trajectory, get_segment or "
                                   "propose_segment")
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
        reason, detail = last if last is not None else (NO_PROPOSAL, "")
        return self._result(usage, reason, repairs,
                            rationale=f"no valid proposal within {self.max_tool_rounds + self.max_repairs} "
                                      f"model calls {detail}".strip())


def _join(root: str, name: str) -> str:
    """root/name for a local folder or a gs:// one."""
    return f"{root.rstrip('/')}/{name}" if "://" in str(root) else os.path.join(root, name)
