"""Text helpers the families share: normalisation, word tokens and a BM25 index.

`normalize` is one pipeline with switches; each family picks its own:

    household command   normalize(s)                                      lowercase, squeeze whitespace
    shop fuzzy match    normalize(s, alnum=True)                          + non-alphanumerics -> space
    searchqa question   normalize(s, unicode=True)                        NFKC + casefold instead of lower
    searchqa answer     normalize(s, unicode=True, punctuation=True, articles=True)   (Search-R1's EM)

`tokenize` gives lowercased regex tokens minus stopwords (default: bm25s' / Lucene's English analyser).
`BM25Index` ranks deterministically: score descending, ties by lower document index, documents that
share no term with the query never returned. `bm25s` is imported lazily.
"""

from __future__ import annotations

import json
import re
import string
import unicodedata
from typing import Any, Callable, Iterable

# Word tokens of >= 2 characters, as bm25s and scikit-learn tokenise.
WORD_RE = re.compile(r"(?u)\b\w\w+\b")
# The English stopword list of Lucene (also bm25s' "en" list).
LUCENE_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with".split())

_NON_ALNUM = re.compile(r"[^a-z0-9]+")
_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")
_PUNCT = frozenset(string.punctuation)


def strip_punctuation(text: str) -> str:
    """`text` without ASCII punctuation and, for non-ASCII text, without any Unicode punctuation (P*)."""
    if text.isascii():
        return "".join(c for c in text if c not in _PUNCT)
    return "".join(c for c in text if c not in _PUNCT and not unicodedata.category(c).startswith("P"))


def normalize(text: str, *, unicode: bool = False, alnum: bool = False, punctuation: bool = False,
              articles: bool = False) -> str:
    """Folded text with single spaces, stripped (see module docstring for each family's switches).

    Steps, in order: case fold (`str.lower`, or NFKC + `str.casefold` when `unicode`); with `alnum`
    every run of characters outside [a-z0-9] becomes a space; with `punctuation` punctuation is removed
    (`strip_punctuation`); with `articles` the words a / an / the become spaces; whitespace squeezed.
    """
    text = unicodedata.normalize("NFKC", text).casefold() if unicode else text.lower()
    if alnum:
        text = _NON_ALNUM.sub(" ", text)
    if punctuation:
        text = strip_punctuation(text)
    if articles:
        text = _ARTICLES_RE.sub(" ", text)
    return " ".join(text.split())


def tokenize(text: str, pattern: re.Pattern = WORD_RE, stopwords: frozenset = LUCENE_STOPWORDS) -> list[str]:
    """The matches of `pattern` in lowercased `text`, stopwords removed (default: words of >= 2 chars)."""
    return [t for t in pattern.findall(text.lower()) if t not in stopwords]


class BM25Index:
    """BM25 (Lucene variant, k1=1.5, b=0.75) over tokenized documents; see `search` for the ranking.

    `tokenizer` turns a query into the tokens the documents were indexed with (default `tokenize`).
    """

    def __init__(self, model: Any, tokenizer: Callable[[str], list[str]] = tokenize):
        self.model, self.tokenizer = model, tokenizer
        self.n_docs = int(model.scores["num_docs"])

    @classmethod
    def build(cls, docs_tokens: Iterable[list[str]],
              tokenizer: Callable[[str], list[str]] = tokenize) -> "BM25Index":
        """Index documents given as token lists (made by `tokenizer`)."""
        import bm25s

        vocab: dict[str, int] = {}
        ids = [[vocab.setdefault(t, len(vocab)) for t in tokens] for tokens in docs_tokens]
        if not ids:
            raise ValueError("cannot index an empty corpus")
        if not vocab:
            raise ValueError("cannot index a corpus without a single word token")
        model = bm25s.BM25()
        model.index((ids, vocab), show_progress=False)
        return cls(model, tokenizer)

    def search(self, query: str, k: int) -> list[int]:
        """Indices of the top-k documents for `query`: score descending, then index ascending."""
        import numpy as np

        ids = self.model.get_tokens_ids(self.tokenizer(query))
        if not ids or k <= 0:
            return []
        scores = self.model.get_scores_from_ids(ids)
        positive = np.flatnonzero(scores > 0)
        if positive.size > k:
            kth = np.partition(scores[positive], positive.size - k)[positive.size - k]
            positive = positive[scores[positive] >= kth]
        order = np.argsort(-scores[positive], kind="stable")
        return [int(i) for i in positive[order][:k]]

    def save(self, directory: str) -> None:
        self.model.save(directory, show_progress=False)

    @classmethod
    def load(cls, directory: str, tokenizer: Callable[[str], list[str]] = tokenize) -> "BM25Index":
        import bm25s

        return cls(bm25s.BM25.load(directory, mmap=True, show_progress=False, verbosity=0), tokenizer)


def json_records(text: str, path: str, error: type[ValueError] = ValueError) -> list[tuple[str, object]]:
    """[(where, record)] of a JSON file holding a list, or of JSONL (one value a line; blank lines skipped):
    `where` names the record ("<path>: record i" / "<path>: line n") for the caller's messages; `error`
    (naming the path and line) when the text is not valid JSON."""
    if text.lstrip().startswith("[") or path.endswith(".json"):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as e:
            raise error(f"{path}: not valid JSON ({e})") from None
        if not isinstance(records, list):
            raise error(f"{path}: a JSON file here must hold a list of records")
        return [(f"{path}: record {i}", r) for i, r in enumerate(records)]
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((f"{path}: line {n}", json.loads(line)))
        except json.JSONDecodeError as e:
            raise error(f"{path}: line {n}: not valid JSON ({e.msg})") from None
    return out
