"""The OpenAI chat-completions subset prover-serve speaks: request validation and response shapes.

`parse_chat_request(body)` turns a JSON body into a `ChatRequest` or raises `ApiError` (status 400,
message naming the field); `error_body` is OpenAI's error shape:

    {"error": {"message": ..., "type": "invalid_request_error", "param": ..., "code": ...}}

Supported: model, messages (system / developer / user / assistant / tool roles; text content or
text parts; assistant tool_calls and reasoning_content (or reasoning): an earlier turn's thinking,
passed to the chat template, which may render it), temperature, top_p (0: the most likely token only), max_tokens /
max_completion_tokens, seed, stop (a string or up to 4), n, stream (+ stream_options.include_usage), tools, tool_choice
(auto / none / required / a named function), response_format (text / json_object / json_schema),
logprobs (each generated token's log-probability under the model's raw distribution, before
temperature and top-p, as vLLM reports them by default); top_logprobs must be 0 (the engine records
the chosen token only). Other fields (user, penalties, ...) are accepted and ignored.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_STOPS = 4


class ApiError(Exception):
    """An HTTP error in OpenAI's shape; `headers` are extra response headers (Retry-After)."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def bad(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


@dataclasses.dataclass
class ChatRequest:
    model: str
    messages: list[dict]
    temperature: float = 1.0
    top_p: float = 1.0  # in [0, 1]; 0: only the most likely token (sampled as temperature 0)
    max_tokens: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    n: int = 1
    stream: bool = False
    include_usage: bool = False
    tools: list[dict] = dataclasses.field(default_factory=list)
    tool_choice: str | dict = "auto"  # "auto" | "none" | "required" | {"name": ...}
    response_format: dict | None = None  # None (text) | {"type": "json_object"} | {"type": "json_schema", ...}
    logprobs: bool = False  # return each generated token's log-probability
    chat_template_kwargs: dict = dataclasses.field(default_factory=dict)  # e.g. {"enable_thinking": False}
    max_thinking_tokens: int | None = None  # a thinking model's think block is closed after this many tokens

    @property
    def forced_tool(self) -> str | None:
        """The function name tool_choice forces, if any."""
        return self.tool_choice["name"] if isinstance(self.tool_choice, dict) else None


def _number(body: dict, name: str, default, lo: float, hi: float):
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise bad(f"{name} must be a number in [{lo}, {hi}], got {value!r}", name)
    return float(value)


def _int(body: dict, name: str, lo: int, hi: int | None = None):
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        limit = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise bad(f"{name} must be an integer {limit}, got {value!r}", name)
    return value


def unicode_error(text: str) -> str | None:
    """What makes `text` impossible to encode as UTF-8 (a lone surrogate, which a JSON body may spell
    as \\ud800), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"it holds a lone surrogate {text[e.start]!r} at character {e.start} (not valid Unicode)"
    return None


def message_text(content: Any, where: str) -> str | None:
    """Text of a message's content: a string, None, or a list of {"type": "text", "text"} parts; 400
    for text that is not valid Unicode."""
    if isinstance(content, list):
        parts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise bad(f"{where}.content: only text parts are supported, got {str(part)[:80]}", where)
            parts.append(part["text"])
        content = "".join(parts)
    if content is None:
        return None
    if not isinstance(content, str):
        raise bad(f"{where}.content must be a string or a list of text parts", where)
    error = unicode_error(content)
    if error:
        raise bad(f"{where}.content: {error}", f"{where}.content")
    return content


def _messages(raw: Any) -> list[dict]:
    if not isinstance(raw, list) or not raw:
        raise bad("messages must be a non-empty list", "messages")
    out = []
    for i, m in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad(f"{where} must be an object", where)
        role = m.get("role")
        if role not in ROLES:
            raise bad(f"{where}.role: unknown role {role!r}; expected one of {', '.join(ROLES)}", f"{where}.role")
        msg = {"role": "system" if role == "developer" else role, "content": message_text(m.get("content"), where)}
        if role == "assistant" and m.get("tool_calls"):
            if not isinstance(m["tool_calls"], list):
                raise bad(f"{where}.tool_calls must be a list", f"{where}.tool_calls")
            calls = []
            for c in m["tool_calls"]:
                fn = c.get("function") if isinstance(c, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise bad(f"{where}.tool_calls: each call needs function.name", f"{where}.tool_calls")
                calls.append({"id": c.get("id"), "type": "function",
                              "function": {"name": fn["name"], "arguments": _arguments(fn.get("arguments"))}})
            msg["tool_calls"] = calls
        elif msg["content"] is None:
            raise bad(f"{where}.content is required for role {role!r}", f"{where}.content")
        key = "reasoning_content" if "reasoning_content" in m else "reasoning"
        if role == "assistant" and m.get(key) is not None:  # an earlier turn's thinking: the template may render it
            if not isinstance(m[key], str) or unicode_error(m[key]):
                raise bad(f"{where}.{key} must be a string of valid Unicode", f"{where}.{key}")
            msg["reasoning_content"] = m[key]
        if role == "tool" and m.get("tool_call_id") is not None:
            msg["tool_call_id"] = m["tool_call_id"]
        if isinstance(m.get("name"), str):
            msg["name"] = m["name"]
        out.append(msg)
    return out


def _arguments(raw: Any) -> Any:
    """Tool-call arguments as a dict for the chat template (JSON text parsed; left as is if it isn't;
    "" or None, a call without arguments, is {} as the output parser reads it)."""
    import json

    if isinstance(raw, str) and not raw.strip():
        return {}
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
            return value if isinstance(value, dict) else raw
        except ValueError:
            return raw
    return raw if raw is not None else {}


def _tools(raw: Any) -> list[dict]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise bad("tools must be a list", "tools")
    out = []
    for i, t in enumerate(raw):
        fn = t.get("function") if isinstance(t, dict) and t.get("type", "function") == "function" else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise bad(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ...}}}}", f"tools[{i}]")
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise bad(f"tools[{i}].function.parameters must be a JSON schema object", f"tools[{i}]")
        if not isinstance(params.get("properties") or {}, dict):
            raise bad(f"tools[{i}].function.parameters.properties must be an object", f"tools[{i}]")
        out.append({"type": "function", "function": {**fn, "parameters": params}})
    return out


def _tool_choice(raw: Any, tools: list[dict]) -> str | dict:
    if raw is None:
        return "auto"
    if raw in ("auto", "none", "required"):
        if raw == "required" and not tools:
            raise bad("tool_choice 'required' needs tools", "tool_choice")
        return raw
    fn = raw.get("function") if isinstance(raw, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str):
        raise bad("tool_choice must be 'auto', 'none', 'required' or {'type': 'function', 'function': "
                  "{'name': ...}}", "tool_choice")
    if name not in [t["function"]["name"] for t in tools]:
        raise bad(f"tool_choice names function {name!r}, which is not in tools", "tool_choice")
    return {"name": name}


def _response_format(raw: Any) -> dict | None:
    if raw is None or (isinstance(raw, dict) and raw.get("type") == "text"):
        return None
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        spec = raw.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise bad("response_format.json_schema.schema must be a JSON schema object", "response_format")
        return {"type": "json_schema", "schema": schema, "name": spec.get("name")}
    raise bad(f"response_format.type must be text, json_object or json_schema, got {kind!r}", "response_format")


def parse_chat_request(body: Any, max_n: int = 16, max_messages: int = 0, max_tool_bytes: int = 0) -> ChatRequest:
    """The request `body` checked and normalised; `max_messages` / `max_tool_bytes` (0: no limit) bound
    the number of messages and the size of the tools' JSON (prover-serve's --max_messages and
    --max_tool_bytes, which the errors name)."""
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    raw_messages, raw_tools = body.get("messages"), body.get("tools")
    if max_messages and isinstance(raw_messages, list) and len(raw_messages) > max_messages:
        raise bad(f"messages: {len(raw_messages)} messages; this server takes at most {max_messages} "
                  f"(--max_messages)", "messages", "too_many_messages")
    if max_tool_bytes and raw_tools is not None:
        import json

        size = len(json.dumps(raw_tools, separators=(",", ":")).encode())
        if size > max_tool_bytes:
            raise bad(f"tools: {size} bytes of JSON; this server takes at most {max_tool_bytes} "
                      f"(--max_tool_bytes)", "tools", "tools_too_large")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad("model is required", "model")
    stop = body.get("stop")
    stops = () if stop is None else (stop,) if isinstance(stop, str) else stop
    if not isinstance(stops, (list, tuple)) or len(stops) > MAX_STOPS or any(
            not isinstance(s, str) or not s for s in stops):
        raise bad(f"stop must be a non-empty string or a list of at most {MAX_STOPS}", "stop")
    max_tokens = _int(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", 1)
    stream = body.get("stream") or False
    if not isinstance(stream, bool):
        raise bad("stream must be a boolean", "stream")
    options = body.get("stream_options") or {}
    tools = _tools(body.get("tools"))
    logprobs = body.get("logprobs") or False
    if not isinstance(logprobs, bool):
        raise bad("logprobs must be a boolean", "logprobs")
    if _int(body, "top_logprobs", 0, 20):
        raise bad("top_logprobs must be 0 on this server: the engine records the log-probability of the "
                  "sampled token only (logprobs=true returns it)", "top_logprobs")
    return ChatRequest(
        model=model, messages=_messages(body.get("messages")),
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0), top_p=_number(body, "top_p", 1.0, 0.0, 1.0),
        max_tokens=max_tokens, seed=_int(body, "seed", -2 ** 63, 2 ** 64), stop=tuple(stops),
        n=_int(body, "n", 1, max_n) or 1, stream=stream,
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        tools=tools, tool_choice=_tool_choice(body.get("tool_choice"), tools),
        response_format=_response_format(body.get("response_format")), logprobs=logprobs,
        chat_template_kwargs=_template_kwargs(body.get("chat_template_kwargs")),
        max_thinking_tokens=_int(body, "max_thinking_tokens", 0))


RESERVED_TEMPLATE_KWARGS = ("messages", "conversation", "tools", "add_generation_prompt", "tokenize",
                            "return_dict", "chat_template", "continue_final_message")


def _template_kwargs(raw: Any) -> dict:
    """Extra variables for the chat template (vLLM's `chat_template_kwargs`)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(k, str) for k in raw):
        raise bad("chat_template_kwargs must be an object", "chat_template_kwargs")
    taken = [k for k in raw if k in RESERVED_TEMPLATE_KWARGS]
    if taken:
        raise bad(f"chat_template_kwargs may not set {', '.join(taken)}: the server sets them",
                  "chat_template_kwargs")
    return dict(raw)


# Responses.
def completion_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def chat_completion(cid: str, model: str, choices: list[dict], use: dict) -> dict:
    return {"id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": choices, "usage": use, "system_fingerprint": None}


def chunk(cid: str, model: str, created: int, choices: list[dict], use: dict | None = None) -> dict:
    out = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": choices}
    if use is not None:
        out["usage"] = use
    return out


def models_list(model: str, created: int) -> dict:
    return {"object": "list", "data": [{"id": model, "object": "model", "created": created,
                                        "owned_by": "prover_jax"}]}
