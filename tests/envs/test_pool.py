"""Tests of `EnvPool` (in-process and one spawned worker per env) and `group_seeds`."""

from __future__ import annotations

import os
import random
import signal

import pytest

from prover_jax.envs import make
from prover_jax.envs.pool import EnvPool, EnvWorkerError, StepResult, group_seeds

KWARGS = dict(max_turns=20)


def scripted_actions(num_envs: int, turns: int) -> list[list[str | None]]:
    """Per turn, per env: an expert marker, a fixed command, a malformed one, or None (skip)."""
    rng = random.Random(0)
    choices = ["EXPERT", "EXPERT", "look", "inventory", "go to cabinet 1", "", "\u00e9t\u00e9", None]
    return [[rng.choice(choices) for _ in range(num_envs)] for _ in range(turns)]


def play_single(seeds, script):
    """Reference: one env per slot, stepped in a plain loop."""
    envs = [make("household", **KWARGS) for _ in seeds]
    log = [[env.reset(s) for env, s in zip(envs, seeds)]]
    done = [False] * len(seeds)
    for row in script:
        out = []
        for i, (env, a) in enumerate(zip(envs, row)):
            if a is None or done[i]:
                out.append(None)
                continue
            res = env.step(env.expert_action() if a == "EXPERT" else a)
            done[i] = res[2]
            out.append(res)
        log.append(out)
    return log


def play_pool(pool, seeds, script):
    log = [pool.reset(seeds)]
    done = [False] * len(seeds)
    for row in script:
        experts = pool.expert_actions()
        actions = [None if a is None or done[i] else experts[i] if a == "EXPERT" else a
                   for i, a in enumerate(row)]
        out = pool.step(actions)
        for i, res in enumerate(out):
            assert (res is None) == (actions[i] is None)
            if res is not None:
                done[i] = res[2]
        log.append(out)
    return log


def test_group_seeds():
    assert group_seeds(10, 3, 2) == [10, 10, 11, 11, 12, 12]
    assert group_seeds(0, 1, 4) == [0, 0, 0, 0]
    assert group_seeds(5, 0, 8) == []


def test_in_process_pool_matches_single_env_loop():
    seeds = group_seeds(3, 2, 2)
    script = scripted_actions(4, 25)
    with EnvPool("household", 4, env_kwargs=KWARGS) as pool:
        assert play_pool(pool, seeds, script) == play_single(seeds, script)
        assert pool.prompt.max_turns == 20


def test_in_process_errors_name_the_env():
    with EnvPool("household", 2) as pool:
        pool.reset([0, 1])
        with pytest.raises(EnvWorkerError, match=r"env 1: 'restore' raised TypeError"):
            pool.restore(1, "not a snapshot")
        with pytest.raises(ValueError):
            pool.step(["look"])
        with pytest.raises(IndexError):
            pool.snapshot(2)
    with pytest.raises(RuntimeError, match="closed"):
        pool.step(["look", "look"])


def test_process_pool_matches_single_env_loop_and_reports_errors():
    seeds = [7, 8]
    script = scripted_actions(2, 22)
    with EnvPool("household", 2, env_kwargs=KWARGS, processes=True, timeout=60) as pool:
        assert play_pool(pool, seeds, script) == play_single(seeds, script)
        pool.reset(seeds)
        pool.step(["look", None])
        snap = pool.snapshot(0)
        first = pool.step(["inventory", "look"])
        pool.restore(0, snap)
        assert pool.step(["inventory", "look"])[0] == first[0]
        with pytest.raises(EnvWorkerError, match=r"env 1: 'restore' raised TypeError: not a household"):
            pool.restore(1, "not a snapshot")
        assert pool.step(["look", "look"])[1][3]["valid"]
        os.kill(pool._procs[1].pid, signal.SIGKILL)
        pool._procs[1].join(timeout=10)
        with pytest.raises(EnvWorkerError, match=r"env 1: worker .*(died|unreachable)"):
            pool.step(["look", "look"])


@pytest.mark.parametrize("processes", [False, True])
def test_act_returns_named_step_results(processes):
    """act: one StepResult per responding env (also through a worker's pipe), the same as the env's own
    extract_action + step + snapshot; a malformed response gives action None and valid=False."""
    responses = {0: "<action>look</action>", 2: "no tags at all"}
    env = make("household", **KWARGS)
    with EnvPool("household", 3, env_kwargs=KWARGS, processes=processes, timeout=60) as pool:
        pool.reset([5, 6, 7])
        out = pool.act(responses)
    assert sorted(out) == [0, 2] and all(type(r) is StepResult for r in out.values())
    for i, seed in ((0, 5), (2, 7)):
        env.reset(seed)
        action = env.extract_action(responses[i])
        obs, reward, done, info = env.step(action)
        r = out[i]
        assert (r.action, r.observation, r.reward, r.done, r.info) == (action, obs, reward, done, info)
        assert r.snapshot == env.snapshot()
    assert out[0].action == "look" and out[0].info["valid"]
    assert out[2].action is None and not out[2].info["valid"] and not out[2].done


def test_process_pool_reports_a_failing_constructor():
    with pytest.raises(EnvWorkerError, match=r"env 0: 'make' raised ValueError: unknown task_type"):
        EnvPool("household", 1, env_kwargs=dict(task_type="juggle"), processes=True, timeout=60)
