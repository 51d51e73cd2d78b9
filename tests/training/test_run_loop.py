"""train() and rl_step at the loop's edges: a run of 0 steps, the last of the non-finite updates
that stop a run, what a step's `compiles` counts."""

import json
import os

import jax
import pytest

from prover_jax.training import trainer as trainer_lib
from prover_jax.training.metrics import CompileCounter
from prover_jax.training.run import train

from helpers.credit import nan_advantages
from helpers.demo_config import trainer_config


def config(**train):
    c = trainer_config()
    c.sft.steps = 0
    c.credit.method = "grpo"
    c.train.loggers = ()
    for k, v in train.items():
        setattr(c.train, k, v)
    return c


def rows(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def test_a_run_of_zero_steps_evaluates_once(tmp_path):
    """train.steps = 0: the evaluation before RL is the one after it (one row, not the same
    evaluation twice); the command run again adds nothing."""
    workdir = str(tmp_path / "zero")
    summary = train(config(steps=0), workdir, progress=False)
    (row,) = rows(workdir)
    assert row["step"] == 0 and "eval/success" in row
    assert summary["eval_after_rl"] == summary["eval_before_rl"] == {k: v for k, v in row.items() if k != "step"}
    again = train(config(steps=0), workdir, progress=False)
    assert rows(workdir) == [row] and again["eval_after_rl"] == summary["eval_after_rl"]


def test_the_skipped_update_that_stops_a_run_is_logged(tmp_path, monkeypatch):
    """MAX_SKIPS_IN_A_ROW non-finite updates stop the run; each of them, the last included, is logged
    (its episodes and tokens were spent)."""
    monkeypatch.setattr(trainer_lib, "MAX_SKIPS_IN_A_ROW", 2)
    real_init = trainer_lib.Trainer.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.run.credit.assign = nan_advantages(self.run.credit.assign)

    monkeypatch.setattr(trainer_lib.Trainer, "__init__", init)
    workdir = str(tmp_path / "nan")
    with pytest.raises(FloatingPointError, match="2 updates in a row"):
        train(config(steps=3), workdir, progress=False)
    got = [r for r in rows(workdir) if "success_rate" in r]
    assert [(r["step"], r["applied"]) for r in got] == [(1, False), (1, False)]
    assert got[-1]["total/policy_tokens"] == got[0]["policy_tokens"] + got[1]["policy_tokens"]


def test_a_step_counts_its_own_compiles(tmp_path):
    """A row's `compiles` are the XLA compilations during its step, not those of an evaluation (or SFT)
    run before it."""
    t = trainer_lib.Trainer(config(), str(tmp_path / "compiles"))
    try:
        before = CompileCounter()
        t.evaluate()
        assert before.take() > 0  # the greedy programs, compiled when first met
        during = CompileCounter()
        row = t.rl_step()
        assert row["compiles"] == during.take()
    finally:
        t.close()


def test_precompile_covers_the_reference_log_prob_pass(tmp_path, monkeypatch):
    """With a KL term the step first runs the reference log-prob pass; train.precompile compiles it
    with the update for every batch shape, so the pass compiles nothing in an RL step (it was jitted on
    first use of each batch length)."""
    from prover_jax.training.logprobs import LogprobPass

    c = config(precompile=True, length_multiple=512, logits="policy")
    c.loss.kl_coef = 0.05
    compiles_per_call = []
    real = LogprobPass.__call__

    def counted(self, params, batch):
        during = CompileCounter()
        out = jax.block_until_ready(real(self, params, batch))
        compiles_per_call.append(during.take())
        return out

    monkeypatch.setattr(LogprobPass, "__call__", counted)
    t = trainer_lib.Trainer(c, str(tmp_path / "kl"))
    try:
        assert len(t.run.logprob_pass._compiled) == 2  # lengths 512 and 1024, policy_at 128 wide
        row = t.rl_step()
        assert compiles_per_call == [0] and row["kl"] >= 0
    finally:
        t.close()
