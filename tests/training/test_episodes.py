"""train.dump_episodes: the episode files a run writes (what the policy saw, its turns, advantages and
credit notes) and `prover-episodes`, which prints them."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from prover_jax.training import assemble, episodes
from prover_jax.training import episodes_cli
from prover_jax.training.run import train

from helpers.demo_config import trainer_config


def test_a_step_dumps_episodes_whose_text_is_the_trained_tokens(tmp_path, monkeypatch):
    """Two steps with dump_episodes=3: step_1/step_2 and eval_0/eval_2 files of at most 3 records; each
    record's text re-encodes to the token ids it was trained on, its turns' spans cut the policy's
    responses out of that text, and each turn's advantage is the mean of the trained advantages."""
    trained = {}
    real = assemble.train_batch

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        for group, ads in zip(out[0].groups, out[0].advantages):
            for t, a in zip(group, ads):
                trained[t.uid] = (t, a)
        return out

    monkeypatch.setattr(assemble, "train_batch", spy)
    c = trainer_config()
    c.sft.steps = 0
    c.train.loggers = ()
    c.train.dump_episodes = 3
    workdir = str(tmp_path / "run")
    train(c, workdir, progress=False)
    folder = os.path.join(workdir, "episodes")
    assert sorted(os.listdir(folder)) == ["eval_0.jsonl", "eval_2.jsonl", "step_1.jsonl", "step_2.jsonl"]
    from prover_jax.rollout.tokenizer import load_tokenizer
    tok = load_tokenizer(os.path.join(workdir, "tokenizer"))
    rows = episodes.read(os.path.join(folder, "step_1.jsonl"))
    assert 1 <= len(rows) <= 3
    encode = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    for r in rows:
        traj, adv = trained[r["uid"]]
        assert r["tokens"] == traj.tokens and r["text"] == episodes.decode(tok, traj.tokens)
        assert r["success"] == traj.success and len(r["turns"]) == traj.num_turns
        at, char = 0, 0  # the text re-encodes piece by piece: what the rollout wrote, and each response
        for turn, rec in zip(traj.turns, r["turns"]):
            a, b = rec["span"]
            assert encode(r["text"][char:a]) == traj.tokens[at:turn.start]
            ids = traj.tokens[turn.start:turn.end]
            assert r["text"][a:b] == episodes.decode(tok, ids)  # sampled ids: not always the canonical encoding
            assert rec["advantage"] == pytest.approx(float(np.mean(adv[turn.start:turn.end])))
            assert rec["action"] == turn.action and rec["observation"] == turn.observation
            at, char = turn.end, b
        assert encode(r["text"][char:]) == traj.tokens[at:]
    evals = episodes.read(os.path.join(folder, "eval_2.jsonl"))
    assert len(evals) == 2 and all(t["advantage"] is None for r in evals for t in r["turns"])
    assert all(r["seed"] < 0 for r in evals)  # held-out tasks


def test_episode_order_puts_noted_episodes_first_then_round_robin():
    class T:
        def __init__(self, uid):
            self.uid = uid

    groups = [[T(0), T(1), T(2)], [T(3), T(4), T(5)]]
    assert episodes.order(groups, {4}) == [(1, 1), (0, 0), (1, 0), (0, 1), (0, 2), (1, 2)]


def record(success, seed=7):
    return {"task": "put a hot apple in fridge 1.", "seed": seed, "uid": 3, "success": success,
            "reward": float(success),
            "termination": "done" if success else "turn_limit", "text": "<p>go to fridge 1<o>ok",
            "turns": [{"action": "go to fridge 1", "response": "go to fridge 1", "observation": "ok", "valid": True,
                       "reward": 0.0, "policy_tokens": 4, "advantage": 0.25, "span": [3, 17]}],
            "credit": {"method": "prover", "segment": [0, 0], "delta": 0.5, "accepted": True,
                       "pre": [{"success": False, "actions": ["look"]}], "post": []}}


def test_prover_episodes_prints_a_step_and_refuses_what_is_missing(tmp_path):
    folder = tmp_path / "episodes"
    folder.mkdir()
    (folder / "step_2.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (record(True), record(False, 8))))
    (folder / "step_5.jsonl").write_text(json.dumps(record(True, 9)) + "\n")
    cmd = [sys.executable, "-m", "prover_jax.training.episodes_cli", str(tmp_path)]
    out = subprocess.run(cmd + ["--step=2", "--failed"], capture_output=True, text=True, check=True).stdout
    assert "step 2, 1 episodes (failed only)" in out and "task 8" in out and "task 7" not in out
    assert "«go to fridge 1»" in out and "adv +0.250" in out and "segment=[0, 0]" in out and "pre: failed" in out
    latest = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert "step 5" in latest and "task 9" in latest
    text = subprocess.run(cmd + ["--text", "--step=2"], capture_output=True, text=True, check=True).stdout
    assert "<p>«go to fridge 1»<o>ok" in text
    missing = subprocess.run(cmd + ["--step=3"], capture_output=True, text=True)
    assert missing.returncode != 0 and "no step_3.jsonl" in missing.stderr and "2, 5" in missing.stderr
    no_eval = subprocess.run(cmd + ["--eval"], capture_output=True, text=True)
    assert no_eval.returncode != 0 and "dump_episodes" in no_eval.stderr
    (folder / "step_6.jsonl").write_text("not json\n")
    bad = subprocess.run(cmd, capture_output=True, text=True)
    assert bad.returncode != 0 and "step_6.jsonl:1" in bad.stderr


def test_marked_spans():
    assert episodes_cli.marked("ab cd ef", [(3, 5)], colour=False) == "ab «cd» ef"
