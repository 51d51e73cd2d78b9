"""`searchqa_data`: the Search-R1 protocol (see `searchqa.env`) over user-supplied questions and corpus.

    make("searchqa_data", qa_path=..., corpus_path=...)      # local BM25 over a JSONL corpus
    make("searchqa_data", qa_path=..., retriever_url=...)    # a Search-R1 retrieval server

QA file (FlashRAG / Search-R1 layout), JSONL with one object per line or JSON holding a list:
    {"id": ..., "question": "who wrote ...?", "golden_answers": ["...", ...]}
(`golden_answers` may also be a single string). Questions and answers may be in any language: text
is Unicode, answers match after NFKC + casefold + punctuation / article / whitespace normalisation
(`searchqa.normalize_answer`); `ascii_only=True` makes non-ASCII queries and answers invalid turns.

Splits. With `eval_qa_path` (e.g. the benchmark's dev/test file) the eval tasks are that file's
questions and training uses the `qa_path` questions that are not in it (same text after NFKC +
casefold + whitespace folding; the repeats dropped are warned about; the same file twice is an
error). Without it, a deterministic share of `qa_path` is held out: the distinct question texts are
ordered by their SHA-256 and the first ceil(eval_fraction * n) (eval_fraction = 0.1 by default) are
the eval questions, with every record asking them, so the split depends neither on the file's order
nor on how many times a question repeats. Train task s asks train question s mod n_train (file order),
eval task i asks eval question i mod n_eval (its first record; the eval split holds each question once).

Corpus JSONL, one passage per line: {"id": ..., "contents": "\\"Title\\"\\ntext"} (or "title" + "text").
Its BM25 index and the byte offset of every line are cached in `index_dir` (default `<corpus>.bm25s`),
keyed by the corpus' size and mtime; a later load maps the cached index and reads passages by offset
instead of re-tokenizing. An unwritable `index_dir` only disables the disk cache (with a warning).

A missing or corrupt file raises one DataError naming the path (and line) and the problem.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
import warnings
from typing import Any

from prover_jax.envs.base import register, split_seed
from prover_jax.envs.searchqa.env import SearchQABase
from prover_jax.envs.searchqa.retrieval import HttpRetriever, RetrievalError, default_index_dir
from prover_jax.envs.splits import EVAL_FRACTION, IndexSplit, digest
from prover_jax.envs.text import BM25Index, json_records, normalize, tokenize

_CACHE_VERSION = 1


class DataError(ValueError):
    """A user data file is missing or malformed (the message names the path and the problem)."""


def _stat_key(path: str) -> tuple[str, int, int]:
    if not os.path.exists(path):
        raise DataError(f"{path}: file does not exist")
    if not os.path.isfile(path):
        raise DataError(f"{path}: not a regular file")
    st = os.stat(path)
    return os.path.realpath(path), st.st_size, st.st_mtime_ns


def _contents(record: Any, where: str) -> str:
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
    if isinstance(record.get("contents"), str):
        return record["contents"]
    if isinstance(record.get("title"), str) and isinstance(record.get("text"), str):
        return f'"{record["title"]}"\n{record["text"]}'
    raise DataError(f"{where}: a passage needs a string 'contents' (or 'title' and 'text')")


def _qa_record(record: Any, where: str) -> tuple[str, tuple[str, ...]]:
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"{where}: 'question' must be a non-empty string")
    golden = record.get("golden_answers")
    if isinstance(golden, str):
        golden = [golden]
    if (not isinstance(golden, list) or not golden
            or not all(isinstance(g, str) and g.strip() for g in golden)):
        raise DataError(f"{where}: 'golden_answers' must be a non-empty list of non-empty strings")
    return question.strip(), tuple(golden)


_QA_CACHE: dict[tuple, list[tuple[str, tuple[str, ...]]]] = {}


def load_qa(path: str) -> list[tuple[str, tuple[str, ...]]]:
    """[(question, golden answers)] of a QA file (JSONL, or JSON holding a list); cached per process."""
    key = _stat_key(path)
    if key in _QA_CACHE:
        return _QA_CACHE[key]
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read the QA file ({e})") from None
    items = [_qa_record(record, where) for where, record in json_records(text, path, DataError)]
    if not items:
        raise DataError(f"{path}: the QA file holds no questions")
    _QA_CACHE[key] = items
    return items


class Corpus:
    """Passages of a JSONL corpus, read by byte offset, and their BM25 index."""

    def __init__(self, path: str, offsets: Any, index: BM25Index):
        self.path, self.offsets, self.index = path, offsets, index
        self._lock = threading.Lock()
        self._file = None

    def __len__(self) -> int:
        return len(self.offsets)

    def contents(self, i: int) -> str:
        with self._lock:
            if self._file is None:
                self._file = open(self.path, "rb")
            self._file.seek(int(self.offsets[i]))
            line = self._file.readline()
        return _contents(json.loads(line), f"{self.path}: document {i}")

    def search(self, query: str, k: int) -> list[str]:
        try:
            return [self.contents(i) for i in self.index.search(query, k)]
        except (OSError, ValueError) as e:
            raise RetrievalError(f"cannot read a passage of {self.path}: {e}") from None

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def _scan_corpus(path: str) -> tuple[list[int], list[list[str]]]:
    offsets, tokens = [], []
    with open(path, "rb") as f:
        offset = 0
        for n, raw in enumerate(f, 1):
            if raw.strip():
                try:
                    record = json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError) as e:
                    raise DataError(f"{path}: line {n}: not valid JSON ({e})") from None
                offsets.append(offset)
                tokens.append(tokenize(_contents(record, f"{path}: line {n}")))
            offset += len(raw)
    if not offsets:
        raise DataError(f"{path}: the corpus holds no passages")
    return offsets, tokens


def _read_meta(index_dir: str) -> dict | None:
    try:
        with open(os.path.join(index_dir, "meta.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


_CORPUS_CACHE: dict[tuple, Corpus] = {}


def load_corpus(path: str, index_dir: str | None = None) -> Corpus:
    """The corpus at `path` with its BM25 index: from the process cache, the disk cache, or built."""
    import numpy as np

    real, size, mtime_ns = _stat_key(path)
    index_dir = index_dir or default_index_dir(path)
    key = (real, size, mtime_ns, os.path.realpath(index_dir))
    if key in _CORPUS_CACHE:
        return _CORPUS_CACHE[key]
    meta = dict(version=_CACHE_VERSION, corpus=real, size=size, mtime_ns=mtime_ns)
    cached = _read_meta(index_dir)
    corpus = None
    if cached is not None and {k: cached.get(k) for k in meta} == meta:
        try:
            offsets = np.load(os.path.join(index_dir, "offsets.npy"))
            corpus = Corpus(path, offsets, BM25Index.load(os.path.join(index_dir, "bm25")))
        except (OSError, ValueError, KeyError) as e:
            warnings.warn(f"{index_dir}: cached index unreadable ({e!r}); rebuilding")
            corpus = None
    if corpus is None:
        offsets_list, tokens = _scan_corpus(path)
        offsets = np.asarray(offsets_list, dtype=np.int64)
        corpus = Corpus(path, offsets, BM25Index.build(tokens))
        try:
            os.makedirs(index_dir, exist_ok=True)
            if os.path.exists(os.path.join(index_dir, "meta.json")):
                os.remove(os.path.join(index_dir, "meta.json"))
            corpus.index.save(os.path.join(index_dir, "bm25"))
            np.save(os.path.join(index_dir, "offsets.npy"), offsets)
            with open(os.path.join(index_dir, "meta.json"), "w") as f:
                json.dump(dict(meta, n_docs=len(offsets)), f)
        except OSError as e:
            warnings.warn(f"{index_dir}: cannot cache the BM25 index ({e}); it will be rebuilt next time")
    _CORPUS_CACHE[key] = corpus
    return corpus


def question_key(question: str) -> str:
    """A question's identity for the split: NFKC, casefolded, whitespace folded."""
    return normalize(question, unicode=True)


def _first_of_each(keys: list[str], positions) -> list[int]:
    """`positions` without those whose question (key) an earlier one asks already."""
    seen: set[str] = set()
    out = []
    for i in positions:
        if keys[i] not in seen:
            seen.add(keys[i])
            out.append(i)
    return out


def qa_split(qa_path: str, questions: list, eval_qa_path: str | None = None,
             eval_fraction: float = EVAL_FRACTION) -> tuple[IndexSplit, list]:
    """(split over the records, records): the records are `questions` followed by the eval file's."""
    keys = [question_key(q) for q, _ in questions]
    if eval_qa_path:
        if _stat_key(eval_qa_path)[0] == _stat_key(qa_path)[0]:
            raise ValueError(f"searchqa_data: eval_qa_path is qa_path ({qa_path}): the eval questions would "
                             "all be trained on; give a held-out file, or leave eval_qa_path unset to hold "
                             "out eval_fraction of qa_path")
        held = load_qa(eval_qa_path)
        held_keys = {question_key(q) for q, _ in held}
        train = [i for i, k in enumerate(keys) if k not in held_keys]
        if len(train) < len(keys):
            warnings.warn(f"searchqa_data: {len(keys) - len(train)} of the {len(keys)} questions of {qa_path} are "
                          f"also in eval_qa_path {eval_qa_path}; they are left out of training")
        records = list(questions) + list(held)
        keys += [question_key(q) for q, _ in held]
        evals = _first_of_each(keys, range(len(questions), len(records)))
        settings = {"train": f"the questions of qa_path={qa_path} not in eval_qa_path={eval_qa_path}",
                    "eval": f"eval_qa_path={eval_qa_path}"}
    else:
        eval_fraction = float(eval_fraction)
        if not 0.0 <= eval_fraction < 1.0:
            raise ValueError(f"searchqa_data: eval_fraction must be in [0, 1), got {eval_fraction}")
        distinct = sorted(set(keys), key=lambda k: hashlib.sha256(k.encode("utf-8")).digest())
        held_keys = set(distinct[:math.ceil(eval_fraction * len(distinct))])
        train = [i for i, k in enumerate(keys) if k not in held_keys]
        evals = _first_of_each(keys, (i for i, k in enumerate(keys) if k in held_keys))
        records = list(questions)
        settings = {"train": f"{len(distinct) - len(held_keys)} of the {len(distinct)} distinct questions of "
                             f"qa_path={qa_path} (eval_fraction={eval_fraction})",
                    "eval": f"eval_fraction={eval_fraction} of the {len(distinct)} distinct questions of "
                            f"qa_path={qa_path}, and no eval_qa_path"}
    ids = [f"searchqa_data:{digest(k)}" for k in keys]
    return IndexSplit("searchqa_data", ids, train, evals, settings), records


@register("searchqa_data")
class SearchQAData(SearchQABase):
    """Search-R1 QA over user data (see module docstring); exactly one of corpus_path / retriever_url.

    Kwargs: qa_path, corpus_path | retriever_url, index_dir (None), topk (3), max_turns (10),
    timeout_s (10.0, remote retriever), eval_qa_path (None) | eval_fraction (0.1) (the held-out eval
    questions, see module docstring), ascii_only (False: queries and answers may be any Unicode text),
    plus SearchQABase's other limits. No expert policy.
    """

    name = "searchqa_data"

    def __init__(self, qa_path: str, corpus_path: str | None = None, retriever_url: str | None = None,
                 index_dir: str | None = None, topk: int = 3, max_turns: int = 10, timeout_s: float = 10.0,
                 eval_qa_path: str | None = None, eval_fraction: float = EVAL_FRACTION, ascii_only: bool = False,
                 **limits: Any):
        super().__init__(max_turns=max_turns, topk=topk, ascii_only=ascii_only, **limits)
        if (corpus_path is None) == (retriever_url is None):
            raise ValueError("searchqa_data needs exactly one of corpus_path and retriever_url")
        self.questions = load_qa(qa_path)
        self.corpus = load_corpus(corpus_path, index_dir) if corpus_path is not None else None
        self.remote = HttpRetriever(retriever_url, topk, timeout_s) if retriever_url is not None else None
        self.split, self.records = qa_split(qa_path, self.questions, eval_qa_path, eval_fraction)

    def _qid(self, seed: int) -> int:
        return self.split.index(int(seed))

    def task_id(self, seed: int, split: str = "train") -> str:
        return self.split.task_id(split_seed(seed, split))

    def split_sizes(self) -> dict[str, int | None]:
        return self.split.sizes()

    def _question(self, qid: int) -> tuple[str, tuple[str, ...]]:
        return self.records[qid]

    def _retrieve(self, query: str) -> list[str]:
        if self.corpus is not None:
            return self.corpus.search(query, self.topk)
        return self.remote.search(query)

    def close(self) -> None:
        if self.corpus is not None:
            self.corpus.close()
