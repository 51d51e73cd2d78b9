"""Schema-constrained decoding with llguidance: grammars for json_object / json_schema responses and
forced tool calls, and the per-sample matcher the driver steps (`sampling.driver.TokenConstraint`).

    g = Grammars(tokenizer, vocab_size, max_string_chars=200)
    grammar = g.for_request(req, close_think)  # None, or a grammar string (ApiError 400 for a bad schema)
    factory = g.factory(grammar)        # () -> Matcher, one per sample

A forced tool call (tool_choice 'required' or a named function) is the Qwen block
`<tool_call>\\n{"name": NAME, "arguments": ARGS}\\n</tool_call>` where ARGS follows the function's
parameters schema (for 'required', any of the tools); with tool_call_format qwen3_xml (Qwen3.5's, found in
the chat template by default) it is `<function=NAME>` with one `<parameter=KEY>` per property in schema
order, each value following the property's whole schema as the JSON format does (`xml_value`: strings
bare, holding `<` but nothing `tool_xml` would read as their end; the rest as JSON). JSON is generated
compactly, so a small token budget goes to content: no whitespace at all outside strings, separators ","
and ":" (json.loads reads it; a model's own spacing is not reproduced). Strings that the schema leaves
unbounded (type string without maxLength, enum, const, pattern or format) get maxLength =
max_string_chars (the server's --max_string_chars; 0: unbounded); the schema's own maxLength wins.
Characters, not tokens: a weak model that never closes a string still ends it after that many. Free-form JSON
(response_format json_object) has no schema and stays unbounded. When the grammar is complete only
EOS is allowed; a matcher in an error state also allows only EOS (the sample ends).

Thinking: like a forced call, a response_format grammar applies from the first generated token, so
the reply has no reasoning. When the prompt opened a think block (Qwen3.5 with thinking on:
`close_think`), the JSON grammar starts with `</think>` and a blank line, closing the block, so the
JSON is the reply's content (its reasoning_content is empty). A forced call needs no such prefix: a
`<tool_call>` inside an unterminated think block counts (`reasoning.split`); its bare XML strings then
hold no `</think>`, which would end the block inside the call.
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple, Sequence

import numpy as np

from prover_jax.sampling.sampler import MASK_BITS, mask_words
from prover_jax.serving import protocol as P
from prover_jax.serving.reasoning import END_THINK
from prover_jax.serving.tool_xml import kinds
from prover_jax.serving.tools import CLOSE, OPEN
from prover_jax.serving.tools import FORMATS as TOOL_CALL_FORMATS

COMPACT = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}
DEFAULT_MAX_STRING_CHARS = 200
XML_MAX_STRING_CHARS = 4096  # an XML string's bound when neither the schema nor the server sets one
XML_CLOSE = "\n</parameter>\n"  # after each XML parameter value
_REGEX_META = re.compile(r"([\\.+*?()|\[\]{}^$#&~/-])")
_CLASS_META = re.compile(r"([\\\]\[^/-])")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
_SUBSCHEMAS = ("items", "additionalProperties", "then", "else", "contains")  # not "not" / "if": they would invert


def bound_strings(schema, max_chars: int):
    """A copy of `schema` where every unbounded string gets maxLength = max_chars (0: unchanged)."""
    if max_chars <= 0 or not isinstance(schema, dict):
        return schema
    out = dict(schema)
    types = out.get("type")
    is_string = types == "string" or (isinstance(types, list) and "string" in types)
    if is_string and not any(k in out for k in ("maxLength", "enum", "const", "pattern", "format")):
        out["maxLength"] = max(int(max_chars), int(out.get("minLength", 0) or 0))
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [bound_strings(s, max_chars) for s in out[key]]
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {k: bound_strings(s, max_chars) for k, s in out[key].items()}
    for key in _SUBSCHEMAS:
        if isinstance(out.get(key), dict):
            out[key] = bound_strings(out[key], max_chars)
    return out


def avoiding(words: Sequence[str]) -> str:
    """A regex (of lark's /.../) of the strings holding none of `words`, each a "<" then no other "<": text
    without "<", then chunks of a "<" and text without "<" that starts with no word's rest."""
    trie: dict = {}
    for w in words:
        node = trie
        for c in w[1:-1]:
            node = node.setdefault(c, {})
            if node is None:  # a shorter word is a prefix of this one
                break
        else:
            node[w[-1]] = None  # completes a word

    def rest(node: dict) -> str:
        alts = ["[^" + _CLASS_META.sub(r"\\\1", "<" + "".join(sorted(node))) + "][^<]*"]
        alts += [_REGEX_META.sub(r"\\\1", c) + rest(child) for c, child in sorted(node.items()) if child is not None]
        return "(?:" + "|".join(alts) + ")?"
    return "[^<]*(?:<" + rest(trie) + ")*"


class XmlFunction(NamedTuple):
    """What the XML values of one function depend on besides their own schema."""
    defs: dict  # the parameters' $defs / definitions, for $ref
    keys: list  # its parameter names
    close_think: bool  # the prompt opened a think block


class Matcher:
    """One sample's grammar state: fills its allowed-token bitmask row, consumes sampled tokens."""

    def __init__(self, matcher, eos_ids, n_vocab: int):
        self.m, self.n_vocab = matcher, n_vocab
        self.eos_only = np.zeros((mask_words(n_vocab),), np.int32)
        for t in eos_ids:
            self.eos_only[t // MASK_BITS] |= np.int32(np.uint32(1 << (t % MASK_BITS)).view(np.int32))

    def fill_bitmask(self, row: np.ndarray) -> None:
        if self.m.is_error() or self.m.is_stopped():
            row[:] = self.eos_only
            return
        from llguidance.numpy import fill_next_token_bitmask

        fill_next_token_bitmask(self.m, row[None], 0)
        if not row.any():
            row[:] = self.eos_only

    def consume(self, token: int) -> None:
        if not (self.m.is_error() or self.m.is_stopped()):
            self.m.consume_token(int(token))


class Grammars:
    def __init__(self, tokenizer, n_vocab: int, eos_ids=(), max_string_chars: int = DEFAULT_MAX_STRING_CHARS,
                 tool_call_format: str = "auto"):
        """tool_call_format: the format forced calls are constrained to; auto: qwen3_xml when the chat
        template shows `<function=` (Qwen3.5, Qwen3-Coder), else json."""
        import llguidance
        import llguidance.hf

        if tool_call_format not in TOOL_CALL_FORMATS:
            raise ValueError(f"--tool_call_format must be one of {', '.join(TOOL_CALL_FORMATS)}, "
                             f"got {tool_call_format!r}")
        if tool_call_format == "auto":
            template = getattr(tokenizer, "chat_template", "") or ""
            tool_call_format = "qwen3_xml" if "<function=" in template else "json"
        self.tool_call_format = tool_call_format
        self.llg, self.hf = llguidance, tokenizer
        self.n_vocab, self.max_string_chars = int(n_vocab), int(max_string_chars)
        self.eos_ids = sorted({int(t) for t in eos_ids} | {int(tokenizer.eos_token_id)})
        self.tokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=self.n_vocab,
                                                      eos_token=int(tokenizer.eos_token_id))

    def literal(self, text: str) -> str:
        """Lark for `text`: a token reference when the tokenizer has it as one special token (Qwen's
        <tool_call> is an added token, which llguidance matches as a token, not as bytes)."""
        ids = self.hf.encode(text, add_special_tokens=False)
        if len(ids) == 1 and self.tokenizer.is_special_token(ids[0]):
            return f"<[{ids[0]}]>"
        return json.dumps(text)

    def json_grammar(self, schema: dict, close_think: bool = False) -> str:
        """Compact JSON following `schema`; `close_think`: after `</think>` and a blank line."""
        schema = bound_strings(schema, self.max_string_chars)
        if not close_think:
            return self.llg.LLMatcher.grammar_from_json_schema(schema, overrides=COMPACT)
        return self.llg.LLMatcher.grammar_from_lark(
            f'start: {self.literal(END_THINK)} "\\n\\n" json\n'
            f'json: %json {json.dumps({**schema, "x-guidance": COMPACT})}\n')

    def tool_block(self, call: str, rules: Sequence[str] = ()) -> str:
        """The grammar of one Qwen block `<tool_call>\\n CALL \\n</tool_call>` (lark `call` and its `rules`)."""
        lark = (f'start: {self.literal(OPEN)} "\\n" call "\\n" {self.literal(CLOSE)}\n'
                f'call: {call}\n' + "".join(r + "\n" for r in rules))
        return self.llg.LLMatcher.grammar_from_lark(lark)

    @staticmethod
    def chosen(tools: list[dict], name: str | None) -> list[dict]:
        """The functions a forced call may take: the named one, or any ('required')."""
        return [t["function"] for t in tools if name is None or t["function"]["name"] == name]

    def tool_grammar(self, tools: list[dict], name: str | None) -> str:
        bound = lambda f: bound_strings(f["parameters"], self.max_string_chars)  # noqa: E731
        calls = [{"type": "object", "properties": {"name": {"const": f["name"]}, "arguments": bound(f)},
                  "required": ["name", "arguments"], "additionalProperties": False} for f in self.chosen(tools, name)]
        schema = calls[0] if len(calls) == 1 else {"anyOf": calls}
        return self.tool_block(f"%json {json.dumps({**schema, 'x-guidance': COMPACT})}")

    def xml_value(self, schema: dict, rule: str, rules: list[str], fn: "XmlFunction") -> str:
        """Lark for one XML parameter value of `schema` and the closing `\\n</parameter>\\n` (adds rules named
        from `rule` to `rules`): an enum / const as its values (strings bare, others as JSON), a string
        bare (`xml_string`), a type list or anyOf / oneOf admitting strings as any of its members, anything
        else as compact JSON of the schema (%json: bounds, nested objects and arrays, $defs)."""
        closing = json.dumps(XML_CLOSE)
        values = schema.get("enum") if isinstance(schema.get("enum"), list) else (
            [schema["const"]] if "const" in schema else None)
        if values is not None:
            bare = [json.dumps(v if isinstance(v, str) else json.dumps(v, separators=(",", ":"), ensure_ascii=False))
                    for v in values if not isinstance(v, str) or self.writable(v, fn)]
            if not bare:
                raise ValueError(f"no value of the enum {values!r} can be written as an XML parameter value")
            return "(" + " | ".join(bare) + ") " + closing
        kind, variants = schema.get("type"), schema.get("anyOf", schema.get("oneOf"))
        if kind == "string":
            return self.xml_string(schema, rule, rules, fn)
        if isinstance(kind, list) and "string" in kind:
            others = [k for k in kind if k != "string"]
            alts = [self.xml_string(schema, rule, rules, fn)]
            if others:
                alts.append(self.xml_value({**schema, "type": others}, f"{rule}_j", rules, fn))
            return "(" + " | ".join(alts) + ")"
        plain = lambda v: "enum" in v or "const" in v or "string" in (kinds(v) or ())  # noqa: E731
        if kind is None and isinstance(variants, list) and any(isinstance(v, dict) and plain(v) for v in variants):
            return "(" + " | ".join(self.xml_value(v, f"{rule}_{n}", rules, fn)
                                    for n, v in enumerate(variants) if isinstance(v, dict)) + ")"
        defs = fn.defs if '"$ref"' in json.dumps(schema) else {}
        sub = bound_strings({**defs, **schema}, self.max_string_chars)
        rules.append(f"{rule}: %json {json.dumps({**sub, 'x-guidance': COMPACT})}")
        return f"{rule} {closing}"

    @staticmethod
    def forbidden(fn: "XmlFunction") -> list[str]:
        """What a bare string of `fn` may not hold: what `tool_xml` could read as the end of its value
        (`</parameter>`, a `<parameter=KEY>` of the function's keys) and, after an opened think block,
        `</think>` (which would end the block inside the call)."""
        words = ["</parameter>"] + [f"<parameter={k}>" for k in fn.keys if "<" not in k and ">" not in k]
        return words + ([END_THINK] if fn.close_think else [])

    def writable(self, text: str, fn: "XmlFunction") -> bool:
        """`text` can be a bare string value of `fn`."""
        return not any(w in text for w in self.forbidden(fn))

    def xml_string(self, schema: dict, rule: str, rules: list[str], fn: "XmlFunction") -> str:
        """A bare string value: minLength to maxLength characters (when the schema sets none,
        max_string_chars unless it has a pattern, else XML_MAX_STRING_CHARS), the schema's pattern
        (unanchored unless it starts with ^ / ends with $, as JSON Schema reads it; a format is not
        enforced), none of `forbidden`, `<` otherwise allowed. The string and its closing are one lazy
        terminal, ending at the first closing (a greedy one would take the closing's newline into it)."""
        patterned = isinstance(schema.get("pattern"), str)
        n = int(schema.get("maxLength") or (not patterned and self.max_string_chars) or XML_MAX_STRING_CHARS)
        m = min(int(schema.get("minLength") or 0), n)
        name = "STR_" + rule.upper()
        parts = [f"/(?s:.{{{m},{n}}})/", "/" + avoiding(self.forbidden(fn)) + "/"]
        if patterned:
            parts.append("/" + self.pattern(schema["pattern"]) + "/")
        rules.append(f"{name}: " + " & ".join(parts))
        rules.append(f"{name}_CLOSED: {name} {json.dumps(XML_CLOSE)}")
        rules.append(f"{rule}[lazy]: {name}_CLOSED")
        return rule

    def pattern(self, pattern: str) -> str:
        """A JSON-schema pattern as a whole-string regex (JSON Schema's \\d, \\w: ASCII)."""
        head = pattern.startswith("^")
        tail = pattern.endswith("$") and (len(pattern) - len(pattern[:-1].rstrip("\\")) - 1) % 2 == 0
        core = pattern[int(head):len(pattern) - int(tail)]
        body = "(?:" + self.llg.regex_to_lark(core, "dw") + ")"
        return ("" if head else "(?s:.*)") + body + ("" if tail else "(?s:.*)")

    def xml_tool_grammar(self, tools: list[dict], name: str | None, close_think: bool = False) -> str:
        """Qwen3.5's format: <tool_call>, <function=NAME>, then <parameter=KEY> VALUE </parameter> for
        each property in schema order (optional ones may be left out), </function>, </tool_call>, each
        tag on its own line; VALUE follows the property's schema (`xml_value`). `close_think`: the prompt
        opened a think block."""
        rules, calls = [], []
        for i, f in enumerate(self.chosen(tools, name)):
            params = f.get("parameters") or {}
            required = set(params.get("required") or ())
            props = params.get("properties") or {}
            defs = {k: params[k] for k in ("$defs", "definitions") if k in params}
            fn = XmlFunction(defs, list(props), close_think)
            parts = []
            for j, (key, sub) in enumerate(props.items()):
                value = self.xml_value(sub if isinstance(sub, dict) else {}, f"v{i}_{j}", rules, fn)
                opening = json.dumps(f"<parameter={key}>\n")
                rules.append(f"p{i}_{j}: {opening} {value}")
                parts.append(f"p{i}_{j}" if key in required else f"p{i}_{j}?")
            head = json.dumps(f"<function={f['name']}>\n")
            rules.append(f"f{i}: {head} {' '.join(parts)} " + json.dumps("</function>"))
            calls.append(f"f{i}")
        return self.tool_block(" | ".join(calls), rules)

    def for_request(self, req: P.ChatRequest, close_think: bool = False) -> str | None:
        """The grammar a request's samples follow, or None; ApiError 400 when it does not compile.
        `close_think`: the prompt left a think block open (a response_format grammar closes it first)."""
        if req.tool_choice == "required" or req.forced_tool is not None:
            what = "tools[].function.parameters"
            try:
                grammar = (self.xml_tool_grammar(req.tools, req.forced_tool, close_think)
                           if self.tool_call_format == "qwen3_xml" else self.tool_grammar(req.tools, req.forced_tool))
            except ValueError as e:
                raise P.bad(f"{what}: {e}", "tools") from None
        elif req.response_format is not None:
            schema = req.response_format.get("schema", {"type": "object"})
            grammar, what = self.json_grammar(schema, close_think), "response_format"
        else:
            return None
        error = self.llg.LLMatcher.validate_grammar(grammar, self.tokenizer)
        if error and not error.startswith("WARNING"):
            raise P.bad(f"{what}: the JSON schema is not supported: {error}", what.split("[")[0])
        return grammar

    def factory(self, grammar: str):
        def make() -> Matcher:
            return Matcher(self.llg.LLMatcher(self.tokenizer, grammar, log_level=0), self.eos_ids, self.n_vocab)
        return make
