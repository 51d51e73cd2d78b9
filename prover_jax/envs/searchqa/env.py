"""`searchqa`: question answering by search, with the Search-R1 protocol, over a generated knowledge base.

Protocol (one turn = one action):
    agent:  ... <search>query</search>     -> env: <information>Doc 1(Title: ...) text\\n...</information>
    agent:  ... <answer>text</answer>      -> episode ends, reward = EM(text, golden answers)

    EM(a, G) = 1[ exists g in G: norm(a) == norm(g) ],
    norm(s)  = squeeze_whitespace(remove_articles(remove_punctuation(casefold(NFKC(s)))))

(Search-R1's normalisation, made Unicode-aware: NFKC folds compatibility and composed / decomposed
forms, casefold lowercases any script, punctuation is ASCII's plus every Unicode punctuation
character; accents stay significant. On ASCII text it is exactly Search-R1's.)

`step` accepts the tagged span (what `extract_action` returns) or a whole turn text; exactly one
well-formed `<search>`/`<answer>` block must be present. A malformed turn (no block, both kinds, two
blocks, empty or oversized content, control characters, markup inside; non-ASCII text too when
`ascii_only`, the built-in family's default) is invalid: it
costs a turn, leaves the state unchanged otherwise, and the observation says what was wrong. After
`max_turns` turns without an answer the episode ends unsuccessfully (`info["truncated"]`).

State (`SearchQAState`, the snapshot): question id, turn counter, the queries searched so far, the
final answer and the done/success flags. Observations are a pure function of the state, so restore is
exact (for a remote retriever, as exact as the server is deterministic).

The built-in family (`make("searchqa", kb_seed=0, max_turns=10, topk=3)`) asks single-, two- and
three-hop questions about fictional entities (see `searchqa.kb`); the BM25 index of each knowledge
base is built once per process and shared by all envs. User data: `searchqa_data` (`searchqa.data`).

Splits: the knowledge base has only about 2,300 distinct questions, which the seeds repeat, so the
held-out eval questions are a share `eval_fraction` (default 0.1, about 230 questions) of the questions
themselves, by content hash (see `envs.splits.ContentSplit`). `SearchQAState.qid` is the generator seed
(draw id) of the question played.
"""

from __future__ import annotations

import abc
import dataclasses
import re
from typing import Any, Callable

from prover_jax.envs.base import Env, PromptSpec, info_dict, register, split_seed
from prover_jax.envs.searchqa.kb import KnowledgeBase, Question
from prover_jax.envs.searchqa.retrieval import RetrievalError, format_information
from prover_jax.envs.splits import EVAL_FRACTION, ContentSplit
from prover_jax.envs.text import BM25Index, normalize, tokenize

SYSTEM_PROMPT = (
    "Answer the user's question. You know nothing about its subject, so look facts up with the search "
    "engine. Think step by step before every action. To search, end your turn with one query between "
    "<search> and </search>; the best matching documents come back between <information> and "
    "</information>. Search as often as you need, one query per turn; questions may need several hops, "
    "each searched on its own. When you know the answer, end your turn with it between <answer> and "
    "</answer>: a short phrase only, with no explanation, e.g. <answer> Oslo </answer>."
)
_TAGS = ("search", "answer")
_MARKUP_RE = re.compile(r"</?[A-Za-z_]+>")


def normalize_answer(text: str) -> str:
    """Search-R1/SQuAD answer normalisation over any Unicode text (see module docstring)."""
    return normalize(text, unicode=True, punctuation=True, articles=True)


def exact_match(prediction: str, golden_answers: tuple[str, ...] | list[str]) -> bool:
    """EM(prediction, golden_answers) after `normalize_answer`."""
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(g) for g in golden_answers)


def token_f1(prediction: str, golden_answers: tuple[str, ...] | list[str]) -> float:
    """Max over golden answers of the token-level F1 of the normalised strings (reported, not rewarded)."""
    best = 0.0
    pred = normalize_answer(prediction).split()
    for gold in golden_answers:
        ref = normalize_answer(gold).split()
        common = sum(min(pred.count(t), ref.count(t)) for t in set(pred))
        if common:
            p, r = common / len(pred), common / len(ref)
            best = max(best, 2 * p * r / (p + r))
    return best


def find_blocks(text: str) -> list[tuple[str, str]]:
    """Well-formed `<tag>content</tag>` blocks (tag in search/answer) in order; linear time.

    An opening tag without its closing tag is skipped, as Search-R1's regex does.
    """
    found: dict[str, int] = {}  # pattern -> its next occurrence at/after the last query (-1: none left)

    def next_at(pattern: str, pos: int) -> int:
        at = found.get(pattern, -2)
        if at == -2 or (0 <= at < pos):
            at = found[pattern] = text.find(pattern, pos)
        return at

    blocks: list[tuple[str, str]] = []
    pos = 0
    while True:
        opens = [(i, t) for t in _TAGS if (i := next_at(f"<{t}>", pos)) >= 0]
        if not opens:
            return blocks
        start, tag = min(opens)
        body = start + len(tag) + 2
        end = next_at(f"</{tag}>", body)
        if end < 0:
            pos = body
            continue
        blocks.append((tag, text[body:end]))
        pos = end + len(tag) + 3


@dataclasses.dataclass(frozen=True)
class SearchQAState:
    """Everything an episode's future and observations depend on (hashable, picklable)."""

    qid: int
    turn: int = 0
    queries: tuple[str, ...] = ()
    answer: str | None = None
    done: bool = False
    success: bool = False


class SearchQABase(Env):
    """The Search-R1 protocol over any question source and retriever (see module docstring).

    Subclasses provide `_qid(seed)`, `_question(qid) -> (text, golden answers)` and
    `_retrieve(query) -> list of passage contents` (may raise RetrievalError).
    """

    def __init__(self, max_turns: int = 10, topk: int = 3, max_query_chars: int = 300,
                 max_turn_chars: int = 8000, ascii_only: bool = True):
        if max_turns < 1 or topk < 1:
            raise ValueError(f"max_turns and topk must be >= 1, got {max_turns}, {topk}")
        self.max_turns, self.topk = max_turns, topk
        self.max_query_chars, self.max_turn_chars = max_query_chars, max_turn_chars
        self.ascii_only = ascii_only
        self._state: SearchQAState | None = None

    @abc.abstractmethod
    def _qid(self, seed: int) -> int: ...

    @abc.abstractmethod
    def _question(self, qid: int) -> tuple[str, tuple[str, ...]]: ...

    @abc.abstractmethod
    def _retrieve(self, query: str) -> list[str]: ...

    @property
    def prompt(self) -> PromptSpec:
        return PromptSpec(system=SYSTEM_PROMPT, stop_strings=("</search>", "</answer>"),
                          max_turns=self.max_turns, show_admissible=False)

    @property
    def state(self) -> SearchQAState:
        if self._state is None:
            raise RuntimeError("call reset(seed) before using the environment")
        return self._state

    def extract_action(self, response: str) -> str | None:
        """The turn's tagged block(s) verbatim, e.g. "<search>q</search>"; None when there is none.

        Several blocks are all returned (concatenated) so that `step` can reject the turn.
        """
        if not isinstance(response, str):
            return None
        blocks = find_blocks(response)
        return "".join(f"<{t}>{c}</{t}>" for t, c in blocks) or None

    def render_action(self, action: str) -> str:
        """Actions of this family are whole tagged blocks already ("<search>q</search>")."""
        return action

    def reset(self, seed: int) -> tuple[str, dict]:
        qid = self._qid(seed)
        self._state = SearchQAState(qid=qid)
        text, golden = self._question(qid)
        return f"Question: {text}", info_dict(question=text, golden_answers=list(golden), qid=qid, turn=0)

    def _parse(self, action: Any) -> tuple[str, str] | str:
        """(tag, content) of a valid action, or the reason it is invalid."""
        if action is None:  # what extract_action gives for a response without a block
            return "no well-formed <search>...</search> or <answer>...</answer> block was found"
        if not isinstance(action, str):
            return f"the action must be text, got {type(action).__name__}"
        if len(action) > self.max_turn_chars:
            return f"the turn is too long ({len(action)} characters, limit {self.max_turn_chars})"
        blocks = find_blocks(action)
        if not blocks:
            return "no well-formed <search>...</search> or <answer>...</answer> block was found"
        if len(blocks) > 1:
            kinds = " and ".join(sorted({t for t, _ in blocks}))
            return f"one action per turn, but {len(blocks)} blocks were found ({kinds})"
        tag, content = blocks[0]
        content = " ".join(content.split())
        what = "query" if tag == "search" else "answer"
        if not content:
            return f"the {what} is empty"
        if len(content) > self.max_query_chars:
            return f"the {what} is too long ({len(content)} characters, limit {self.max_query_chars})"
        if self.ascii_only and not content.isascii():
            return f"the {what} contains non-ASCII characters"
        if not content.isprintable():
            return f"the {what} contains control characters"
        if _MARKUP_RE.search(content):
            return f"the {what} contains markup tags"
        if tag == "search" and not tokenize(content):
            return "the query has no searchable word"
        return tag, content

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        s = self.state
        if s.done:
            return ("The episode is over.", 0.0, True,
                    info_dict(success=s.success, valid=False, turn=s.turn, truncated=s.answer is None))
        parsed = self._parse(action)
        turn = s.turn + 1
        truncated = turn >= self.max_turns
        extra: dict[str, Any] = {}
        if isinstance(parsed, str):
            self._state = dataclasses.replace(s, turn=turn, done=truncated)
            obs = (f"Invalid turn: {parsed}. To search, write <search> query </search>; to answer, write "
                   f"<answer> answer </answer>.")
            return obs, 0.0, truncated, info_dict(valid=False, turn=turn, truncated=truncated, error=parsed)
        tag, content = parsed
        if tag == "answer":
            golden = self._question(s.qid)[1]
            success = exact_match(content, golden)
            self._state = dataclasses.replace(s, turn=turn, answer=content, done=True, success=success)
            return "", float(success), True, info_dict(success=success, turn=turn, truncated=False,
                                                       f1=token_f1(content, golden))
        try:
            obs = format_information(self._retrieve(content)[: self.topk])
        except RetrievalError as e:
            obs = f"<information>Search failed: {e}</information>"
            extra["retrieval_error"] = str(e)
        self._state = dataclasses.replace(s, turn=turn, queries=s.queries + (content,), done=truncated)
        return obs, 0.0, truncated, info_dict(turn=turn, truncated=truncated, **extra)

    def privileged_facts(self, seed: int) -> list[str]:
        """The question and its gold answers."""
        _, info = self.reset(seed)
        return [f"Question: {info.get('question', '')}",
                f"Gold answer(s): {' | '.join(info.get('golden_answers') or [])}"]

    def snapshot(self) -> SearchQAState:
        return self.state

    def restore(self, snapshot: SearchQAState) -> None:
        if not isinstance(snapshot, SearchQAState):
            raise TypeError(f"expected a SearchQAState, got {type(snapshot).__name__}")
        self._state = snapshot


_KB_CACHE: dict[tuple, tuple[KnowledgeBase, BM25Index]] = {}


def question_key(q: Question) -> str:
    """The content of a question (equal keys <=> the same task)."""
    return repr((q.text, tuple(q.golden_answers)))


def knowledge_base(kb_seed: int = 0, **sizes: int) -> tuple[KnowledgeBase, BM25Index]:
    """The knowledge base of `kb_seed` and its BM25 index, built once per process."""
    key = (kb_seed, tuple(sorted(sizes.items())))
    if key not in _KB_CACHE:
        kb = KnowledgeBase(kb_seed, **sizes)
        _KB_CACHE[key] = (kb, BM25Index.build(tokenize(p) for p in kb.passages))
    return _KB_CACHE[key]


@register("searchqa")
class SearchQA(SearchQABase):
    """Search-R1 QA over the generated knowledge base of `kb_seed`; task `seed` = question `seed` of the
    knowledge base, or a redraw when that question is held out for eval (see module docstring).

    Kwargs: kb_seed (0), max_turns (10), topk (3), kb_sizes (dict of KnowledgeBase sizes, optional),
    eval_fraction (0.1), plus SearchQABase's limits. `expert_action` searches each hop entity by name, in
    order, then answers; it solves every task in hops + 1 turns.
    """

    name = "searchqa"

    def __init__(self, kb_seed: int = 0, max_turns: int = 10, topk: int = 3,
                 kb_sizes: dict[str, int] | None = None, eval_fraction: float = EVAL_FRACTION, **limits: Any):
        super().__init__(max_turns=max_turns, topk=topk, **limits)
        self.kb, self.index = knowledge_base(kb_seed, **(kb_sizes or {}))
        kb = self.kb
        self.split = ContentSplit("searchqa", lambda draw: question_key(kb.question(draw)), eval_fraction,
                                  cache_key=(kb_seed, tuple(sorted((kb_sizes or {}).items()))))

    def _qid(self, seed: int) -> int:
        return self.split.index(int(seed))

    def task_id(self, seed: int, split: str = "train") -> str:
        return self.split.task_id(split_seed(seed, split))

    def question_record(self, qid: int | None = None) -> Question:
        """The full question record (hops, template) of `qid` (default: the current task)."""
        return self.kb.question(self.state.qid if qid is None else qid)

    def _question(self, qid: int) -> tuple[str, tuple[str, ...]]:
        q = self.kb.question(qid)
        return q.text, q.golden_answers

    def _retrieve(self, query: str) -> list[str]:
        return [self.kb.passages[i] for i in self.index.search(query, self.topk)]

    def privileged_facts(self, seed: int) -> list[str]:
        """The question, its gold answers and the hop entities to look up, in order."""
        out = super().privileged_facts(seed)
        return out + [f"Entities to look up, in order: {', '.join(self.question_record().hops)}"]

    def reference_policy(self, eps: float) -> Callable[[str, dict], dict[str, float]]:
        """pi(a|s) = (1 - eps) 1[a = expert(s)] + eps / |C(s)| 1[a in C(s)], C(s): a search for each hop
        entity not searched yet, the gold answer, a wrong answer. Reads the expert from this env."""
        from prover_jax.envs.testing import mix

        def searchqa(obs: str, info: dict) -> dict[str, float]:
            q = self.question_record()
            done = set(self.state.queries)
            wrong = next(w for w in ("unknown", "no answer", "none of them") if not exact_match(w, q.golden_answers))
            cands = [f"<search>{h}</search>" for h in q.hops if h not in done]
            cands += [f"<answer>{q.golden_answers[0]}</answer>", f"<answer>{wrong}</answer>"]
            return mix(self.expert_action(), cands, eps)
        return searchqa

    def expert_action(self) -> str | None:
        s = self.state
        if s.done:
            return None
        q = self.kb.question(s.qid)
        pending = [h for h in q.hops if h not in s.queries]
        if pending and s.turn < self.max_turns - 1:
            return f"<search>{pending[0]}</search>"
        return f"<answer>{q.golden_answers[0]}</answer>"
