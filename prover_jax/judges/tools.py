"""The agentic judge's tools over a group's failed trajectories, and their function-calling schemas.

Tools never raise on bad arguments: every problem comes back as a tool result text that starts with
"error:", so the model can correct itself.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from prover_jax.judges.base import clip_text, action_text, render_trajectory, turn_text

MAX_K = 10  # search results per call
MAX_SEGMENT_TURNS_SHOWN = 8  # get_segment returns at most this many turns per call


def tool_specs(max_segment_turns: int) -> list[dict]:
    """OpenAI function-calling schemas of search_trajectory, get_segment and propose_segment."""

    def fn(name, description, properties, required):
        return {"type": "function", "function": {
            "name": name, "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required,
                           "additionalProperties": False}}}

    integer = {"type": "integer"}
    return [
        fn("search_trajectory",
           f"Keyword search (BM25) over every turn of the FAILED runs. Returns up to k (<= {MAX_K}) "
           "matching turns with the failed run id, the turn index, the action and an observation snippet.",
           {"query": {"type": "string", "description": "keywords, e.g. an object, a place or an action"},
            "k": {**integer, "description": f"number of results, 1..{MAX_K}"}},
           ["query", "k"]),
        fn("get_segment",
           f"Full text of turns start_turn..end_turn (inclusive, at most {MAX_SEGMENT_TURNS_SHOWN} turns) "
           "of one FAILED run.",
           {"traj_id": {**integer, "description": "failed run id (0-based)"},
            "start_turn": integer, "end_turn": integer},
           ["traj_id", "start_turn", "end_turn"]),
        fn("propose_segment",
           "Your final answer: the segment start_turn..end_turn (inclusive turn indices of the SUCCESSFUL "
           f"run; at most {max_segment_turns} turns; must end before its last turn; valid actions only).",
           {"start_turn": integer, "end_turn": integer,
            "failure_mode": {"type": "string", "description": "the failure mode that recurs in the failed runs"},
            "rationale": {"type": "string", "description": "why this segment avoids or solves it"}},
           ["start_turn", "end_turn", "failure_mode", "rationale"]),
    ]


def parse_arguments(raw: Any) -> tuple[dict | None, str | None]:
    """(arguments dict, None) or (None, what is wrong with them)."""
    if isinstance(raw, dict):
        return raw, None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    try:
        args = json.loads(raw)
    except (TypeError, ValueError) as e:
        return None, f"the arguments are not valid JSON ({e}); send a JSON object"
    if not isinstance(args, dict):
        return None, f"the arguments must be a JSON object, got {type(args).__name__}"
    return args, None


def as_int(value: Any) -> int | None:
    """An integer from an int, an integral float or a numeric string (models send all three)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


class FailureIndex:
    """BM25 search and segment reads over the failed trajectories of one group (ids 0..n-1)."""

    def __init__(self, failures: Sequence, snippet_chars: int = 160):
        self.failures = list(failures)
        self.snippet_chars = snippet_chars
        self.docs = [(i, t) for i, f in enumerate(self.failures) for t in range(f.num_turns)]
        self._retriever = None

    def _index(self):
        """The BM25 retriever over every failed turn; None when no turn has a searchable word."""
        if self._retriever is None:
            import bm25s

            texts = [turn_text(self.failures[i].turns[t]) for i, t in self.docs]
            tokens = bm25s.tokenize(texts, stopwords="en", show_progress=False)
            self._retriever = False
            if tokens.vocab:  # bm25s cannot index a corpus without a single word
                self._retriever = bm25s.BM25()
                self._retriever.index(tokens, show_progress=False)
        return self._retriever or None

    def search(self, query: Any, k: Any = 5) -> str:
        if not isinstance(query, str) or not query.strip():
            return "error: query must be a non-empty string"
        k = as_int(k)
        if k is None:
            return "error: k must be an integer"
        k = max(1, min(k, MAX_K, len(self.docs)))
        if not self.docs:
            return "no failed runs to search"
        import bm25s

        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False, return_ids=False)
        if not tokens or not tokens[0]:
            return f"no searchable words in {query!r}; use content words (objects, places, actions)"
        retriever = self._index()
        if retriever is None:
            return f"no turn of the failed runs matches {query!r}"
        docs, scores = retriever.retrieve(tokens, k=k, show_progress=False)
        lines = []
        for d, score in zip(docs[0], scores[0]):
            if score <= 0:
                continue
            i, t = self.docs[int(d)]
            turn = self.failures[i].turns[t]
            lines.append(f"failed run {i}, turn {t}: action: {clip_text(action_text(turn), 100)} -> "
                         f"{clip_text(turn.observation, self.snippet_chars)}")
        return "\n".join(lines) if lines else f"no turn of the failed runs matches {query!r}"

    def segment(self, traj_id: Any, start_turn: Any, end_turn: Any) -> str:
        i, l, r = as_int(traj_id), as_int(start_turn), as_int(end_turn)
        if i is None or l is None or r is None:
            return "error: traj_id, start_turn and end_turn must be integers"
        if not 0 <= i < len(self.failures):
            return f"error: traj_id {i} does not exist; failed run ids are 0..{len(self.failures) - 1}"
        traj = self.failures[i]
        if not 0 <= l <= r < traj.num_turns:
            return (f"error: failed run {i} has turns 0..{traj.num_turns - 1}; need 0 <= start_turn <= "
                    f"end_turn <= {traj.num_turns - 1}, got {l}..{r}")
        note = ""
        if r - l + 1 > MAX_SEGMENT_TURNS_SHOWN:
            r = l + MAX_SEGMENT_TURNS_SHOWN - 1
            note = f"\n(showing turns {l}..{r} only: at most {MAX_SEGMENT_TURNS_SHOWN} turns per call)"
        lines = [f"failed run {i}, turns {l}..{r} of {traj.num_turns}:"]
        for t in range(l, r + 1):
            turn = traj.turns[t]
            lines.append(f"[turn {t}] ({'valid' if turn.valid else 'INVALID'}) action: {action_text(turn)}")
            lines.append(f"    observation: {clip_text(turn.observation, 1500)}")
        return "\n".join(lines) + note

    def previews(self, max_chars: int = 2500) -> str:
        return "\n\n".join(f"### failed run {i}\n{render_trajectory(f, full=False, max_chars=max_chars)}"
                           for i, f in enumerate(self.failures))
