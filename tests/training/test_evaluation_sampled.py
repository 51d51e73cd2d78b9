"""train.eval_samples: sampled success and pass@k on the held-out tasks, beside greedy success."""

import math

import pytest

from prover_jax.training import trainer as trainer_lib
from prover_jax.training.evaluation import pass_at_k

from helpers.demo_config import trainer_config


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(4, 2)) == pytest.approx(0.5)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 1, 4) == 1.0 and pass_at_k(8, 8, 1) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)


def test_an_evaluation_with_samples_reports_sampled_success_and_pass_at_k(tmp_path):
    c = trainer_config()
    c.sft.steps, c.credit.method, c.train.eval_samples, c.env.eval_seeds, c.train.eval_episodes = 0, "grpo", 4, 3, 3
    c.train.eval_temperature = 0.7
    t = trainer_lib.Trainer(c, str(tmp_path / "run"))
    try:
        row = t.evaluate()
    finally:
        t.close()
    assert row["eval/episodes"] == 3 and row["eval/samples"] == 4
    assert set(row) >= {"eval/sampled_success", "eval/sampled_success_se", "eval/pass@2", "eval/pass@4",
                        "eval/pass@2_se", "eval/pass@4_se"}
    assert 0.0 <= row["eval/sampled_success"] <= row["eval/pass@2"] <= row["eval/pass@4"] <= 1.0
