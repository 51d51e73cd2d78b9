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

`parse_tool_calls(text, tools)` returns (content, tool_calls): every well-formed block becomes
{"id": "call_...", "type": "function", "function": {"name", "arguments": JSON text}}. JSON: an object
with a string "name" and "arguments" that are an object (or a string holding one). XML: a
`<function=NAME>` with `<parameter=KEY>` children; a value is typed by the tool's JSON schema when
`tools` gives it (integer, number, boolean, null, object / array as JSON, else the text; a list of
types such as ["integer", "null"]: the first that reads, string last; an untyped enum of strings is a
string, as the forced-call grammar writes it bare), otherwise a JSON literal
(number, true / false / null, object, array) is read as one and anything else is a string.
A malformed block (bad JSON, NaN / Infinity included, no name, unterminated) is left in the content
verbatim; a block starts at the last `<tool_call>` before its `</tool_call>` (an earlier one is text
mentioning the tag). Content is the text with the parsed blocks removed (stripped; None when nothing
else is left and there is at least one call). NaN / Infinity are read as text, never as numbers: the
arguments are always strict JSON. Never raises.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"
FORMATS = ("auto", "json", "qwen3_xml")  # prover-serve --tool_call_format: what forced calls are constrained to
# a block opens at the last <tool_call> before its </tool_call>: an earlier one is text that mentions the tag
_BLOCK = re.compile(re.escape(OPEN) + r"((?:(?!" + re.escape(OPEN) + r").)*?)" + re.escape(CLOSE), re.DOTALL)


def call_id() -> str:
    return "call_" + secrets.token_hex(12)


_FUNCTION = re.compile(r"\s*<function=([^>\n]+)>(.*?)</function>\s*", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.DOTALL)


def _type(schema: dict) -> Any:
    """A property's JSON-schema type (a name or a list of names); an untyped enum of strings is a string
    (when none holds "<": the forced-call grammar writes those as JSON)."""
    enum = schema.get("enum")
    if "type" not in schema and isinstance(enum, list) and enum and all(
            isinstance(v, str) and "<" not in v for v in enum):
        return "string"
    return schema.get("type")


def _schema_types(tools: list[dict] | None) -> dict[str, dict[str, Any]]:
    """{function name: {parameter: its type (`_type`)}} of the request's tools."""
    out = {}
    for t in tools or []:
        fn = t.get("function", {})
        props = (fn.get("parameters") or {}).get("properties") or {}
        out[fn.get("name")] = {k: _type(v) for k, v in props.items() if isinstance(v, dict)}
    return out


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # NaN / Infinity are not JSON: the arguments must stay parseable
        raise ValueError(text)
    return value


def _loads(text: str) -> Any:
    """json.loads refusing NaN, Infinity and numbers that overflow to it."""
    return json.loads(text, parse_constant=_finite, parse_float=_finite)


def _typed(text: str, kind: Any) -> Any:
    """`text` as JSON-schema type `kind` (one type, or a list of them: the first that reads, a string
    last); ValueError when it is none of them."""
    if isinstance(kind, list):
        for k in sorted(kind, key=lambda k: k == "string"):
            try:
                return _typed(text, k)
            except ValueError:
                pass
        raise ValueError(kind)
    if kind == "string":
        return text
    if kind == "integer":
        return int(text.strip())
    if kind == "number":
        try:
            return int(text.strip())
        except ValueError:
            return _finite(text.strip())
    if kind == "boolean" and text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    if kind == "null" and text.strip() == "null":
        return None
    value = _loads(text)
    if kind in ("object", "array") or kind is None:
        return value
    raise ValueError(kind)


def _xml_value(raw: str, kind: Any) -> Any:
    """A parameter's text (one newline trimmed at each end) as the schema's type says (the text when
    it is not one)."""
    text = raw[1:] if raw.startswith("\n") else raw
    text = text[:-1] if text.endswith("\n") else text
    try:
        return _typed(text, kind)
    except ValueError:
        return text


def parse_xml_block(body: str, types: dict[str, dict[str, str]] | None = None) -> dict | None:
    """{"name", "arguments" (JSON text)} of an XML block's body, or None when it is malformed."""
    m = _FUNCTION.fullmatch(body)
    if m is None or not m.group(1).strip():
        return None
    name, inner = m.group(1).strip(), m.group(2)
    kinds = (types or {}).get(name, {})
    args = {}
    for p in _PARAMETER.finditer(inner):
        key = p.group(1).strip()
        args[key] = _xml_value(p.group(2), kinds.get(key))
    if _PARAMETER.sub("", inner).strip():  # text outside the parameters: not a call this parser knows
        return None
    return {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}


def parse_block(body: str, types: dict[str, dict[str, str]] | None = None) -> dict | None:
    """{"name", "arguments" (JSON text)} of one block's body (JSON or XML), or None when malformed."""
    if body.lstrip().startswith("<function="):
        return parse_xml_block(body, types)
    try:
        obj = _loads(body.strip())
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args: Any = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = _loads(args) if args.strip() else {}
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return {"name": obj["name"], "arguments": json.dumps(args, ensure_ascii=False)}


def parse_tool_calls(text: str, tools: list[dict] | None = None) -> tuple[str | None, list[dict]]:
    calls, kept, pos = [], [], 0
    types = _schema_types(tools)
    for m in _BLOCK.finditer(text):
        parsed = parse_block(m.group(1), types)
        if parsed is None:
            continue  # stays in the content
        kept.append(text[pos:m.start()])
        pos = m.end()
        calls.append({"id": call_id(), "type": "function", "function": parsed})
    kept.append(text[pos:])
    content = "".join(kept).strip() if calls else text
    if calls and not content:
        content = None
    return content, calls
