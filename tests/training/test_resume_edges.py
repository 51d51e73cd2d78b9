"""train() across restarts at the edges: an update skipped right after a checkpoint, a run killed
before its first checkpoint (with a KL reference), a finished run's command run again, a torn last
metrics line, an unreadable summary.json, a changed config. Each step is logged once, each checkpoint
and evaluation happens once, and the run goes on (or says why it cannot)."""

import json
import logging
import os
import shutil

import pytest

from prover_jax.training import trainer as trainer_lib
from prover_jax.training.checkpoints import CheckpointMismatchError
from prover_jax.training.run import train

from helpers.credit import nan_advantages
from helpers.demo_config import trainer_config


def config(**train):
    c = trainer_config()
    c.sft.steps = 0
    c.credit.method = "grpo"
    for k, v in train.items():
        setattr(c.train, k, v)
    return c


def kinds(workdir):
    """(step, "train" | "eval") of each metrics.jsonl row."""
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [(r["step"], "train" if "success_rate" in r else "eval") for r in map(json.loads, f)]


def patch_rl_step(monkeypatch, on_call):
    """Trainer.rl_step runs `on_call(n, trainer, real)` on its n-th call (from 1)."""
    real, calls = trainer_lib.Trainer.rl_step, {"n": 0}

    def rl_step(self):
        calls["n"] += 1
        return on_call(calls["n"], self, lambda: real(self))

    monkeypatch.setattr(trainer_lib.Trainer, "rl_step", rl_step)


def test_an_update_skipped_after_a_checkpoint_is_neither_saved_nor_evaluated_again(tmp_path, monkeypatch):
    """The 2nd update is non-finite (skipped, step stays 1, which was just saved and evaluated): the
    run goes on to step 2 without a second save or evaluation of step 1."""
    def on_call(n, t, real):
        if n != 2:
            return real()
        assign = t.run.credit.assign
        t.run.credit.assign = nan_advantages(assign)
        try:
            return real()
        finally:
            t.run.credit.assign = assign

    patch_rl_step(monkeypatch, on_call)
    workdir = str(tmp_path / "skip")
    summary = train(config(checkpoint_every=1, eval_every=1), workdir, progress=False)
    # the skipped update is logged under the step it would have had
    assert kinds(workdir) == [(0, "eval"), (1, "train"), (1, "eval"), (2, "train"), (2, "train"), (2, "eval")]
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        assert [r.get("applied") for r in map(json.loads, f) if "success_rate" in r] == [True, False, True]
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["1", "2"]
    assert summary["success_after_rl"] == summary["eval_after_rl"]["eval/success"]


def test_a_run_killed_before_its_first_checkpoint_starts_again(tmp_path, monkeypatch):
    """kl_coef > 0, no SFT, no checkpoint before the kill in step 2: the restart reuses the step-0 KL
    reference saved in W/reference, drops the lost step's row (each step logged once, the summary
    counts 2 steps); once the run is past step 0, a removed W/reference is an error naming it."""
    def on_call(n, t, real):
        if n == 2:
            raise KeyboardInterrupt("killed")
        return real()

    c = config(steps=2, checkpoint_every=10)
    c.loss.kl_coef = 0.05
    workdir = str(tmp_path / "kl")
    patch_rl_step(monkeypatch, on_call)
    with pytest.raises(KeyboardInterrupt):
        train(c, workdir, progress=False)
    assert os.listdir(os.path.join(workdir, "reference")) == ["0"]
    assert not os.listdir(os.path.join(workdir, "checkpoints"))
    monkeypatch.undo()
    summary = train(c, workdir, progress=False)
    assert kinds(workdir) == [(0, "eval"), (1, "train"), (2, "train"), (2, "eval")]
    assert summary["rl_steps"] == 2 and os.listdir(os.path.join(workdir, "reference")) == ["0"]
    shutil.rmtree(os.path.join(workdir, "reference"))
    with pytest.raises(FileNotFoundError, match=f"no KL reference checkpoint in {workdir}/reference"):
        train(c, workdir, progress=False)


def test_a_finished_run_run_again_adds_nothing_and_mends_its_files(tmp_path, caplog):
    """Re-running a finished run's command logs no row (its last evaluation is kept); a torn last
    metrics line is dropped with a warning naming the file; an unreadable summary.json is rewritten
    (the evaluation before RL taken from metrics.jsonl, not run again); a config whose checkpoint
    differs (LoRA on) is told so, with either on_corrupt_checkpoint, and its checkpoint stays."""
    c = config(steps=1)
    workdir = str(tmp_path / "done")
    metrics, summary_path = os.path.join(workdir, "metrics.jsonl"), os.path.join(workdir, "summary.json")
    first = train(c, workdir, progress=False)
    with open(metrics) as f:
        rows = f.read()
    assert kinds(workdir) == [(0, "eval"), (1, "train"), (1, "eval")]
    with open(metrics, "a") as f:
        f.write('{"step": 2, "applied": true, "tasks": [12')  # killed mid-append
    with open(summary_path) as f:
        text = f.read()
    with open(summary_path, "w") as f:
        f.write(text[:len(text) // 2])  # killed mid-write
    with caplog.at_level(logging.WARNING):
        again = train(c, workdir, progress=False)
    warned = [r.getMessage() for r in caplog.records]
    assert any(metrics in m and "torn" in m for m in warned) and any(summary_path in m for m in warned)
    with open(metrics) as f:
        assert f.read() == rows
    with open(summary_path) as f:
        assert json.load(f) == again
    for key in ("eval_before_rl", "success_before_rl", "eval_after_rl", "success_after_rl", "rl_steps"):
        assert again[key] == first[key], key
    c.model.lora.rank = 4
    for on_corrupt in ("error", "previous"):
        c.train.on_corrupt_checkpoint = on_corrupt
        with pytest.raises(CheckpointMismatchError, match=f"{workdir}/checkpoints/1 does not match this config"):
            train(c, workdir, progress=False)
    assert os.listdir(os.path.join(workdir, "checkpoints")) == ["1"]
    with open(metrics) as f:
        assert f.read() == rows
