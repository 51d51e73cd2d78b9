"""`prompts`: single-turn prompt tasks from JSONL files and Hugging Face datasets, their held-out split,
the built-in rewards and a user's reward function, and one turn through the rollout."""

import json
import os
import sys
import types

import pytest

from prover_jax.envs import make
from prover_jax.envs.base import split_seed
from prover_jax.envs.pool import EnvPool
from prover_jax.envs.prompts import DataError, exact_match, gsm8k, load, reward_fn
from prover_jax.rollout import Rollout, RolloutConfig

ROWS = [{"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = {2 * i}.\n#### {2 * i}"} for i in range(40)]


def write_jsonl(path, rows):
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return str(path)


def test_gsm8k_and_exact_match_rewards():
    row = {"answer": "Natalia sold 48/2 = 24 clips in May.\n#### 1,072"}
    assert gsm8k("so 1072 in all\n#### 1072", row) == 1.0
    assert gsm8k("#### $1,072.", row) == 1.0 and gsm8k("#### 1072.0", row) == 1.0
    assert gsm8k("#### 1073", row) == 0.0 and gsm8k("1072", row) == 0.0  # no final-answer mark
    assert gsm8k("#### 12\nthen #### 1072", row) == 1.0  # the last mark counts
    with pytest.raises(ValueError, match="no '#### <number>'"):
        gsm8k("#### 3", {"answer": "three"})
    assert exact_match("The Eiffel Tower!", {"answer": "eiffel tower"}) == 1.0
    assert exact_match("reasoning...\n#### Paris", {"answer": "paris"}) == 1.0
    assert exact_match("Lyon", {"answer": "Paris"}) == 0.0


def test_reward_fn_by_name_and_by_module(monkeypatch):
    mod = types.ModuleType("my_rewards")
    mod.length = lambda completion, row: float(len(completion))
    mod.value = 3
    monkeypatch.setitem(sys.modules, "my_rewards", mod)
    assert reward_fn("gsm8k") is gsm8k and reward_fn("my_rewards:length")("abc", {}) == 3.0
    for bad, why in (("gsm9k", "expected one of exact_match, gsm8k or 'module:function'"),
                     ("no_such_module:f", "cannot import it"), ("my_rewards:value", "is not callable")):
        with pytest.raises(ValueError, match=why):
            reward_fn(bad)


def test_a_jsonl_file_split_by_prompt_and_one_episode(tmp_path):
    path = write_jsonl(tmp_path / "gsm.jsonl", ROWS)
    env = make("prompts", path=path, reward_fn="gsm8k", eval_fraction=0.25)
    sizes = env.split_sizes()
    assert sizes == {"train": 30, "eval": 10}
    train = {env.reset(split_seed(i, "train"))[0] for i in range(30)}
    held = {env.reset(split_seed(i, "eval"))[0] for i in range(10)}
    assert len(train) == 30 and len(held) == 10 and not train & held
    assert env.task_id(3, "train") != env.task_id(3, "eval")
    obs, info = env.reset(5)
    assert obs.startswith("What is") and info["admissible"] is None and env.prompt.max_turns == 1
    snap = env.snapshot()
    gold = env.expert_action()
    _, reward, done, info = env.step(env.extract_action(env.render_action(gold)))
    assert (reward, done, info["success"], info["valid"]) == (1.0, True, True, True)
    env.restore(snap)
    _, reward, done, info = env.step(env.extract_action("I think\n#### -1"))
    assert (reward, done, info["success"]) == (0.0, True, False)
    env.restore(snap)
    _, reward, _, info = env.step(env.extract_action("   "))
    assert reward == 0.0 and not info["valid"]


def test_a_datasets_folder_uses_its_splits_and_keeps_them_apart(tmp_path):
    datasets = pytest.importorskip("datasets")
    train = ROWS[:30] + [ROWS[35]]  # one training row asks a test prompt: dropped from training
    folder = str(tmp_path / "ds")
    datasets.DatasetDict({"train": datasets.Dataset.from_list(train),
                          "test": datasets.Dataset.from_list(ROWS[30:])}).save_to_disk(folder)
    with pytest.warns(UserWarning, match="1 training rows .* ask a held-out prompt"):
        rows, split = load(folder)
    assert split.sizes() == {"train": 30, "eval": 10}
    with pytest.raises(DataError, match="no split 'validation' .*it has train, test"):
        load(folder, split="validation")
    with pytest.warns(UserWarning, match="left out of training"):
        env = make("prompts", path=folder, reward_fn="gsm8k")
    assert env.reset(split_seed(0, "eval"))[0] == ROWS[30]["question"]


@pytest.mark.parametrize("rows,why", [([], "holds no rows"), ([{"q": "x", "answer": "1"}], "row 0 has no non-empty "
                                      "string 'question' \\(env.kwargs.prompt_field\\)"),
                                      ([{"question": "x"}], "row 0 has no 'answer' \\(env.kwargs.answer_field\\)")])
def test_bad_data_is_named(tmp_path, rows, why):
    with pytest.raises(DataError, match=why):
        load(write_jsonl(tmp_path / "bad.jsonl", rows))
    with pytest.raises(DataError, match="no such file"):
        load(str(tmp_path / "missing.jsonl"))
    with pytest.raises(DataError, match="env.kwargs.path is empty"):
        load("")


def test_a_failing_reward_function_is_named_with_the_task(tmp_path, monkeypatch):
    mod = types.ModuleType("broken_rewards")
    mod.boom = lambda completion, row: 1 / 0
    monkeypatch.setitem(sys.modules, "broken_rewards", mod)
    env = make("prompts", path=write_jsonl(tmp_path / "p.jsonl", ROWS), reward_fn="broken_rewards:boom")
    env.reset(0)
    with pytest.raises(ValueError, match=r"reward_fn='broken_rewards:boom' failed on task prompts:\w+ "
                                         r"\(ZeroDivisionError"):
        env.step("42")


def test_one_turn_through_the_rollout(tmp_path, household_tokenizer):
    """The expert's episode: the prompt as the user turn (no turn counter), one reply, done."""
    path = write_jsonl(tmp_path / "p.jsonl", ROWS)
    with EnvPool("prompts", 2, {"path": path, "reward_fn": "gsm8k"}) as pool:
        trajs = Rollout(None, household_tokenizer, RolloutConfig()).run(pool, [0, 1], expert=True)
    for t in trajs:
        assert t.num_turns == 1 and t.success and t.termination == "done" and t.score == 1.0
        text = household_tokenizer.decode(t.tokens[:t.turns[0].start])
        assert "[turn" not in text and "What is" in text and "#### <number>" in text
