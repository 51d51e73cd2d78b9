"""The paper's baselines that spend extra samples: Budget-Matched GRPO (`budget_grpo`) and SPO-chain
(`spo_chain`), on hand-built groups and against exact dynamic programming."""

import copy

import numpy as np
import pytest

from prover_jax.credit import EXTRA_TOKENS, PolicyVerifier, credit_class, make_credit
from prover_jax.credit.budget_grpo import prover_budget, tail_tokens
from prover_jax.credit.spo_chain import cut_points
from prover_jax.credit.verify import Outcome
from prover_jax.envs import make
from prover_jax.envs.testing import dp, mixed_policy
from prover_jax.rollout.trajectory import Trajectory, Turn

from helpers.credit import FixedJudge, credit_config, fake_traj


class CopyVerifier:
    """A continuation from (traj, turn) replays `traj` from that turn (a new uid, parent set), so it
    samples exactly the tokens `traj` sampled from `turn` on; successes follow `success(turn, j)`."""

    def __init__(self, success=lambda turn, j: True):
        self.success, self.starts, self.count = success, [], 0

    def run(self, starts):
        self.starts += [(t.uid, turn, k) for t, turn, k in starts]
        out = []
        for traj, turn, k in starts:
            runs = []
            for j in range(k):
                child = copy.deepcopy(traj)
                self.count += 1
                child.uid, child.parent, child.success = 1000 + self.count, (traj.uid, turn), self.success(turn, j)
                runs.append(child)
            out.append(runs)
        return out


def same_shape_group(wins, n=8, turns=5):
    """n trajectories of `turns` turns and equal token counts; the first `wins` succeed."""
    return [fake_traj(turns, i < wins, uid=i) for i in range(n)]


def test_budget_matches_provers_verification_cost():
    """Extra sampled tokens: budget_grpo's fresh episodes equal ProVer's 2K continuations to within
    one episode, for the same judge's segment on the same group."""
    group = same_shape_group(wins=2)
    per_episode = group[0].num_policy_tokens
    for k, segment in [(4, (1, 2)), (3, (0, 0)), (2, (2, 3))]:
        c = credit_config(k=k)
        prover = make_credit("prover", c, judge=FixedJudge(segment), verifier=CopyVerifier()).assign([group])
        budget = make_credit("budget_grpo", c, judge=FixedJudge(segment), verifier=CopyVerifier()).assign([group])
        spent_prover, spent_budget = prover.metrics[EXTRA_TOKENS], budget.metrics[EXTRA_TOKENS]
        assert spent_prover == 2 * per_episode * k - k * 2 * (segment[0] + segment[1] + 1)
        assert abs(spent_budget - spent_prover) <= per_episode, (k, segment, spent_budget, spent_prover)
        assert budget.metrics["budget/budget_tokens"] == pytest.approx(
            k * (tail_tokens(group, segment[0]) + tail_tokens(group, segment[1] + 1)))


def test_budget_grpo_trains_on_the_enlarged_group():
    group = same_shape_group(wins=2)
    c = credit_config(k=2)
    verifier = CopyVerifier(success=lambda turn, j: j == 0)  # of each round's episodes, the first succeeds
    out = make_credit("budget_grpo", c, judge=FixedJudge((1, 1)), verifier=verifier).assign([group])
    enlarged = out.groups[0]
    assert enlarged[:8] == group and len(enlarged) == 8 + out.metrics["budget/extra_episodes"] > 8
    assert all(start[1] == 0 for start in verifier.starts)  # fresh episodes: continuations from turn 0
    assert len({t.uid for t in enlarged}) == len(enlarged)
    r = np.array([float(t.success) for t in enlarged])
    for t, adv in zip(enlarged, out.advantages[0]):
        mask = np.asarray(t.policy_mask)
        np.testing.assert_allclose(adv[mask], float(t.success) - r.mean(), rtol=1e-6)
        assert not adv[~mask].any()


def test_budget_grpo_spends_nothing_where_prover_would_not():
    groups = [same_shape_group(wins=2), same_shape_group(wins=0), same_shape_group(wins=8)]
    verifier = CopyVerifier()
    out = make_credit("budget_grpo", credit_config(k=4), judge=FixedJudge(None, reason="no_tool_call"),
                      verifier=verifier).assign(groups)
    assert verifier.starts == [] and out.metrics[EXTRA_TOKENS] == 0
    assert [len(g) for g in out.groups] == [8, 8, 8] and out.metrics["budget/eligible_groups"] == 1
    grpo = make_credit("grpo", credit_config()).assign(groups)
    for a, b in zip(out.advantages, grpo.advantages):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_budget_grpo_caps_extra_episodes_and_declares_needs():
    c = credit_config(k=4)
    c.budget_grpo.max_extra = 3
    group = same_shape_group(wins=1)
    out = make_credit("budget_grpo", c, judge=FixedJudge((0, 2)), verifier=CopyVerifier()).assign([group])
    assert out.metrics["budget/extra_episodes"] == 3
    needs = credit_class("budget_grpo").needs(c, groups=4, group_size=8)
    assert needs.judge and needs.verifier and needs.extra_episodes and needs.verify_envs >= 3
    assert prover_budget(group, None, 4) == 0.0
    with pytest.raises(ValueError, match="judge and a verifier"):
        make_credit("budget_grpo", c, verifier=CopyVerifier())


def test_budget_grpo_reports_the_judges_tokens():
    """Every judge metric ProVer reports for the same selection: calls, cost and tokens, declared."""
    groups = [same_shape_group(wins=2), same_shape_group(wins=1), same_shape_group(wins=0)]
    c = credit_config(k=2)
    out = make_credit("budget_grpo", c, judge=FixedJudge((1, 1)), verifier=CopyVerifier()).assign(groups)
    want = {"judge/calls": 2, "judge/cost_usd": 0.02, "judge/input_tokens": 200, "judge/output_tokens": 20}
    assert {k: out.metrics[k] for k in want} == pytest.approx(want)
    assert set(want) <= set(credit_class("budget_grpo").needs(c, groups=3, group_size=8).metrics)


class RateVerifier:
    """K outcomes per start with success rate values[turn]."""

    def __init__(self, values):
        self.values, self.starts = values, []

    def run(self, starts):
        self.starts += [(t.uid, turn, k) for t, turn, k in starts]
        return [[Outcome(j < round(self.values[turn] * k), 3) for j in range(k)] for _, turn, k in starts]


def test_spo_chain_segment_advantages_by_hand():
    win = fake_traj(5, True, uid=0)
    group = [win] + [fake_traj(6, False, uid=i) for i in range(1, 4)]  # p = 0.25: eligible
    c = credit_config()
    c.spo_chain.interval, c.spo_chain.k = 2, 4
    verifier = RateVerifier({2: 0.5, 4: 0.75})
    out = make_credit("spo_chain", c, verifier=verifier).assign([group])
    assert cut_points(5, 2) == [2, 4] and verifier.starts == [(0, 2, 4), (0, 4, 4)]
    want = {0: 0.5 - 0.25, 1: 0.5 - 0.25, 2: 0.75 - 0.5, 3: 0.75 - 0.5, 4: 1.0 - 0.75}
    adv = out.advantages[0][0]
    for turn, value in want.items():
        span = win.turns[turn]
        np.testing.assert_allclose(adv[span.start:span.end], value)
    assert not adv[~np.asarray(win.policy_mask)].any()
    # the segment advantages redistribute GRPO's advantage: one segment of each turn sums to R - mean
    assert sum(want[t] for t in (0, 2, 4)) == pytest.approx(1.0 - 0.25)
    grpo = make_credit("grpo", c).assign([group]).advantages[0]
    for i in range(1, 4):
        np.testing.assert_array_equal(out.advantages[0][i], grpo[i])
    assert out.metrics["spo/cuts"] == 2 and out.metrics[EXTRA_TOKENS] == 2 * 4 * 3


def test_spo_chain_all_trajectories_and_bad_config():
    group = [fake_traj(3, True, uid=0)] + [fake_traj(4, False, uid=i) for i in range(1, 4)]
    c = credit_config()
    c.spo_chain.interval, c.spo_chain.k, c.spo_chain.trajectories = 1, 2, "all"
    verifier = RateVerifier({1: 0.5, 2: 0.5, 3: 0.0})
    out = make_credit("spo_chain", c, verifier=verifier).assign([group])
    assert out.metrics["spo/trajectories"] == 4 and out.metrics["spo/cuts"] == 2 + 3 * 3
    c.spo_chain.trajectories = "some"
    with pytest.raises(ValueError, match="spo_chain.trajectories"):
        make_credit("spo_chain", c, verifier=verifier)


def play(env, policy, seed, rng):
    """A trajectory of `policy` in `env` with one policy token per turn and every snapshot, plus the
    (obs, info) seen before each turn."""
    traj = Trajectory(env="household", seed=seed, uid=0, task="")
    obs, info = env.reset(seed)
    traj.append([0], policy=False)
    traj.snapshots.append(env.snapshot())
    seen, done = [(obs, info)], False
    while not done:
        probs = policy(obs, info)
        acts = list(probs)
        a = acts[rng.choice(len(acts), p=[probs[x] for x in acts])]
        start = len(traj.tokens)
        traj.append([1], policy=True, logprobs=[0.0])
        obs, _, done, info = env.step(a)
        traj.turns.append(Turn(start, start + 1, a, a, info["valid"], obs, 0.0, "stop"))
        traj.snapshots.append(env.snapshot())
        seen.append((obs, info))
    traj.success = bool(info["success"])
    return traj, seen


def test_spo_chain_values_match_exact_dp():
    """Across repeats, the mean advantage of a middle segment equals V(c_{j+1}) - V(c_j) from DP."""
    env = make("household", task_type="pick_and_place", max_turns=8, expert_turns=(3, 6), num_receptacles=4,
               num_objects=0, num_decoys=1)
    policy = mixed_policy(0.5)
    rng = np.random.default_rng(4)
    traj, seen = None, None
    for _ in range(200):
        traj, seen = play(env, policy, 3, rng)
        if traj.success and traj.num_turns >= 4:
            break
    assert traj.success and traj.num_turns >= 4
    memo = {}
    value = lambda t: dp.success_probability(env, policy, traj.snapshots[t], *seen[t], _memo=memo)
    exact = value(2) - value(1)
    group = [traj] + [fake_traj(2, False, uid=i) for i in range(1, 4)]  # the group only sets eligibility
    c = credit_config()
    c.spo_chain.interval, c.spo_chain.k = 1, 8
    method = make_credit("spo_chain", c, verifier=PolicyVerifier(env, policy, seed=2))
    reps = 120
    got = [method.assign([group]).advantages[0][0][traj.turns[1].start] for _ in range(reps)]
    mean, se = np.mean(got), np.std(got, ddof=1) / np.sqrt(reps)
    assert se > 0 and abs(mean - exact) < 3.5 * se, (mean, exact, se)
