"""The credit lab: its exact ground truth against Monte Carlo, its metrics, and its command line."""

import itertools
import json

import numpy as np
import pytest

from prover_jax.credit import cli, lab
from prover_jax.credit import lab_truth as lt
from prover_jax.credit.verify import Outcome
from prover_jax.envs import make
from prover_jax.envs.testing import dp
from prover_jax.training.config import default_config

SMALL = dict(task_type="pick_and_place", max_turns=8, expert_turns=(3, 6), num_receptacles=4, num_objects=0,
             num_decoys=1)
TINY = ["--groups=3", "--group_size=6", "--eps=0.6", "--set", "prover.k=4", "--strict"]


@pytest.fixture(scope="module")
def env():
    return make("household", **SMALL)


def mc_returns(env, policy, snapshot, view, first_action, n, rng):
    """Success of n episodes of `policy` from `snapshot` (first taking `first_action` when given)."""
    out = []
    for _ in range(n):
        env.restore(snapshot)
        obs, info, done = *view, False
        if first_action is not None:
            obs, _, done, info = env.step(first_action)
        while not done:
            action, _ = lt.sample_action(policy, obs, info, rng)
            obs, _, done, info = env.step(action)
        out.append(float(info["success"]))
    return np.asarray(out)


def test_exact_advantage_matches_monte_carlo(env):
    policy = lt.mixture_policy(env, 0.5)
    rng = np.random.default_rng(0)
    memo = {}
    for uid in range(50):  # an episode with a clearly pivotal turn
        traj = lt.play_episode(env, policy, 3, uid, rng)
        v, a = lt.exact_advantages(env, policy, traj, memo)
        if np.abs(a).max() > 0.2 and traj.num_turns >= 3:
            break
    assert np.abs(a).max() > 0.2
    assert len(traj.snapshots) == traj.num_turns + 1 and v[-1] == float(traj.success)
    n = 400
    for t in range(traj.num_turns):
        snap, view = traj.snapshots[t], traj.lab_views[t]
        q = mc_returns(env, policy, snap, view, traj.turns[t].action, n, rng)
        base = mc_returns(env, policy, snap, view, None, n, rng)
        se = np.sqrt(q.var(ddof=1) / n + base.var(ddof=1) / n)
        assert abs((q.mean() - base.mean()) - a[t]) < 4 * se + 1e-9, (t, q.mean() - base.mean(), a[t], se)
        assert abs(base.mean() - v[t]) < 4 * base.std(ddof=1) / np.sqrt(n) + 1e-9, (t, base.mean(), v[t])
        # V(s) = sum_a pi(a|s) Q(s, a), with Q(s, a) = V(step(s, a)) (terminal: success)
        total = 0.0
        for action, p in policy(*view).items():
            env.restore(snap)
            obs, _, done, info = env.step(action)
            q_sa = float(info["success"]) if done else lt.state_value(env, policy, env.snapshot(), obs, info, memo)
            total += p * q_sa
        assert total == pytest.approx(v[t], abs=1e-9)


def test_recorded_episodes_look_like_rollouts(env):
    policy = lt.mixture_policy(env, 0.3)
    group = lt.play_group(env, policy, 5, 4, np.random.default_rng(1), itertools.count(10), tokens_per_turn=3)
    assert [t.uid for t in group] == [10, 11, 12, 13]
    for traj in group:
        ids = traj.turn_ids()
        assert (ids >= 0).tolist() == traj.policy_mask and traj.num_policy_tokens == 3 * traj.num_turns
        assert len(traj.snapshots) == traj.num_turns + 1 and traj.termination == "done"
        env.reset(5)
        for t, turn in enumerate(traj.turns):
            assert env.snapshot() == traj.snapshots[t]
            env.step(turn.action)
        assert env.snapshot() == traj.snapshots[-1]
    # a continuation inherits the history before its start turn, then plays on
    parent = max(group, key=lambda t: t.num_turns)
    child = lt.TrajectoryVerifier(env, policy, seed=0).run([(parent, 2, 1)])[0][0]
    assert child.parent == (parent.uid, 2) and child.turns[:2] == parent.turns[:2]
    assert child.snapshots[:3] == parent.snapshots[:3] and child.tokens[:parent.turns[2].start] == \
        parent.tokens[:parent.turns[2].start]


def test_metrics_by_hand():
    assert lt.ranks([3.0, 1.0, 3.0, 2.0]).tolist() == [3.5, 1.0, 3.5, 2.0]
    assert np.isnan(lt.spearman([1, 1, 1], [1, 2, 3])) and lt.spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1)
    truth = [np.array([0.5, 0.0, -0.05]), np.array([-0.6, 0.02])]
    credit = [np.array([1.0, 1.0, 1.0]), np.array([0.0, -1.0])]
    m = lt.credit_metrics(truth, credit, baseline=[1.0, 0.0], threshold=0.2)
    assert m["pivotal_mass"] == pytest.approx(1.0 / 4.0)  # |credit| on turns 0 and 3 of 4 in total
    assert m["sign_agreement"] == pytest.approx(0.5)  # +/+ agrees, 0 vs - does not
    assert m["spearman_within"] == pytest.approx(-0.5)  # constant credit: 0; the other episode: reversed, -1
    assert m["turn_pivotal_mass"] == pytest.approx(0.0)  # the only turn-level credit is on a calm turn
    assert np.isnan(m["turn_sign"])  # no pivotal turn has a turn-level part


def test_segments_of_recorded_verifier():
    class Fixed:
        def run(self, starts):
            return [[Outcome(i < turn, 3, 3) for i in range(4)] for _, turn, _ in starts]

    t = lt.Trajectory(env="household", seed=0, uid=7, task="")
    rec = lt.RecordingVerifier(Fixed())
    rec.run([(t, 1, 4), (t, 3, 4)])
    rec.run([(t, 0, 4)])
    assert rec.segments() == [(7, 1, 3, 0.5)] and rec.steps == 3 * 12


def test_main_prints_table_and_json(capsys):
    summary = cli.main(["--methods=grpo,prover,not_a_method"] + TINY)
    out = capsys.readouterr().out.strip().splitlines()
    last = json.loads(out[-1])
    assert last == json.loads(json.dumps(summary)) and set(last) == {"grpo", "prover"}
    for method in last.values():
        assert {"spearman", "pivotal_mass", "sign_agreement", "extra_steps", "segment_bias"} <= set(method)
    text = "\n".join(out[:-1])
    assert "spearman" in text and "extra_steps" in text and "skipped not_a_method" in text
    header = next(line.split() for line in out if line.startswith("method"))
    rows = [line.split() for line in out if line.split()[:1] in (["grpo"], ["prover"])]
    assert len(rows) == 4 and {r[1] for r in rows} == {"0.6", "all"}  # per eps, then pooled
    assert all(len(r) == len(header) for r in rows) and "extra_steps" in header
    assert last["grpo"]["extra_steps"] == 0 and last["grpo"]["segment_bias"] is None
    assert last["prover"]["extra_steps"] > 0 and last["prover"]["segment_bias"] is not None


def test_grpo_is_flat_within_episodes_and_exact_is_the_maximum():
    args = cli.parse_args(["--methods=grpo,exact"] + TINY)
    results, batches, notes = lab.run(args, default_config().credit, default_config().judge)
    assert notes == [] and batches[0]["pivotal"] > 0
    exact, grpo = results["exact"]["all"], results["grpo"]["all"]
    assert exact["spearman"] == pytest.approx(1.0, abs=1e-6) and exact["sign_agreement"] == 1.0
    assert exact["spearman_within"] == 1.0
    assert grpo["spearman_within"] == 0.0 and grpo["spearman"] < exact["spearman"]
    assert grpo["sign_agreement"] < 1.0
    # GRPO's credit is one number per episode
    env = make(args.env, **args.env_kwargs)
    batch = lab.make_batch(env, 0.6, [0, 1], 6, np.random.default_rng(0), itertools.count(), 3)
    res = lab.run_method("grpo", default_config().credit, default_config().judge, env, args, batch, "")
    assert all(np.ptp(c) == 0 for c in res["credit"])
    assert [c[0] for c in res["credit"]] == pytest.approx(res["baseline"])


def test_exact_credit_is_the_dp_advantage(env):
    policy = lt.mixture_policy(env, 0.4)
    traj = lt.play_episode(env, policy, 1, 0, np.random.default_rng(2))
    v, a = lt.exact_advantages(env, policy, traj, {})
    start = traj.snapshots[0]
    assert v[0] == pytest.approx(dp.success_probability(env, policy, start, *traj.lab_views[0]))
    batch = dict(groups=[[traj]], adv={traj.uid: a})
    np.testing.assert_allclose(lt.turn_credit(traj, lab.exact_credit(batch)[0][0]), a, atol=1e-6)


@pytest.mark.parametrize("bad, message", [
    (["--set", "prover.kk=4"], "no field 'prover.kk'"),
    (["--set", "prover.k"], "expected KEY=VALUE"),
    (["--set", "prover.k=four"], "prover.k=four"),
    (["--eps=0.4,2"], "--eps"),
    (["--groups=0"], "--groups"),
    (["--tokens_per_turn=0"], "--tokens_per_turn"),  # would credit zero-length turns: wrong metrics
    (["--env_kwargs=[1]"], "--env_kwargs"),
])
def test_bad_arguments_name_the_flag(bad, message, capsys):
    with pytest.raises(SystemExit) as e:
        cli.parse_args(["--methods=grpo", *bad])
    assert e.value.code == 2 and message in capsys.readouterr().err
