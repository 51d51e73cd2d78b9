"""Stop strings matched on token ids, on the device, exactly as matching the decoded text would.

    stops = StopStrings(token_bytes(tokenizer), vocab_size=V)
    row = stops.index("</action>")              # registers the string; its row of the table
    table = stops.table()                       # StopTable: next_PxQxV int16, length_P int32

A stop string s (UTF-8 bytes, length n) is tracked by the KMP automaton over bytes: the state q is
the length of the longest suffix of the bytes generated so far that is a prefix of s; q = n once s
occurred. Per token id t the transition over all of t's bytes is precomputed for every state,

    next[q, t] = state after feeding bytes(t) from state q      (n as soon as s occurs inside them),

so the sampler follows each stop string with one gather per token, whether s spans several tokens,
lies inside one longer token, or overlaps itself. The rows of P registered strings are stacked into
one [P, Q, V] table (Q = 1 + the longest string); a slot's state is q_P, started at 0 by each request.
`first_match` is the host reference: the first token after which the decoded text contains s.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Sequence

import flax.struct
import jax
import numpy as np

MAX_STOP_BYTES = 1024  # a stop string longer than this (UTF-8 bytes) is refused
TABLE_BYTES = 256 * 2 ** 20  # the [P, Q, V] int16 table's budget: on a 248k vocabulary with 8 rows, 66-byte stops
STOP_STRINGS = 4  # default capacity: distinct stop strings tracked (the decode state's width)


def _byte_decoder() -> dict[str, int]:
    """The inverse of byte-level BPE's byte -> printable character map (GPT-2's)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return {c: b for b, c in chars.items()}


def token_bytes(tokenizer, vocab_size: int | None = None) -> list[bytes]:
    """bytes(t) for every id t < vocab_size (default len(tokenizer)): the bytes that decoding t adds
    to a text. Byte-level BPE tokens map back through the byte alphabet; added / special tokens are
    their content; other tokenizers fall back to decode([t]); ids the tokenizer lacks are b""."""
    V = len(tokenizer) if vocab_size is None else int(vocab_size)
    added = {int(i): t.content for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()}
    byte_level = False
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        decoder = json.loads(backend.to_str()).get("decoder") or {}
        kinds = [d.get("type") for d in decoder.get("decoders", [decoder])]
        byte_level = "ByteLevel" in kinds
    inverse = _byte_decoder()
    pieces = tokenizer.convert_ids_to_tokens(list(range(min(V, len(tokenizer)))))
    out = []
    for t in range(V):
        if t >= len(pieces) or pieces[t] is None:
            out.append(b"")
        elif t in added:
            out.append(added[t].encode())
        elif byte_level and all(ch in inverse for ch in pieces[t]):
            out.append(bytes(inverse[ch] for ch in pieces[t]))
        else:
            out.append(tokenizer.decode([t]).encode())
    return out


def kmp_dfa(pattern: bytes) -> np.ndarray:
    """int32 [n + 1, 256]: KMP automaton of `pattern` (state n = matched, and stays matched)."""
    n = len(pattern)
    dfa = np.zeros((n + 1, 256), np.int32)
    if n == 0:
        return dfa
    dfa[0, pattern[0]] = 1
    fail = 0
    for q in range(1, n):
        dfa[q] = dfa[fail]
        dfa[q, pattern[q]] = q + 1
        fail = dfa[fail, pattern[q]]
    dfa[n] = n
    return dfa


def transitions(pattern: bytes, tokens: Sequence[bytes]) -> np.ndarray:
    """int32 [n + 1, V]: next[q, t] (see the module docstring), vectorised over token ids."""
    dfa = kmp_dfa(pattern)
    n, V = len(pattern), len(tokens)
    width = max((len(b) for b in tokens), default=0)
    bytes_VxW = np.zeros((V, max(width, 1)), np.int32)
    length_V = np.zeros((V,), np.int32)
    for t, b in enumerate(tokens):
        bytes_VxW[t, :len(b)] = np.frombuffer(b, np.uint8)
        length_V[t] = len(b)
    out = np.zeros((n + 1, V), np.int32)
    for q in range(n + 1):
        state = np.full((V,), q, np.int32)
        for j in range(width):
            live = j < length_V
            state = np.where(live, dfa[state, bytes_VxW[:, j]], state)
        out[q] = state
    return out


def max_stop_bytes(vocab_size: int, capacity: int) -> int:
    """The longest stop string (UTF-8 bytes) whose table fits TABLE_BYTES: P Q V 2 bytes <= TABLE_BYTES
    with Q = 1 + its length (at most MAX_STOP_BYTES)."""
    return max(1, min(MAX_STOP_BYTES, TABLE_BYTES // (2 * max(capacity, 1) * max(vocab_size, 1)) - 1))


@flax.struct.dataclass
class StopTable:
    """Stacked automata of the registered stop strings (rows past the registered ones never match)."""

    next_PxQxV: jax.Array  # int16
    length_P: jax.Array  # int32, n of each string (a state equal to it = matched)


class StopStrings:
    """Registry of stop strings over one vocabulary; `capacity` rows (the decode state's width)."""

    def __init__(self, tokens: Sequence[bytes], capacity: int = STOP_STRINGS):
        self.tokens = list(tokens)
        self.capacity = int(capacity)
        self.strings: list[str] = []
        self._rows: list[np.ndarray] = []
        self._table: StopTable | None = None

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def index(self, s: str) -> int:
        """Row of stop string `s`, registering it (ValueError when empty, too long or over capacity)."""
        if s in self.strings:
            return self.strings.index(s)
        data, most = s.encode(), max_stop_bytes(self.vocab_size, self.capacity)
        if not data or len(data) > most:
            raise ValueError(f"stop string {s[:40]!r}{'...' if len(s) > 40 else ''}: must have 1 to {most} UTF-8 "
                             f"bytes (its [{self.capacity}, bytes + 1, {self.vocab_size}] table stays within "
                             f"{TABLE_BYTES >> 20} MiB)")
        if len(self.strings) >= self.capacity:
            raise ValueError(f"stop string {s!r}: the driver tracks at most {self.capacity} distinct stop "
                             f"strings ({self.strings}); raise Driver(max_stop_strings=...)")
        self.strings.append(s)
        self._rows.append(transitions(data, self.tokens))
        self._table = None
        return len(self.strings) - 1

    def table(self) -> StopTable:
        """The device table (rebuilt, so recompiling the decode step, only when a string is added)."""
        if self._table is None:
            P, V = self.capacity, self.vocab_size
            Q = max([r.shape[0] for r in self._rows], default=1)
            nxt = np.zeros((P, Q, V), np.int16)
            length = np.full((P,), np.iinfo(np.int32).max, np.int32)
            for p, rows in enumerate(self._rows):
                nxt[p, :rows.shape[0]] = rows
                length[p] = rows.shape[0] - 1
            self._table = StopTable(jax.numpy.asarray(nxt), jax.numpy.asarray(length))
        return self._table


def first_match(tokens: Sequence[int], stop: str, decode) -> int | None:
    """Host reference: the first i such that decode(tokens[:i + 1]) contains `stop`, else None."""
    for i in range(len(tokens)):
        if stop in decode(list(tokens[:i + 1])):
            return i
    return None


@dataclasses.dataclass(frozen=True)
class StopSpec:
    """The end conditions of one sample: token budget, stop ids, rows of its stop strings."""

    max_new_tokens: int
    stop_ids: tuple[int, ...] = ()
    stop_rows: tuple[int, ...] = ()
