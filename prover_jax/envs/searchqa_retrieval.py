"""Retrieval behind the Search-R1 protocol: a BM25 index over passages, a remote retriever, and the
`<information>` block the agent reads.

Passages use the Search-R1/FlashRAG corpus convention: `contents = '"Title"\\ntext'`; the first line
is the title (shown verbatim, quotes included, as Search-R1 does), the rest is the text. A search
answers

    <information>Doc 1(Title: <title>) <text>\\nDoc 2(Title: ...) ...\\nDoc k(Title: ...) ...</information>

BM25 ranking is deterministic: documents sorted by score, ties broken by lower document index, and
documents that share no term with the query are never returned. `bm25s` is imported lazily.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Iterable, Sequence

_TOKEN_RE = re.compile(r"(?u)\b\w\w+\b")
# The English stopword list of Lucene (also bm25s' "en" list).
STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with".split())
_MAX_RESPONSE_BYTES = 4 << 20


class RetrievalError(RuntimeError):
    """A search could not be answered (remote retriever down, bad response); shown to the agent."""


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens of >= 2 characters, stopwords removed."""
    return [t for t in _TOKEN_RE.findall(text.lower()) if t not in STOPWORDS]


def split_contents(contents: str) -> tuple[str, str]:
    """(title, text) of a passage: title = first line, text = the remaining lines."""
    title, _, text = contents.partition("\n")
    return title, text


def format_information(docs: Sequence[str]) -> str:
    """The observation of one search: the `<information>` block over passages `docs` (rank order)."""
    if not docs:
        return "<information>No documents matched the query.</information>"
    lines = []
    for i, contents in enumerate(docs):
        title, text = split_contents(contents)
        lines.append(f"Doc {i + 1}(Title: {title}) {text}")
    return "<information>" + "\n".join(lines).strip() + "</information>"


class BM25Index:
    """BM25 (Lucene variant, k1=1.5, b=0.75) over tokenized documents; see `search` for the ranking."""

    def __init__(self, model: Any):
        self.model = model
        self.n_docs = int(model.scores["num_docs"])

    @classmethod
    def build(cls, docs_tokens: Iterable[list[str]]) -> "BM25Index":
        """Index documents given as token lists (see `tokenize`)."""
        import bm25s

        vocab: dict[str, int] = {}
        ids = [[vocab.setdefault(t, len(vocab)) for t in tokens] for tokens in docs_tokens]
        if not ids:
            raise ValueError("cannot index an empty corpus")
        if not vocab:
            raise ValueError("cannot index a corpus without a single word token")
        model = bm25s.BM25()
        model.index((ids, vocab), show_progress=False)
        return cls(model)

    def search(self, query: str, k: int) -> list[int]:
        """Indices of the top-k documents for `query`: score descending, then index ascending."""
        import numpy as np

        ids = self.model.get_tokens_ids(tokenize(query))
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
    def load(cls, directory: str) -> "BM25Index":
        import bm25s

        return cls(bm25s.BM25.load(directory, mmap=True, show_progress=False, verbosity=0))


def _contents_of(doc: Any) -> str:
    if isinstance(doc, dict) and isinstance(doc.get("contents"), str):
        return doc["contents"]
    if isinstance(doc, dict) and isinstance(doc.get("title"), str) and isinstance(doc.get("text"), str):
        return f'"{doc["title"]}"\n{doc["text"]}'
    raise RetrievalError(f"a retrieved document has neither 'contents' nor 'title'+'text': {str(doc)[:200]}")


def _is_loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class HttpRetriever:
    """Client of a Search-R1 retrieval server.

    Request:  POST url  {"queries": [q], "topk": k, "return_scores": true}
    Response: {"result": [[{"document": {"id": ..., "contents": '"Title"\\ntext'}, "score": s}, ...]]}
              (without scores each entry is the document itself). Every failure raises RetrievalError.
    """

    def __init__(self, url: str, topk: int = 3, timeout_s: float = 10.0):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"retriever_url {url!r} is not an http(s) URL")
        self.url, self.topk, self.timeout_s = url, topk, timeout_s
        handlers = [urllib.request.ProxyHandler({})] if _is_loopback(url) else []
        self._opener = urllib.request.build_opener(*handlers)

    def search(self, query: str) -> list[str]:
        """Contents of the top-k documents for `query`, in the server's order."""
        body = json.dumps({"queries": [query], "topk": self.topk, "return_scores": True}).encode()
        request = urllib.request.Request(self.url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                raw = response.read(_MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as e:
            raise RetrievalError(f"retriever {self.url} answered HTTP {e.code} {e.reason}") from None
        except urllib.error.URLError as e:
            raise RetrievalError(f"retriever {self.url} unreachable: {e.reason}") from None
        except (TimeoutError, OSError) as e:
            raise RetrievalError(f"retriever {self.url} failed: {e or type(e).__name__}") from None
        if len(raw) > _MAX_RESPONSE_BYTES:
            raise RetrievalError(f"retriever {self.url} response exceeds {_MAX_RESPONSE_BYTES} bytes")
        try:
            payload = json.loads(raw)
            hits = payload["result"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            raise RetrievalError(f"retriever {self.url} response is not {{'result': [[...]]}}: "
                                 f"{raw[:200]!r}") from None
        if not isinstance(hits, list):
            raise RetrievalError(f"retriever {self.url} result[0] is not a list")
        docs = [_contents_of(h["document"] if isinstance(h, dict) and "document" in h else h) for h in hits]
        return docs[: self.topk]


def default_index_dir(corpus_path: str) -> str:
    """Where the BM25 index of a corpus is cached unless told otherwise: next to it, `<corpus>.bm25s`."""
    return os.fspath(corpus_path) + ".bm25s"
