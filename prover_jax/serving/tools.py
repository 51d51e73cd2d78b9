"""Qwen-format tool calls in generated text -> OpenAI `tool_calls`.

Qwen chat templates ask the model to answer a tool call in one of two formats (both are parsed):

    <tool_call>                                            <tool_call>
    {"name": "propose_segment", "arguments": {...}}        <function=propose_segment>
    </tool_call>                                           <parameter=start_turn>
                                                           2
                                                           </parameter>
                                                           </function>
                                                           </tool_call>
    JSON (Qwen2.5 / Qwen3)                                 XML (Qwen3-Coder / Qwen3.5, qwen3_xml)

`parse_tool_calls(text, tools)` -> (content, tool_calls), each call
{"id": "call_...", "type": "function", "function": {"name", "arguments": JSON text}}:
  JSON  `<tool_call>`, whitespace, one JSON object with a string "name" and "arguments" that are an
        object (or a string holding one), whitespace, `</tool_call>`; anything else is no call
  XML   `tool_xml`: markup inside a value stays in it; a malformed or cut-off call is recovered as
        vLLM's qwen3_xml / qwen3_coder parsers recover it; values are typed by the function's parameter
        schema in `tools` (anyOf / oneOf included), read as JSON literals without one
  calls follow one another: a call's text (its values included) is never searched for another
  content = the text before the first call, verbatim (None when empty); the text when there is no call
The arguments are always strict JSON (NaN / Infinity are read as text, never as numbers). Never raises.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from prover_jax.serving import tool_xml as X

OPEN, CLOSE = "<tool_call>", "</tool_call>"
FORMATS = ("auto", "json", "qwen3_xml")  # prover-serve --tool_call_format: what forced calls are constrained to


def call_id() -> str:
    return "call_" + secrets.token_hex(12)


def _json_call(text: str, pos: int) -> tuple[dict, int] | None:
    """({"name", "arguments" (JSON text)}, where it ends) of the JSON object at text[pos]; None when it is
    not a call."""
    try:
        obj, end = X.DECODER.raw_decode(text, pos)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args: Any = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = X.loads(args) if args.strip() else {}
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return {"name": obj["name"], "arguments": json.dumps(args, ensure_ascii=False)}, end


def _schemas(tools: list[dict] | None) -> dict[str, dict]:
    """{function name: {parameter: its schema}} of the request's tools."""
    out = {}
    for t in tools if isinstance(tools, list) else ():
        fn = t.get("function") if isinstance(t, dict) else None
        params = fn.get("parameters") if isinstance(fn, dict) else None
        props = params.get("properties") if isinstance(params, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            out[fn["name"]] = props if isinstance(props, dict) else {}
    return out


def _xml_arguments(params: list[tuple[str, str]], props: dict) -> str:
    args = {key: X.value(raw, X.kinds(props[key]) if key in props else None) for key, raw in params}
    return json.dumps(args, ensure_ascii=False)


def parse_tool_calls(text: str, tools: list[dict] | None = None) -> tuple[str | None, list[dict]]:
    schemas = _schemas(tools)
    reply = X.Reply(text, {name: set(props) or None for name, props in schemas.items()})
    calls, first, k, block = [], None, 0, False  # block: a <tool_call> block goes on with another function
    while k < len(reply.tags):
        tag, start, fn = reply.tags[k], reply.tags[k].start, None
        if tag.kind == "call":
            pos = X.skip_ws(text, tag.end)
            if text.startswith("{", pos):
                parsed = _json_call(text, pos)
                close = None if parsed is None else reply.next_tag(parsed[1])
                if close is not None and reply.tags[close].kind == "/call":
                    calls.append(parsed[0])
                    first = start if first is None else first
                    k, block = close + 1, False
                    continue
            fn, wrapped = reply.next_tag(tag.end), True
        elif tag.kind == "fn" and (block or reply.opens(k)):
            fn, wrapped = k, block
        if fn is None or reply.tags[fn].kind != "fn" or not reply.tags[fn].name:
            k, block = k + 1, False
            continue
        name = reply.tags[fn].name
        props = schemas.get(name, {})
        read = reply.call(fn, wrapped)
        calls.append({"name": name, "arguments": _xml_arguments(read.params, props)})
        first = start if first is None else first
        k, block = reply.first_tag(read.end), read.more
    if not calls:
        return text, []
    return text[:first] or None, [{"id": call_id(), "type": "function", "function": c} for c in calls]
