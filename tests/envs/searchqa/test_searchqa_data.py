"""Tests of the `searchqa_data` family: user QA files over a JSONL corpus (BM25, disk cache) or a
Search-R1 retrieval server."""

from __future__ import annotations

import http.server
import json
import os
import socket
import threading
import time

import pytest

from prover_jax.envs import make
from prover_jax.envs.searchqa.data import DataError, load_corpus, load_qa
from prover_jax.envs.searchqa.kb import KnowledgeBase


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def kb_files(tmp_path_factory):
    kb = KnowledgeBase(3)
    root = tmp_path_factory.mktemp("searchqa")
    rows = [{"id": str(i), "contents": c} for i, c in enumerate(kb.passages)]
    corpus = write_jsonl(root / "corpus.jsonl", rows)
    qs = [kb.question(s) for s in range(40)]
    qa = write_jsonl(root / "qa.jsonl", [{"id": f"q{q.qid}", "question": q.text,
                                         "golden_answers": list(q.golden_answers)} for q in qs])
    return kb, qs, corpus, qa, root


def solve_with_hops(env, seed, hops, answer):
    env.reset(seed)
    observations = [env.step(f"<search>{h}</search>")[0] for h in hops]
    return observations, env.step(f"<answer>{answer}</answer>")


def test_corpus_adapter_and_disk_cache(kb_files, monkeypatch):
    kb, qs, corpus_path, qa_path, root = kb_files
    index_dir = str(root / "idx")
    # eval_fraction=0: every question is a train task, so train seed s asks question s of the file
    env = make("searchqa_data", qa_path=qa_path, corpus_path=corpus_path, index_dir=index_dir, eval_fraction=0.0)
    assert os.path.exists(os.path.join(index_dir, "meta.json"))
    builtin = make("searchqa", kb_seed=3)
    for seed in range(len(qs)):
        q = qs[seed]
        obs, info = env.reset(seed)
        assert obs == f"Question: {q.text}" and info["golden_answers"] == list(q.golden_answers)
        observations, (_, reward, done, info) = solve_with_hops(env, seed, q.hops, q.golden_answers[0])
        assert reward == 1.0 and done and info["success"]
        reference, _ = solve_with_hops(builtin, seed, q.hops, q.golden_answers[0])
        assert observations == reference
    assert env.reset(len(qs) + 2)[0] == f"Question: {qs[2].text}"
    from prover_jax.envs.searchqa import data as searchqa_data
    searchqa_data._CORPUS_CACHE.clear()
    with monkeypatch.context() as m:
        m.setattr(searchqa_data, "_scan_corpus", lambda path: pytest.fail("re-tokenized a cached corpus"))
        reloaded = load_corpus(corpus_path, index_dir)
    for q in qs:
        assert reloaded.search(q.hops[0], 3) == env.corpus.search(q.hops[0], 3)
    searchqa_data._CORPUS_CACHE.clear()
    os.remove(os.path.join(index_dir, "offsets.npy"))
    with pytest.warns(UserWarning, match="rebuilding"):
        rebuilt = load_corpus(corpus_path, index_dir)
    assert rebuilt.search("Riston", 3) == env.corpus.search("Riston", 3)


def test_corpus_cache_is_invalidated_when_the_corpus_changes(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "1", "contents": '"Alpha"\nalpha text'},
                                              {"id": "2", "title": "Beta", "text": "beta text"}])
    assert load_corpus(path).search("beta", 3) == ['"Beta"\nbeta text']
    assert os.path.isdir(path + ".bm25s")
    time.sleep(0.01)
    write_jsonl(tmp_path / "c.jsonl", [{"id": "1", "contents": '"Gamma"\ngamma text'}])
    assert load_corpus(path).search("gamma", 3) == ['"Gamma"\ngamma text']
    assert load_corpus(path).search("beta", 3) == []


def test_qa_file_formats(tmp_path):
    path = tmp_path / "qa.json"
    path.write_text(json.dumps([{"question": "q one?", "golden_answers": "a"},
                                {"question": " q two? ", "golden_answers": ["b", "c"]}]))
    assert load_qa(str(path)) == [("q one?", ("a",)), ("q two?", ("b", "c"))]


@pytest.mark.parametrize("content,problem", [
    (None, "does not exist"),
    ("", "holds no questions"),
    ('{"question": "q?", "golden_answers": ["a"]}\n{broken\n', "line 2: not valid JSON"),
    ('{"question": "q?"}\n', "'golden_answers' must be"),
    ('{"question": "", "golden_answers": ["a"]}\n', "'question' must be"),
    ('[1, 2]', "record 0: expected a JSON object"),
    ('["unterminated', "not valid JSON"),
])
def test_bad_qa_file(tmp_path, content, problem):
    path = tmp_path / "qa.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(DataError) as err:
        load_qa(str(path))
    assert str(path) in str(err.value) and problem in str(err.value)


@pytest.mark.parametrize("content,problem", [
    (None, "does not exist"),
    ("\n\n", "holds no passages"),
    ('{"id": 1, "contents": "\\"A\\"\\nx"}\nnot json\n', "line 2: not valid JSON"),
    ('{"id": 1, "text": "no title"}\n', "line 1: a passage needs a string 'contents'"),
    ('[1]\n', "line 1: expected a JSON object"),
])
def test_bad_corpus_file(tmp_path, content, problem):
    path = tmp_path / "corpus.jsonl"
    if content is not None:
        path.write_text(content)
    qa = write_jsonl(tmp_path / "qa.jsonl", [{"question": "q?", "golden_answers": ["a"]}])
    with pytest.raises(DataError) as err:
        make("searchqa_data", qa_path=qa, corpus_path=str(path))
    assert str(path) in str(err.value) and problem in str(err.value)


def test_data_family_needs_exactly_one_source(kb_files):
    _, _, corpus, qa, _ = kb_files
    with pytest.raises(ValueError, match="exactly one"):
        make("searchqa_data", qa_path=qa)
    with pytest.raises(ValueError, match="exactly one"):
        make("searchqa_data", qa_path=qa, corpus_path=corpus, retriever_url="http://127.0.0.1:1/retrieve")


class _RetrievalServer:
    """A Search-R1-style /retrieve server on 127.0.0.1 backed by a KB's BM25 index (or a fault)."""

    def __init__(self, kb, index):
        outer = self
        self.mode, self.requests = "ok", []

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, body))
                if outer.mode == "slow":
                    time.sleep(1.0)
                if outer.mode == "500":
                    self.send_error(500, "boom")
                    return
                if outer.mode == "garbage":
                    payload = b"<html>not json</html>"
                else:
                    result = [[{"document": {"id": str(i), "contents": kb.passages[i]}, "score": 1.0}
                               for i in index.search(q, body["topk"])] for q in body["queries"]]
                    payload = json.dumps({"result": result}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                try:
                    self.wfile.write(payload)
                except OSError:
                    pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/retrieve"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def test_retriever_url_adapter(kb_files):
    kb, qs, _, qa_path, _ = kb_files
    builtin = make("searchqa", kb_seed=3)
    server = _RetrievalServer(kb, builtin.index)
    try:
        env = make("searchqa_data", qa_path=qa_path, retriever_url=server.url, timeout_s=0.3, eval_fraction=0.0)
        for seed in range(8):
            q = qs[seed]
            observations, (_, reward, done, info) = solve_with_hops(env, seed, q.hops, q.golden_answers[0])
            assert reward == 1.0 and info["success"]
            assert observations == solve_with_hops(builtin, seed, q.hops, q.golden_answers[0])[0]
        path, body = server.requests[0]
        assert path == "/retrieve" and body == {"queries": [qs[0].hops[0]], "topk": 3, "return_scores": True}
        env.reset(0)
        for mode, expected in [("500", "HTTP 500"), ("garbage", "response is not"), ("slow", "")]:
            server.mode = mode
            before = env.snapshot()
            obs, reward, done, info = env.step("<search>Riston</search>")
            assert obs.startswith("<information>Search failed: ") and expected in obs
            assert info["valid"] and "retrieval_error" in info and not done
            assert env.snapshot().turn == before.turn + 1
    finally:
        server.close()
    obs, _, _, info = env.step("<search>Riston</search>")
    assert "Search failed" in obs and "retrieval_error" in info


def test_unreachable_retriever_is_an_observation(kb_files):
    _, _, _, qa_path, _ = kb_files
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/retrieve"
    env = make("searchqa_data", qa_path=qa_path, retriever_url=url, timeout_s=0.5)
    env.reset(0)
    obs, reward, done, info = env.step("<search>anything</search>")
    assert "unreachable" in obs and info["valid"] and not done
    with pytest.raises(ValueError, match="not an http"):
        make("searchqa_data", qa_path=qa_path, retriever_url="ftp://x/retrieve")
