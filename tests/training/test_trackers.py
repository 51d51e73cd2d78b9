"""train.loggers: metrics rows to TensorBoard, wandb (offline) and trackio (local), process 0 only, the
tracker's run id kept in the run folder so that a resumed run continues the same tracker run."""

import json
import os
import sqlite3

import pytest

from prover_jax.training import trackers
from prover_jax.training.run import train

from helpers.demo_config import trainer_config


def config(loggers, steps=1):
    c = trainer_config()
    c.sft.steps, c.credit.method, c.train.steps, c.train.loggers = 0, "grpo", steps, tuple(loggers)
    return c


def test_unknown_and_missing_trackers_are_named(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"train.loggers: unknown \['mlflw'\]"):
        trackers.check(("tensorboard", "mlflw"))
    monkeypatch.setattr(trackers, "_import", lambda m: (_ for _ in ()).throw(
        ValueError(f"train.loggers has {m!r}, which is not installed: pip install 'prover_jax[trackers]'")))
    with pytest.raises(ValueError, match=r"not installed: pip install 'prover_jax\[trackers\]'"):
        trackers._ApiSink("wandb", tmp_path, {}, "p")


def test_wandb_offline_keeps_its_run_across_a_resume(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    workdir = tmp_path / "run"
    train(config(["wandb"]), str(workdir), progress=False)
    run_id = json.loads((workdir / "trackers.json").read_text())["wandb"]
    train(config(["wandb"], steps=2), str(workdir), progress=False)
    assert json.loads((workdir / "trackers.json").read_text())["wandb"] == run_id
    runs = [d for d in os.listdir(workdir / "wandb") if d.startswith("offline-run-")]
    assert len(runs) == 2 and all(d.endswith(run_id) for d in runs)  # the same run id, resumed
    assert not (workdir / "tensorboard").exists()


def test_trackio_locally_gets_every_row(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))
    workdir = tmp_path / "run2"
    c = config(["trackio", "tensorboard"])
    c.train.tracker_project = "prover-test"
    train(c, str(workdir), progress=False)
    assert (workdir / "tensorboard").exists()
    dbs = [os.path.join(r, f) for r, _, fs in os.walk(tmp_path / "trackio") for f in fs if f.endswith(".db")]
    assert dbs, os.listdir(tmp_path / "trackio")
    with sqlite3.connect(dbs[0]) as db:
        tables = [r[0] for r in db.execute("select name from sqlite_master where type='table'")]
        rows = db.execute(f"select * from {'metrics' if 'metrics' in tables else tables[0]}").fetchall()
    assert len(rows) >= 3  # the evaluation before RL, the step, the evaluation after
