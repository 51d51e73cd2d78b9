"""Single-turn prompt tasks through the trainer: the same rollout, batch and update as the agents; the
methods that credit parts of an episode between turns refused by name."""

import json

import numpy as np
import pytest

from prover_jax.training.trainer import Trainer

from helpers.demo_config import trainer_config

ROWS = [{"question": f"What is {i} plus {i}?", "answer": f"#### {2 * i}"} for i in range(30)]


def config(tmp_path, method="grpo"):
    path = tmp_path / "arith.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    c = trainer_config()
    c.env.name = "prompts"
    c.env.kwargs = {"path": str(path), "reward_fn": "gsm8k", "eval_fraction": 0.2}
    c.rollout.max_turns = 0
    c.sft.steps = 2
    c.credit.method = method
    c.train.loggers = ()
    return c


def test_one_rl_step_on_prompt_tasks(tmp_path):
    t = Trainer(config(tmp_path), str(tmp_path / "run"))
    try:
        t.run_sft()
        row = t.rl_step()
        assert row["applied"] and row["turns"] == 1.0 and np.isfinite(row["loss"])
        assert row["episodes"] == 4 and t.evaluate()["eval/episodes"] == 2
    finally:
        t.close()


@pytest.mark.parametrize("method", ["prover", "spo_chain", "gigpo"])
def test_methods_between_turns_are_refused(tmp_path, method):
    with pytest.raises(ValueError, match=f"credit.method={method} credits parts of an episode between its turns; "
                                         "env 'prompts' \\(env.name\\) plays one turn per episode"):
        Trainer(config(tmp_path, method), str(tmp_path / "run"))
