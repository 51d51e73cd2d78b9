"""Tests of the `alfworld` environment on the real ALFWorld engine and the shipped tasks.

Needs the `alfworld` extra; skipped without it unless PROVER_REQUIRE_ALFWORLD=1 (then it fails loudly).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys

import pytest

if os.environ.get("PROVER_REQUIRE_ALFWORLD") == "1":
    import alfworld  # noqa: F401
    import textworld  # noqa: F401
else:
    pytest.importorskip("alfworld")
    pytest.importorskip("textworld")

from prover_jax.envs import make  # noqa: E402
from prover_jax.envs.alfworld import AlfredEnv, Snapshot, env as alf  # noqa: E402
from prover_jax.envs.testing import dp  # noqa: E402


@pytest.fixture(scope="module")
def env() -> AlfredEnv:
    return make("alfworld")


def walkthrough(gamefile: str) -> list[str]:
    with open(gamefile) as f:
        return json.load(f)["walkthrough"]


def run_expert(env: AlfredEnv, seed: int) -> tuple[list[str], dict]:
    _, info = env.reset(seed)
    actions, done = [], False
    while not done:
        action = env.expert_action()
        assert action in info["admissible"]
        actions.append(action)
        _, reward, done, info = env.step(action)
        assert info["valid"] and reward == float(info["success"])
    return actions, info


def test_shipped_tasks_cover_every_type_twice():
    types = {}
    for split in ("train", "valid_seen"):
        for path in alf.find_games(alf.SHIPPED_TASKS, split):
            with open(os.path.join(os.path.dirname(path), "traj_data.json")) as f:
                task_type = json.load(f)["task_type"]
            types[task_type] = types.get(task_type, 0) + 1
    assert set(types) == set(alf.TASK_TYPES) and min(types.values()) >= 2, types


@pytest.mark.parametrize("split", ["train", "valid_seen"])
def test_expert_solves_every_shipped_task(split):
    env = make("alfworld", split=split)
    for seed in range(len(env.games)):
        actions, info = run_expert(env, seed)
        assert info["success"] and info["score"] == 1.0, env.games[seed]
        assert len(actions) == len(walkthrough(env.games[seed]))


def test_reset_is_deterministic_and_states_the_task(env):
    obs, info = env.reset(3)
    assert obs.startswith("-= Welcome to TextWorld, ALFRED! =-")
    assert "Your task is to: " in obs and info["task"] in obs
    assert info["gamefile"] == env.games[3] and info["turn"] == 0
    assert (obs, info) == env.reset(3 + len(env.games))
    assert env.reset(4)[0] != obs


def test_restore_replays_random_walks_exactly(env):
    rng = random.Random(0)
    for seed in (0, 5, 10):
        env.reset(seed)
        frames = [(env.snapshot(), env._last, env.expert_action())]
        for _ in range(12):
            action = rng.choice(list(env._last[2]) + ["jump", ""])
            env.step(action)
            frames.append((env.snapshot(), env._last, env.expert_action()))
        for snap, frame, expert in rng.sample(frames, 4):
            env.reset(seed + 1)  # another game: the engine must reload, reset and replay
            env.restore(snap)
            assert env.snapshot() == snap and hash(env.snapshot()) == hash(snap)
            assert env._last == frame
            assert env.expert_action() == expert


def test_restore_then_continue_matches_straight_play(env):
    env.reset(7)
    plan = walkthrough(env.games[7])
    straight = [env.step(a) for a in plan]
    env.reset(7)
    env.step(plan[0])
    middle = env.snapshot()
    env.step("look")
    env.restore(middle)
    assert [env.step(a) for a in plan[1:]][-1][:3] == straight[-1][:3]


@pytest.mark.parametrize("action, why", [
    ("", "empty"), ("   ", "empty"), (None, "no action"), ("go to fridge 1 " * 20, "longer"),
    ("go to fr\u00efdge 1", "non-ASCII"), ("look\ninventory", "line breaks"), ("fly to the moon", None),
    ("go to bed 1", None),  # a real command, but not admissible in this room
])
def test_bad_actions_are_invalid_and_change_nothing(env, action, why):
    env.reset(5)
    env.step("go to countertop 1")
    before, expert = env._last, env.expert_action()
    obs, reward, done, info = env.step(action)
    assert not info["valid"] and reward == 0.0 and not done and not info["success"]
    assert obs.startswith("Nothing happens.") and (why is None or why in obs)
    assert info["admissible"] == list(before[2]) and info["turn"] == 2
    assert env.expert_action() == expert and env.step(expert)[3]["valid"]


def test_turn_limit_truncates_without_success():
    env = make("alfworld", max_turns=3)
    env.reset(0)
    results = [env.step(a) for a in ("look", "jump", "inventory")]
    assert [r[2] for r in results] == [False, False, True] and not results[-1][3]["success"]
    obs, reward, done, info = env.step("look")
    assert done and not info["valid"] and info["turn"] == 3 and reward == 0.0
    assert env.expert_action() is None


def test_success_probability_by_dp_matches_closed_form(env):
    """Policy: expert w.p. 1/2, an invalid word w.p. 1/2, with T = L + 1 turns (L = plan length): success
    needs L expert turns among the first L + 1, so V = 2^-L (1 + L / 2)."""
    seed = 1
    length = len(walkthrough(env.games[seed]))
    env.max_turns = length + 1
    try:
        obs, info = env.reset(seed)

        def policy(obs, info):
            return {env.expert_action(): 0.5, "jump": 0.5}

        value = dp.success_probability(env, policy, env.snapshot(), obs, info)
    finally:
        env.max_turns = 50
    assert value == pytest.approx(0.5 ** length * (1 + length / 2))


def test_two_envs_in_one_process_share_the_engine_correctly():
    a, b = make("alfworld"), make("alfworld")
    plan_a, plan_b = walkthrough(a.games[2]), walkthrough(b.games[8])
    a.reset(2), b.reset(8)
    for step in range(max(len(plan_a), len(plan_b))):
        for env, plan in ((a, plan_a), (b, plan_b)):
            if step < len(plan):
                _, _, done, info = env.step(plan[step])
                assert info["valid"] and done == (step == len(plan) - 1)
    assert a.step("look")[2] and b.snapshot().gamefile == b.games[8]


def test_envs_in_separate_processes():
    """Two worker processes, each with its own engine, play different games in lock step."""
    pool_module = pytest.importorskip("prover_jax.envs.pool")
    seeds = [4, 11]
    with pool_module.EnvPool("alfworld", num_envs=2, processes=True) as pool:
        pool.reset(seeds)
        games, turns, done = make("alfworld").games, [0, 0], [False, False]
        while not all(done):
            actions = [None if d else a for d, a in zip(done, pool.expert_actions())]
            for i, result in enumerate(pool.step(actions)):
                if result is not None:
                    turns[i] += 1
                    done[i] = result[2]
                    assert result[3]["valid"] and result[3]["success"] == done[i]
        snap = pool.snapshot(1)
    assert turns == [len(walkthrough(games[s])) for s in seeds] and snap.gamefile == games[11]


def test_real_data_layout_and_env_var(tmp_path, monkeypatch):
    for path in alf.find_games(alf.SHIPPED_TASKS, "valid_seen")[:2]:
        trial = os.path.dirname(path)
        rel = os.path.relpath(trial, os.path.join(alf.SHIPPED_TASKS, "valid_seen"))
        shutil.copytree(trial, tmp_path / "json_2.1.1" / "valid_seen" / rel)
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    env = make("alfworld", split="valid_seen")
    assert len(env.games) == 2 and all(g.startswith(str(tmp_path)) for g in env.games)
    assert run_expert(env, 1)[1]["success"]


def test_missing_data_is_a_clear_error(tmp_path):
    missing = str(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="nowhere"):
        make("alfworld", data_dir=missing)
    (tmp_path / "train" / "empty_task").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="no solvable ALFWorld games"):
        make("alfworld", data_dir=str(tmp_path))


def test_missing_extra_is_a_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "textworld", None)
    with pytest.raises(ImportError, match=r"pip install prover_jax\[alfworld\]"):
        alf._import_engine()


def test_snapshot_is_hashable_and_prompt_declares_limits(env):
    env.reset(0)
    env.step("look")
    snap = env.snapshot()
    assert isinstance(snap, Snapshot) and {snap: 1}[Snapshot(snap.gamefile, ("look",))] == 1
    assert env.prompt.max_turns == 50 and "<action>" in env.prompt.system
    assert env.extract_action("I will look. <action>look</action>") == "look"
