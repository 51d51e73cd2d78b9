"""The run folder records what made the run: W/config.json (the resolved config, which starts the same run
again) and W/provenance.json (git revision, packages, devices, mesh per start); a resume that changes a
field lists it."""

import json
import os
import subprocess
import sys

import pytest
from absl import logging as absl_logging

from prover_jax.training.config import default_config
from prover_jax.training.provenance import changed_fields, config_dict, config_from_json
from prover_jax.training.run import train

from helpers.demo_config import PATH, trainer_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def config(**train):
    c = trainer_config()
    c.sft.steps, c.credit.method, c.train.loggers = 0, "grpo", ()
    for k, v in train.items():
        setattr(c.train, k, v)
    return c


def rows(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def test_config_json_round_trips_every_field(tmp_path):
    c = trainer_config()
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config_dict(c)))
    again = config_from_json(str(path))
    assert config_dict(again) == config_dict(c)
    assert isinstance(again.rollout.prefill_lengths, tuple) and again.env.kwargs.max_turns == 6
    assert changed_fields(config_dict(c), config_dict(again)) == {}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"train": {"stepz": 3}}))
    with pytest.raises(ValueError, match=r"config.train.stepz is not a field"):
        config_from_json(str(bad))


def test_a_run_writes_its_config_and_provenance_and_lists_changes_on_resume(tmp_path, monkeypatch):
    workdir = str(tmp_path / "run")
    train(config(steps=1), workdir, progress=False)
    saved = json.load(open(os.path.join(workdir, "config.json")))
    assert saved == config_dict(config(steps=1))
    (start,) = json.load(open(os.path.join(workdir, "provenance.json")))["starts"]
    assert start["packages"]["jax"] and start["devices"]["platform"] == "cpu" and start["mesh"]
    assert len(start["git_revision"]) == 40 and isinstance(start["git_dirty"], bool)
    warned = []
    monkeypatch.setattr(absl_logging, "warning", lambda msg, *a: warned.append(msg % a))
    changed = config(steps=2)
    changed.optim.learning_rate = 1e-4
    train(changed, workdir, progress=False)
    assert "config.optim.learning_rate: the run started with 0.0002; this start has 0.0001" in warned
    assert "config.train.steps: the run started with 1; this start has 2" in warned
    starts = json.load(open(os.path.join(workdir, "provenance.json")))["starts"]
    assert len(starts) == 2 and starts[1]["changed"]["train.steps"] == [1, 2]
    assert json.load(open(os.path.join(workdir, "config.json"))) == saved  # the first start's, kept


def test_prover_train_from_a_run_folders_config_starts_the_same_run(tmp_path):
    first, second = str(tmp_path / "w1"), str(tmp_path / "w2")
    overrides = ["--config.train.steps=1", "--config.sft.steps=0", "--config.credit.method=grpo",
                 "--config.train.loggers=()"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]))
    subprocess.run([sys.executable, "-m", "prover_jax.training.cli", "--noprogress", f"--config={PATH}", *overrides,
                    f"--workdir={first}"], check=True, env=env, capture_output=True)
    subprocess.run([sys.executable, "-m", "prover_jax.training.cli", "--noprogress",
                    f"--config={os.path.join(first, 'config.json')}", f"--workdir={second}"],
                   check=True, env=env, capture_output=True)
    a, b = rows(first), rows(second)
    keep = lambda r: {k: v for k, v in r.items() if not k.startswith("time/")}  # noqa: E731
    assert [keep(r) for r in a] == [keep(r) for r in b] and any("loss" in r for r in a)
    assert json.load(open(os.path.join(second, "config.json"))) == json.load(open(os.path.join(first, "config.json")))
