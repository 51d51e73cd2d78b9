"""Retrieval behind the Search-R1 protocol: a remote retriever and the `<information>` block the agent
reads (the local BM25 index over passages is `envs.text.BM25Index`).

Passages use the Search-R1/FlashRAG corpus convention: `contents = '"Title"\\ntext'`; the first line
is the title (shown verbatim, quotes included, as Search-R1 does), the rest is the text. A search
answers

    <information>Doc 1(Title: <title>) <text>\\nDoc 2(Title: ...) ...\\nDoc k(Title: ...) ...</information>
"""

from __future__ import annotations

import ipaddress
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Sequence

_MAX_RESPONSE_BYTES = 4 << 20


class RetrievalError(RuntimeError):
    """A search could not be answered (remote retriever down, bad response); shown to the agent."""


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
