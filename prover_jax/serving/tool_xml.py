"""Qwen's XML tool calls (Qwen3-Coder / Qwen3.5, the qwen3_xml format) read from generated text.

    <tool_call>          a call opens at `<tool_call>` followed (after whitespace) by `<function=NAME>`, or at
    <function=NAME>      a bare `<function=NAME>` followed by `<parameter=`, `</function>` or the end of the
    <parameter=KEY>      text; one block may hold several functions; an empty NAME, or a reply cut inside
    VALUE                the tag, is no call
    </parameter>
    </function>
    </tool_call>

A call is read by the first of these readings that reads it whole:
  nested     every closing tag is there; a VALUE ends at a `</parameter>` followed by whitespace and
             `<parameter=` or `</function>`, a complete call written inside it (a doc about tool calls)
             being part of it; a `<parameter=KEY>` naming another of the function's parameters (any, for
             an unknown function) not given yet is no part of a value: its `</parameter>` is missing
  first      the same, a VALUE ending at the first such `</parameter>`
  recovered  (malformed or cut off) text outside the parameters is ignored; a VALUE ends at a
             `</parameter>` followed by `<parameter=`, `</function>`, `</tool_call>`, the next call or the
             end of the text, or, without one, at such a `<parameter=KEY>`, at a `</function>` followed
             by `</tool_call>`, the next call or the end, at `</tool_call>`, at the next call, or at the end
             of the text (less a trailing piece of `</parameter>`); the call ends at its closing tags, the
             next call or the end of the text. Every parameter whose `<parameter=KEY>` tag is whole is kept.

A VALUE (one newline trimmed at each end) is typed by the parameter's schema. `kinds` gives its types:
`type` (a name or a list; aliases such as int, float, str, dict, list read as the JSON type, other names
as string), else those of its anyOf / oneOf / allOf variants, `$ref` an object, an untyped enum / const
those of its values, else none. With types: `null` (any case) is null unless string is the only type;
otherwise the first type, string last, that reads it: integer (int), number (int, else a finite float),
boolean (true / false, any case), object / array (JSON, else a Python literal container or None, read by
ast.literal_eval on bounded input, JSON data only), null, string (the text); the text when none does.
Without types: a JSON literal, else the text. NaN / Infinity never become numbers.
"""

from __future__ import annotations

import ast
import bisect
import json
import math
import re
from typing import Any, NamedTuple

_TAG = re.compile(r"<(/?)(tool_call|function|parameter)(?:=([^<>\n]*))?>")
_KINDS = {"tool_call": "call", "function": "fn", "parameter": "p"}
_OPENINGS = ("<tool_call>", "<function=", "<parameter=", "</tool_call>", "</function>", "</parameter>")
_CUT_NAME = re.compile(r"<(?:function|parameter)=[^<>\n]*")
_WS = re.compile(r"[ \t\r\n]*")
MAX_NESTING = 4  # calls written inside values inside values ...
WORK = 50_000  # tag visits of one reply's readings; past it values end at their next tag
MAX_LITERAL_CHARS, MAX_LITERAL_DEPTH = 100_000, 64
MAX_CUT_TAG = 256  # the longest tag piece a cut-off reply is read as ending in


class Tag(NamedTuple):
    kind: str  # call, /call, fn, /fn, p, /p
    start: int
    end: int
    name: str


class Read(NamedTuple):
    end: int  # where the call's text ends
    params: list  # [(key, raw value)]
    more: bool  # its <tool_call> block goes on with another <function=


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # NaN / Infinity are not JSON: the arguments must stay parseable
        raise ValueError(text)
    return value


DECODER = json.JSONDecoder(parse_constant=_finite, parse_float=_finite)


def loads(text: str) -> Any:
    """json.loads refusing NaN, Infinity and numbers that overflow to it (ValueError)."""
    try:
        return DECODER.decode(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def skip_ws(text: str, pos: int) -> int:
    """The position of the first non-whitespace character of `text` from `pos`."""
    return _WS.match(text, pos).end()


class Reply:
    """The markup of one reply and the readings of the calls in it."""

    def __init__(self, text: str, known: dict[str, set[str] | None] | None = None):
        """`known`: {function name: its parameter names, or None when unknown}."""
        self.text, self.known = text, known or {}
        self.tags = []
        for m in _TAG.finditer(text):  # `<function=` / `<parameter=` carry a name; the other tags none
            closing, name = m.group(1) == "/", m.group(3)
            if (name is None) == (closing or m.group(2) == "tool_call"):
                kind = ("/" if closing else "") + _KINDS[m.group(2)]
                self.tags.append(Tag(kind, m.start(), m.end(), (name or "").strip()))
        self.starts = [t.start for t in self.tags]
        self.at = {t.start: i for i, t in enumerate(self.tags)}
        self.memo: dict[int, int | None] = {}
        self.work = WORK

    def next_tag(self, pos: int) -> int | None:
        """The index of the tag at the first non-whitespace character from `pos`."""
        return self.at.get(skip_ws(self.text, pos))

    def first_tag(self, pos: int) -> int:
        """The index of the first tag starting at or after `pos`."""
        return bisect.bisect_left(self.starts, pos)

    def ends_after(self, pos: int) -> bool:
        """Only whitespace, or a tag cut by the end of the text, follows `pos`."""
        start = skip_ws(self.text, pos)
        if len(self.text) - start > MAX_CUT_TAG:
            return False
        rest = self.text[start:]
        return not rest or any(t.startswith(rest) for t in _OPENINGS) or bool(_CUT_NAME.fullmatch(rest))

    def followed(self, pos: int, kinds: tuple[str, ...], end: bool = False) -> bool:
        """Whitespace then a tag of `kinds` (or an opening call, or with `end` the end of the text) follows `pos`."""
        i = self.next_tag(pos)
        if i is not None:
            return self.tags[i].kind in kinds or ("open" in kinds and self.opens(i))
        return end and self.ends_after(pos)

    def opens(self, i: int) -> bool:
        """tags[i] opens a call: `<tool_call>` then `<function=`, or a bare `<function=` shaped as one."""
        tag = self.tags[i]
        if tag.kind == "call":
            j = self.next_tag(tag.end)
            return j is not None and self.tags[j].kind == "fn"
        return tag.kind == "fn" and self.followed(tag.end, ("p", "/fn"), end=True)

    # The strict readings (nested, first): every closing tag present.
    def ends_value(self, fn: int, key: str, given: list, name: str) -> bool:
        """A `<parameter=name>` inside the value of `key` starts another parameter (its `</parameter>`
        missing): `name` is another of the function's parameters (any, when unknown) not given yet."""
        known = self.known.get(self.tags[fn].name)
        return name != key and name not in given and (known is None or name in known)

    def strict(self, fn: int, wrapped: bool, nested: bool, depth: int = 0) -> tuple[int, Read] | None:
        """(index of the call's last tag, reading) of the call at tags[fn]; None when it does not read."""
        pos, params = self.tags[fn].end, []
        while True:
            i = self.next_tag(pos)
            if i is None:
                return None
            tag = self.tags[i]
            if tag.kind == "p":
                given = [key for key, _ in params]
                close = self.value_end(i + 1, nested, depth, lambda name: self.ends_value(fn, tag.name, given, name))
                if close is None:
                    return None
                params.append((tag.name, self.text[tag.end:self.tags[close].start]))
                pos = self.tags[close].end
            elif tag.kind == "/fn":
                if not wrapped:
                    return i, Read(tag.end, params, False)
                j = self.next_tag(tag.end)
                if j is not None and self.tags[j].kind == "/call":
                    return j, Read(self.tags[j].end, params, False)
                if j is not None and self.tags[j].kind == "fn":
                    return i, Read(tag.end, params, True)
                return None
            else:
                return None

    def value_end(self, k: int, nested: bool, depth: int, another) -> int | None:
        """The index of the `</parameter>` ending a value whose first tag is tags[k] (strict readings);
        None when `another(name)` says a `<parameter=name>` before it starts another parameter."""
        while k < len(self.tags):
            tag = self.tags[k]
            self.work -= 1
            if self.work < 0 or tag.kind == "p" and another(tag.name):
                return None
            if tag.kind == "/p" and self.followed(tag.end, ("p", "/fn")):
                return k
            if nested and tag.kind in ("call", "fn"):
                after = self.nested_call(k, depth + 1)
                if after is not None:
                    k = after
                    continue
            k += 1
        return None

    def nested_call(self, k: int, depth: int) -> int | None:
        """The index after the last tag of a complete call written at tags[k] inside a value, or None."""
        if depth > MAX_NESTING or self.work <= 0:
            return None
        if k not in self.memo:
            tag, fn, wrapped = self.tags[k], k, False
            if tag.kind == "call":
                fn, wrapped = self.next_tag(tag.end), True
            read = None
            if fn is not None and self.tags[fn].kind == "fn" and self.tags[fn].name:
                read = self.strict(fn, wrapped, True, depth)
            self.memo[k] = None if read is None or read[1].more else read[0] + 1
        return self.memo[k]

    # The recovered reading.
    def recover(self, fn: int, wrapped: bool) -> Read:
        """The reading of a malformed or cut-off call at tags[fn]."""
        params, k = [], fn + 1
        while k < len(self.tags):
            tag = self.tags[k]
            if tag.kind == "p":
                end, k, close = self.recover_value(fn, k, [key for key, _ in params])
                raw = self.text[tag.end:end]
                if not close:
                    raw = _less_cut_close(raw)
                params.append((tag.name, raw))
            elif tag.kind == "/fn":
                j = self.next_tag(tag.end)
                if j is not None and self.tags[j].kind == "/call":
                    return Read(self.tags[j].end, params, False)
                return Read(tag.end, params, wrapped and j is not None and self.tags[j].kind == "fn")
            elif tag.kind == "/call":
                return Read(tag.end, params, False)
            elif tag.kind in ("call", "fn") and self.opens(k):
                return Read(tag.start, params, False)
            else:
                k += 1
        return Read(len(self.text), params, False)

    def recover_value(self, fn: int, k: int, given: list[str]) -> tuple[int, int, bool]:
        """(end of the value at tags[k], index of the tag to read next, whether a `</parameter>` closed it)."""
        key, i = self.tags[k].name, k + 1
        while i < len(self.tags):
            tag = self.tags[i]
            self.work -= 1
            if self.work < 0:
                return tag.start, i, False
            if tag.kind in ("call", "fn"):
                after = self.nested_call(i, 1)
                if after is not None:
                    i = after
                    continue
                if self.opens(i):
                    return tag.start, i, False
            elif tag.kind == "/p" and self.followed(tag.end, ("p", "/fn", "/call", "open"), end=True):
                return tag.start, i + 1, True
            elif tag.kind == "p" and self.ends_value(fn, key, given, tag.name):
                return tag.start, i, False
            elif tag.kind == "/fn" and self.followed(tag.end, ("/call", "open"), end=True):
                return tag.start, i, False
            elif tag.kind == "/call":
                return tag.start, i, False
            i += 1
        return len(self.text), i, False

    def call(self, fn: int, wrapped: bool) -> Read:
        """The reading of the call at tags[fn] (the first of nested, first, recovered that reads it)."""
        for nested in (True, False):
            read = self.strict(fn, wrapped, nested)
            if read is not None:
                return read[1]
        return self.recover(fn, wrapped)


def _less_cut_close(raw: str) -> str:
    """A value cut by the end of the text, less a trailing piece of `</parameter>`."""
    for k in range(len("</parameter>") - 1, 1, -1):
        if raw.endswith("</parameter>"[:k]):
            return raw[:-k]
    return raw


# Typing values.
def _kind(name: Any) -> str:
    """A JSON-schema type name, with the aliases models' tool schemas use (int, float, str, dict, list ...)."""
    n = str(name).strip().lower()
    if n.startswith(("int", "uint", "long", "short", "unsigned")):
        return "integer"
    if n.startswith(("num", "float")):
        return "number"
    if n in ("boolean", "bool", "binary"):
        return "boolean"
    if n == "object" or n.startswith("dict"):
        return "object"
    if n in ("array", "arr", "sequence") or n.startswith("list"):
        return "array"
    return "null" if n == "null" else "string"


def kinds(schema: Any, depth: int = 0) -> tuple[str, ...] | None:
    """The types a parameter's schema gives its value (see the module docstring); None: untyped."""
    if not isinstance(schema, dict) or depth > 16:
        return None
    t = schema.get("type")
    if isinstance(t, str):
        return (_kind(t),)
    if isinstance(t, list) and t:
        return tuple(dict.fromkeys(_kind(x) for x in t))
    found = [k for key in ("anyOf", "oneOf", "allOf") if isinstance(schema.get(key), list)
             for v in schema[key] for k in kinds(v, depth + 1) or ()]
    if found:
        return tuple(dict.fromkeys(found))
    if "$ref" in schema:
        return ("object",)
    values = schema.get("enum") if isinstance(schema.get("enum"), list) else (
        [schema["const"]] if "const" in schema else None)
    return tuple(dict.fromkeys(_json_type(v) for v in values)) if values else None


def _json_type(v: Any) -> str:
    """The JSON-schema type of a JSON value."""
    if v is None or isinstance(v, bool):
        return "null" if v is None else "boolean"
    if isinstance(v, (int, float)):
        return "integer" if isinstance(v, int) else "number"
    return "string" if isinstance(v, str) else "array" if isinstance(v, list) else "object"


def _jsonable(value: Any, depth: int = 0) -> Any:
    """A Python literal as JSON data (tuples as lists; string keys, finite numbers only)."""
    if depth > MAX_LITERAL_DEPTH:
        raise ValueError("nested too deeply")
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _jsonable(v, depth + 1) for k, v in value.items()}
    raise ValueError(f"not JSON: {type(value).__name__}")


def python_literal(text: str) -> Any:
    """A Python container literal or None (e.g. {'a': True}) as JSON data; ValueError otherwise. The text
    is bounded in length and bracket depth before ast.literal_eval reads it."""
    s = text.strip()
    container = len(s) >= 2 and s[0] in "[{(" and s[-1] in "]})"
    if not (container or s == "None") or len(s) > MAX_LITERAL_CHARS:
        raise ValueError("not a container literal")
    depth = most = 0
    for c in s:
        depth += (c in "[{(") - (c in "]})")
        most = max(most, depth)
    if most > MAX_LITERAL_DEPTH:
        raise ValueError("nested too deeply")
    try:
        value = ast.literal_eval(s)
    except Exception as e:  # SyntaxError, MemoryError, RecursionError ...: not a literal
        raise ValueError(str(e)) from None
    if value is not None and not isinstance(value, (dict, list, tuple)):
        raise ValueError("not a container literal")
    return _jsonable(value)


def _typed(text: str, kind: str) -> Any:
    """`text` as one JSON-schema type; ValueError when it is not one."""
    s = text.strip()
    if kind == "string":
        return text
    if kind == "integer":
        return int(s)
    if kind == "number":
        try:
            return int(s)
        except ValueError:
            return _finite(s)
    if kind == "boolean" and s.lower() in ("true", "false"):
        return s.lower() == "true"
    if kind == "null" and s.lower() == "null":
        return None
    if kind in ("object", "array"):
        try:
            return loads(s)
        except ValueError:
            return python_literal(s)
    raise ValueError(kind)


def value(raw: str, types: tuple[str, ...] | None) -> Any:
    """A parameter's text (one newline trimmed at each end) as `types` (`kinds`) read it."""
    text = raw[1:] if raw.startswith("\n") else raw
    text = text[:-1] if text.endswith("\n") else text
    if types is None:
        try:
            return loads(text)
        except ValueError:
            return text
    if text.strip().lower() == "null" and types != ("string",):
        return None
    for kind in sorted(types, key=lambda k: k == "string"):
        try:
            return _typed(text, kind)
        except ValueError:
            pass
    return text
