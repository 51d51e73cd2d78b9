"""Held-out evaluation: every family's train and eval task sets are disjoint, a config that would make
them share a task (or leaves a split empty) raises an error naming the setting, and the trainer's
evaluation row (keys, standard errors) over eval tasks only. Also: searchqa_data takes Unicode text."""

from __future__ import annotations

import json
import math
import os
import shutil
import types
import unicodedata

import pytest

from prover_jax.envs import make, seed_split, split_seed
from prover_jax.envs.household import layout_key
from prover_jax.envs.pool import EnvPool, EnvWorkerError
from prover_jax.envs.searchqa import normalize_answer, question_key
from prover_jax.envs.searchqa.kb import KnowledgeBase
from prover_jax.envs.shop import goal_key
from prover_jax.envs.splits import digest, held_out, task_ids


def ids(env, split, n):
    return task_ids(env, split, n)


def test_seed_convention():
    assert [split_seed(i, "train") for i in range(3)] == [0, 1, 2]
    assert [split_seed(i, "eval") for i in range(3)] == [-1, -2, -3]
    for seed in (-5, -1, 0, 7):
        split, i = seed_split(seed)
        assert split_seed(i, split) == seed
    with pytest.raises(ValueError, match="split"):
        split_seed(0, "test")
    with pytest.raises(ValueError, match=">= 0"):
        split_seed(-1, "eval")


# -- generated families: split by content -----------------------------------------------------------

TINY_ROOMS = dict(task_type="pick_and_place", max_turns=6, expert_turns=(1, 6), num_receptacles=4,
                  num_objects=0, num_decoys=1)


def played_key(env, name):
    """The content of the task the env is playing now (what the split must keep apart)."""
    if name == "household":
        return layout_key(env.layout)
    if name == "shop":
        return goal_key(env.goal)
    return question_key(env.question_record())


@pytest.mark.parametrize("name,kwargs,n_train,n_eval", [
    ("household", {}, 600, 60),
    ("household", TINY_ROOMS, 3000, 100),  # small rooms: many seeds give the same room
    ("shop", {}, 5000, 200),
    ("searchqa", {}, 5000, 200),  # ~2,300 distinct questions: seeds repeat them all the time
])
def test_generated_train_and_eval_tasks_never_meet(name, kwargs, n_train, n_eval):
    env = make(name, **kwargs)
    train, evals = ids(env, "train", n_train), ids(env, "eval", n_eval)
    assert not set(train) & set(evals)
    assert len(set(evals)) == n_eval  # distinct eval tasks: n independent measurements
    assert all(t.startswith(f"{name}:") for t in train + evals)
    # the id is the content of the task reset plays, for both splits
    for split, n in (("train", 40), ("eval", 20)):
        for i in range(n):
            env.reset(split_seed(i, split))
            assert env.task_id(i, split) == f"{name}:{digest(played_key(env, name))}", (split, i)
    assert make(name, **kwargs).task_id(3, "eval") == evals[3]  # stable across envs


def test_seed_ranges_alone_would_leak_eval_tasks():
    """Why the generated split is on content: disjoint seeds still give shared questions."""
    kb = KnowledgeBase(0)
    eval_texts = {kb.question(-1 - i).text for i in range(200)}
    assert len(eval_texts & {kb.question(1000 + s).text for s in range(5000)}) > 50
    env = make("searchqa")
    redrawn = [s for s in range(200) if env._qid(s) != s]  # train seeds whose own question is held out
    assert 0 < len(redrawn) < 60
    for s in redrawn[:5]:
        assert held_out(question_key(kb.question(s)), 0.1)
        env.reset(s)
        assert env.question_record().text != kb.question(s).text


def test_generated_eval_fraction_is_validated_and_a_too_small_eval_space_raises():
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match="eval_fraction"):
            make("searchqa", eval_fraction=bad)
    env = make("searchqa", eval_fraction=0.002)  # ~5 eval questions
    with pytest.raises(ValueError, match="eval split holds only"):
        env.reset(split_seed(100, "eval"))


def test_pool_passes_eval_seeds_unchanged():
    env = make("household")
    with EnvPool("household", 2) as pool:
        first = pool.reset([split_seed(0, "eval"), 5])
    assert first[0] == env.reset(-1) and first[1] == env.reset(5)


# -- webshop: WebShop's goal split ------------------------------------------------------------------

def test_webshop_test_goals_are_never_trained(webshop_dir):
    env = make("webshop", data_dir=webshop_dir, eval_goals=3, train_goal_start=5)
    assert env.split_sizes() == {"train": 7, "eval": 3}
    train, evals = set(ids(env, "train", 50)), set(ids(env, "eval", 10))
    assert not train & evals and len(evals) == 3 and len(train) == 7
    assert {t.split(":")[1] for t in evals} == {"goal0", "goal1", "goal2"}
    env.reset(split_seed(1, "eval"))
    assert env.goal == env.catalogue.goal_at(1, -2)
    for s in range(7):
        env.reset(s)
        assert env.goal.instruction.startswith(env.catalogue.goal_at(5 + s, s).instruction)
    synthetic = make("webshop", data_dir=webshop_dir, human_goals=False, eval_goals=3, train_goal_start=3)
    assert not set(ids(synthetic, "train", 50)) & set(ids(synthetic, "eval", 50))


def test_webshop_defaults_are_webshops_split_and_overlaps_raise(webshop_dir):
    env = make("webshop", data_dir=webshop_dir)  # test goals [0, 500), train [1500, n): 12 goals only
    assert env.split_sizes() == {"train": 0, "eval": 12}
    env.reset(split_seed(0, "eval"))
    with pytest.raises(ValueError, match="train split is empty.*train_goal_start=1500"):
        env.reset(0)
    with pytest.raises(ValueError, match="train_goal_start=2 < eval_goals=3"):
        make("webshop", data_dir=webshop_dir, eval_goals=3, train_goal_start=2)
    with pytest.raises(ValueError, match="eval split is empty.*eval_goals=0"):
        make("webshop", data_dir=webshop_dir, eval_goals=0, train_goal_start=0).reset(-1)


def test_webshop_train_drops_repeats_of_test_goals(webshop_dir):
    path = os.path.join(webshop_dir, "items_human_ins.json")
    human = json.load(open(path))
    for asin in human:  # every instruction twice: each test goal has a twin somewhere in the list
        human[asin] = human[asin] * 2
    json.dump(human, open(path, "w"))
    env = make("webshop", data_dir=webshop_dir, eval_goals=6, train_goal_start=6)
    keys = env.catalogue.goal_keys
    eval_keys = {keys[i] for i in range(6)}
    twins = [i for i in range(6, 24) if keys[i] in eval_keys]
    assert twins and env.split_sizes()["train"] == 18 - len(twins)
    for s in range(40):
        env.reset(s)
        assert env.split.index(s) not in twins


# -- searchqa_data: a held-out share of the file, or a separate eval file ---------------------------

def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def qa_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("qa")
    kb = KnowledgeBase(5, n_countries=4, n_cities=10, n_persons=30, n_orgs=8, n_works=10)
    corpus = write_jsonl(root / "corpus.jsonl", [{"id": str(i), "contents": c} for i, c in enumerate(kb.passages)])
    qs, seen = [], set()
    for s in range(400):
        q = kb.question(s)
        if q.text not in seen:
            seen.add(q.text)
            qs.append({"question": q.text, "golden_answers": list(q.golden_answers)})
        if len(qs) == 60:
            break
    rows = qs + [dict(qs[3], question=qs[3]["question"].upper()), qs[10]]  # repeats (one in another case)
    return root, corpus, write_jsonl(root / "qa.jsonl", rows), qs


def test_searchqa_data_holds_out_a_share_of_the_questions(qa_files):
    root, corpus, qa, qs = qa_files
    env = make("searchqa_data", qa_path=qa, corpus_path=corpus)
    sizes = env.split_sizes()
    n_eval = math.ceil(0.1 * 60)
    eval_ids = set(ids(env, "eval", 100))
    assert len(eval_ids) == n_eval and sizes["train"] + sizes["eval"] == 62
    assert not set(ids(env, "train", 200)) & eval_ids
    train_texts = {env.reset(s)[1]["question"].casefold() for s in range(200)}
    eval_texts = {env.reset(split_seed(i, "eval"))[1]["question"].casefold() for i in range(20)}
    assert len(eval_texts) == n_eval and not train_texts & eval_texts and len(train_texts) == 60 - n_eval
    shuffled = write_jsonl(root / "qa_reversed.jsonl", [json.loads(x) for x in open(qa)][::-1])
    again = make("searchqa_data", qa_path=shuffled, corpus_path=corpus)
    assert set(ids(again, "eval", 100)) == eval_ids  # independent of the file's order
    with pytest.raises(ValueError, match="eval split is empty.*eval_fraction=0.0"):
        make("searchqa_data", qa_path=qa, corpus_path=corpus, eval_fraction=0.0).reset(-1)
    with pytest.raises(ValueError, match="eval_fraction"):
        make("searchqa_data", qa_path=qa, corpus_path=corpus, eval_fraction=1.0)


def test_searchqa_data_eval_file(qa_files):
    root, corpus, qa, qs = qa_files
    held = write_jsonl(root / "dev.jsonl", [qs[0], qs[1], {"question": "  " + qs[2]["question"].lower() + " ",
                                                           "golden_answers": ["x"]}])
    with pytest.warns(UserWarning, match="3 of the 62 questions"):
        env = make("searchqa_data", qa_path=qa, corpus_path=corpus, eval_qa_path=held)
    assert env.split_sizes() == {"train": 59, "eval": 3}
    assert not set(ids(env, "train", 300)) & set(ids(env, "eval", 3))
    assert [env.reset(split_seed(i, "eval"))[1]["question"] for i in range(3)] == [
        qs[0]["question"], qs[1]["question"], qs[2]["question"].lower()]
    with pytest.raises(ValueError, match="eval_qa_path is qa_path"):
        make("searchqa_data", qa_path=qa, corpus_path=corpus, eval_qa_path=qa)


def test_searchqa_data_eval_split_holds_each_question_once(qa_files):
    root, corpus, qa, qs = qa_files
    first = make("searchqa_data", qa_path=qa, corpus_path=corpus).reset(split_seed(0, "eval"))[1]["question"]
    rows = [json.loads(x) for x in open(qa)] + [{"question": first, "golden_answers": ["x"]}] * 3
    env = make("searchqa_data", qa_path=write_jsonl(root / "qa_dup.jsonl", rows), corpus_path=corpus)
    n = env.split_sizes()["eval"]
    assert n == math.ceil(0.1 * 60) == len(set(ids(env, "eval", n)))
    held = write_jsonl(root / "dev_dup.jsonl", [qs[0], qs[1], qs[0]])
    with pytest.warns(UserWarning, match="2 of the 62"):
        env = make("searchqa_data", qa_path=qa, corpus_path=corpus, eval_qa_path=held)
    assert env.split_sizes()["eval"] == 2 and len(set(ids(env, "eval", 2))) == 2


def test_searchqa_data_accepts_unicode_questions_and_answers(tmp_path):
    corpus = write_jsonl(tmp_path / "c.jsonl", [
        {"id": "1", "contents": '"Zoë Ållström"\nZoë Ållström was born in São Paulo.'},
        {"id": "2", "contents": '"東京"\n東京は日本の首都です。'}])
    qa = write_jsonl(tmp_path / "qa.jsonl", [
        {"question": "Where was Zoë Ållström born?", "golden_answers": ["São Paulo"]},
        {"question": "日本の首都は?", "golden_answers": ["東京"]}])
    env = make("searchqa_data", qa_path=qa, corpus_path=corpus, eval_fraction=0.0)
    assert env.reset(0)[0] == "Question: Where was Zoë Ållström born?"
    obs, _, done, info = env.step("<search>Zoë Ållström</search>")
    assert info["valid"] and not done and "São Paulo" in obs
    for answer in ("São Paulo", "são paulo.", "«SÃO PAULO»", unicodedata.normalize("NFD", "São Paulo")):
        env.reset(0)
        _, reward, done, info = env.step(f"<answer>{answer}</answer>")
        assert info["valid"] and done and reward == 1.0 and info["success"], answer
    env.reset(0)
    assert env.step("<answer>Sao Paulo</answer>")[1] == 0.0  # accents stay significant
    env.reset(1)
    assert env.step("<answer>東京</answer>")[1] == 1.0
    strict = make("searchqa_data", qa_path=qa, corpus_path=corpus, eval_fraction=0.0, ascii_only=True)
    strict.reset(0)
    assert not strict.step("<answer>São Paulo</answer>")[3]["valid"]
    assert normalize_answer("Straße") == normalize_answer("STRASSE")
    assert normalize_answer("The  Orlan-Guild!") == "orlanguild"  # Search-R1's on ASCII


# -- alfworld: the shipped tasks' train / valid_seen games ------------------------------------------

def _alfworld():
    if os.environ.get("PROVER_REQUIRE_ALFWORLD") != "1":
        pytest.importorskip("alfworld")
        pytest.importorskip("textworld")
    from prover_jax.envs import alfworld
    return alfworld


def test_alfworld_shipped_tasks_split_into_train_and_valid_seen(monkeypatch):
    alf = _alfworld()
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    env = make("alfworld")
    assert env.split_sizes() == {"train": 12, "eval": 6}
    train, evals = set(ids(env, "train", 50)), set(ids(env, "eval", 20))
    assert len(train) == 12 and len(evals) == 6 and not train & evals
    assert all("/valid_seen/" in g for g in env.eval_games)
    assert env.games == alf.find_games(alf.SHIPPED_TASKS, "train")
    _, info = env.reset(split_seed(2, "eval"))
    assert info["gamefile"] == env.eval_games[2]
    with pytest.raises(ValueError, match="eval_split='train'"):
        make("alfworld", eval_split="train")
    with pytest.raises(FileNotFoundError, match="eval_split='valid_unseen'"):
        make("alfworld", eval_split="valid_unseen")
    with pytest.raises(ValueError, match="eval split is empty.*no eval_split"):
        make("alfworld", eval_split="").reset(-1)
    assert make("alfworld", split="valid_seen").split_sizes() == {"train": 6, "eval": 0}


def test_alfworld_a_task_in_both_splits_raises(tmp_path):
    alf = _alfworld()
    data = tmp_path / "data"
    shutil.copytree(alf.SHIPPED_TASKS, data, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    task = sorted(os.listdir(data / "train"))[0]
    shutil.copytree(data / "train" / task, data / "valid_seen" / task)
    with pytest.raises(ValueError, match=f"share 1 task.*{task}"):
        make("alfworld", data_dir=str(data))


# -- the trainer's evaluation ------------------------------------------------------------------------

def test_eval_metrics_keys_and_standard_errors():
    from prover_jax.training.evaluation import eval_metrics
    row = eval_metrics([True, False, True, True], [1.0, 0.5, 1.0, 1.0])
    assert set(row) == {"eval/success", "eval/success_se", "eval/score", "eval/score_se", "eval/episodes"}
    assert row["eval/episodes"] == 4 and row["eval/success"] == 0.75
    assert row["eval/success_se"] == pytest.approx(math.sqrt(0.75 * 0.25 / 4))
    assert row["eval/score"] == pytest.approx(0.875)
    assert row["eval/score_se"] == pytest.approx(math.sqrt((3 * 0.125 ** 2 + 0.375 ** 2) / 4) / 2)
    binary = eval_metrics([True] * 30 + [False] * 170, [1.0] * 30 + [0.0] * 170)
    assert binary["eval/success_se"] == pytest.approx(binary["eval/score_se"]) == pytest.approx(
        math.sqrt(0.15 * 0.85 / 200))
    assert eval_metrics([True], [1.0])["eval/success_se"] == 0.0
    with pytest.raises(ValueError):
        eval_metrics([], [])


def _stub_trainer(env_name, env_kwargs, eval_episodes=200, eval_seeds=0):
    """A Trainer over a stub run with only what evaluate needs: config, env pool, and a greedy rollout
    that records the seeds it is given (success on even task numbers, score 0.5 elsewhere)."""
    from prover_jax.training.config import default_config
    from prover_jax.training.trainer import Trainer

    t = object.__new__(Trainer)
    t.config = default_config()
    t.config.env.name = env_name
    t.config.train.eval_episodes = eval_episodes
    t.config.env.eval_seeds = eval_seeds
    played = []

    def run(pool, seeds):
        played.extend(seeds)
        out = []
        for s in seeds:
            pool.reset_some({0: s})
            even = (-1 - s) % 2 == 0
            out.append(types.SimpleNamespace(success=even, score=1.0 if even else 0.5))
        return out

    t.run = types.SimpleNamespace(pool=EnvPool(env_name, 4, env_kwargs), greedy=types.SimpleNamespace(run=run))
    return t, played


def _splits(t) -> dict:
    from prover_jax.training.evaluation import task_splits

    t.run.task_splits = task_splits(t.run.pool, t.config.env.name)
    return t.run.task_splits


def test_trainer_evaluates_distinct_eval_tasks_only(webshop_dir):
    t, played = _stub_trainer("webshop", dict(data_dir=webshop_dir, eval_goals=5, train_goal_start=5))
    try:
        assert _splits(t) == {"train": 7, "eval": 5}
        row = t.evaluate()  # 200 asked for, the eval split holds 5 goals
        assert played == [-1, -2, -3, -4, -5] and row["eval/episodes"] == 5
        assert row["eval/success"] == 0.6 and row["eval/success_se"] == pytest.approx(math.sqrt(0.24 / 5))
        assert row["eval/score"] == pytest.approx(0.8)
        played.clear()
        assert t.evaluate(3)["eval/episodes"] == 3 and played == [-1, -2, -3]
    finally:
        t.run.pool.close()
    t, played = _stub_trainer("household", {}, eval_episodes=7, eval_seeds=6)
    try:
        _splits(t)
        assert t.evaluate()["eval/episodes"] == 6 and played == [-1, -2, -3, -4, -5, -6]
    finally:
        t.run.pool.close()


def test_trainer_refuses_empty_splits_and_train_seeds_in_the_eval_range(webshop_dir):
    from prover_jax.training.config import default_config
    from prover_jax.training.evaluation import check_task_config

    t, _ = _stub_trainer("webshop", dict(data_dir=webshop_dir, eval_goals=0, train_goal_start=0))
    try:
        with pytest.raises(EnvWorkerError, match="eval split is empty.*eval_goals=0"):
            _splits(t)
    finally:
        t.run.pool.close()
    c = default_config()
    check_task_config(c)
    assert c.train.eval_episodes == 200 and c.env.eval_seeds == 0
    c.env.train_seed_start = -10
    with pytest.raises(ValueError, match="c.env.train_seed_start=-10 must be >= 0.*eval"):
        check_task_config(c)
    c = default_config()
    c.train.eval_episodes = 0
    with pytest.raises(ValueError, match="c.train.eval_episodes=0"):
        check_task_config(c)
