"""GRPO and ProVer credit: eligibility, shortest success, delta arithmetic, where the bonus lands,
and the unbiasedness of verification against exact dynamic programming."""

import numpy as np
import pytest

from prover_jax.credit import PolicyVerifier, make_credit
from prover_jax.credit.common import eligible, shortest_success
from prover_jax.credit.prover import delta_estimate, segment_bonus, segment_tokens
from prover_jax.credit.verify import Outcome
from prover_jax.envs import make
from prover_jax.envs.testing import dp, mixed_policy
from prover_jax.rollout.trajectory import Trajectory, Turn

from helpers.credit import FixedJudge, credit_config, fake_traj


class FixedVerifier:
    """Continuations with given success rates: pre boundary p_pre, post boundary p_post."""

    def __init__(self, p_pre, p_post, tokens=5):
        self.p_pre, self.p_post, self.tokens, self.starts = p_pre, p_post, tokens, []

    def run(self, starts):
        self.starts += starts
        out = []
        for n, (_, _, k) in enumerate(starts):
            p = self.p_pre if n % 2 == 0 else self.p_post
            wins = int(round(p * k))
            out.append([Outcome(i < wins, self.tokens) for i in range(k)])
        return out


def test_grpo_broadcast():
    group = [fake_traj(3, True, 0), fake_traj(2, False, 1), fake_traj(4, False, 2), fake_traj(1, False, 3)]
    out = make_credit("grpo", credit_config()).assign([group])
    for t, adv, a in zip(group, out.advantages[0], [0.75, -0.25, -0.25, -0.25]):
        mask = np.asarray(t.policy_mask)
        np.testing.assert_allclose(adv[mask], a) and np.testing.assert_array_equal(adv[~mask], 0)
    c = credit_config()
    c.std_scope = "group"
    out = make_credit("grpo", c).assign([group])
    assert out.advantages[0][0].max() == pytest.approx(0.75 / (np.std([1, 0, 0, 0]) + 1e-6), rel=1e-5)


def test_std_scope_none_group_batch():
    """A_i = (R_i - mean_g R) / s: s = 1, std_g + 1e-6, or std of the pooled batch rewards + 1e-6."""
    from prover_jax.credit import outcome_advantages
    r = [np.array([1, 0, 0, 0], np.float32), np.array([1, 1, 1, 0], np.float32), np.ones(4, np.float32)]
    none, group, batch = (outcome_advantages(r, s) for s in ("none", "group", "batch"))
    np.testing.assert_array_equal(none[0], [0.75, -0.25, -0.25, -0.25])
    np.testing.assert_array_equal(none[2], 0)
    np.testing.assert_allclose(group[0], none[0] / (np.sqrt(0.1875) + 1e-6), rtol=1e-6)
    np.testing.assert_allclose(group[1], none[1] / (np.sqrt(0.1875) + 1e-6), rtol=1e-6)
    pooled = np.std([1, 0, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1])  # 8 of 12 succeed: sqrt(2/9)
    for a, b in zip(batch, none):
        np.testing.assert_allclose(a, b / (pooled + 1e-6), rtol=1e-6)
    group_tr = [[fake_traj(2, s, i) for i, s in enumerate(rs)] for rs in r]
    c = credit_config()
    c.std_scope = "batch"
    out = make_credit("grpo", c).assign(group_tr)
    t = group_tr[1][3]
    assert out.advantages[1][3][np.asarray(t.policy_mask)].max() == pytest.approx(-0.75 / (pooled + 1e-6), rel=1e-5)
    c.std_scope = "per_token"
    with pytest.raises(ValueError, match="credit.std_scope"):
        make_credit("grpo", c).assign(group_tr)


def test_eligibility_and_shortest_success():
    assert eligible(np.array([1, 0, 0, 0.]), 0.0, 0.5)
    assert not eligible(np.array([1, 1, 0, 0.]), 0.0, 0.5)  # p = 0.5 is outside (strict)
    assert not eligible(np.zeros(4), 0.0, 0.5) and not eligible(np.ones(4), 0.0, 0.5)
    group = [fake_traj(5, True, 0), fake_traj(3, True, 1), fake_traj(3, True, 2, act_len=1), fake_traj(2, False, 3)]
    assert shortest_success(group) == 2  # 3 turns, fewer tokens than uid 1
    with pytest.raises(ValueError):
        shortest_success([fake_traj(2, False)])


def test_delta_and_variants():
    pre, post = [Outcome(s) for s in (1, 0, 0, 0)], [Outcome(s) for s in (1, 1, 1, 0)]
    assert delta_estimate(pre, post) == pytest.approx(0.5)
    assert segment_bonus(0.5, 2.0, "positive") == 1.0 and segment_bonus(-0.5, 2.0, "positive") == 0.0
    assert segment_bonus(-0.5, 2.0, "signed") == -1.0
    assert segment_bonus(0.2, 1.0, "threshold", 0.25) == 0.0 and segment_bonus(0.3, 1.0, "threshold", 0.25) == 0.3
    with pytest.raises(ValueError):
        segment_bonus(0.1, 1.0, "bogus")


@pytest.mark.parametrize("p_pre,p_post,bonus", [(0.25, 0.75, 0.5), (0.75, 0.25, 0.0), (0.5, 0.5, 0.0)])
def test_bonus_lands_on_segment_tokens_only(p_pre, p_post, bonus):
    win = fake_traj(5, True, 0)
    group = [win] + [fake_traj(6, False, i) for i in range(1, 8)]
    judge, verifier = FixedJudge((1, 2)), FixedVerifier(p_pre, p_post)
    out = make_credit("prover", credit_config(k=4), judge=judge, verifier=verifier).assign([group])
    base = make_credit("grpo", credit_config()).assign([group]).advantages[0]
    seg = segment_tokens(win, 1, 2)
    assert seg.sum() == 4 and all(seg[win.turns[k].start:win.turns[k].end].all() for k in (1, 2))
    np.testing.assert_allclose(out.advantages[0][0] - base[0], bonus * seg, atol=1e-7)
    for i in range(1, 8):  # failed trajectories: plain GRPO
        np.testing.assert_array_equal(out.advantages[0][i], base[i])
    assert [(t.uid, turn, k) for t, turn, k in verifier.starts] == [(0, 1, 4), (0, 3, 4)]
    m = out.metrics
    assert m["prover/eligible_groups"] == 1 and m["prover/valid_proposals"] == 1
    assert m["prover/accepted"] == (bonus > 0) and m["prover/segment_len"] == 2
    assert m["prover/delta_mean"] == pytest.approx(p_post - p_pre)
    batch_tokens = sum(t.num_policy_tokens for t in group)
    assert m["prover/extra_token_frac"] == pytest.approx(8 * 5 / batch_tokens)
    assert judge.seen == [(0, list(range(1, 8)))]


def test_bonus_share_and_the_group_std_scale():
    """prover/bonus_share = |bonus| mass / |A^GRPO| mass; at std_scope=group the bonus is divided by the
    group's std like A^GRPO, so its weight against A^GRPO does not change with the scope."""
    win = fake_traj(5, True, 0)
    group = [win] + [fake_traj(6, False, i) for i in range(1, 8)]
    seg = segment_tokens(win, 1, 2)
    shares = {}
    for scope in ("none", "group"):
        c = credit_config(k=4)
        c.std_scope = scope
        out = make_credit("prover", c, judge=FixedJudge((1, 2)), verifier=FixedVerifier(0.25, 0.75)).assign([group])
        base = make_credit("grpo", c).assign([group]).advantages[0]
        scale = 1.0 if scope == "none" else float(np.std([1.0] + [0.0] * 7)) + 1e-6
        np.testing.assert_allclose(out.advantages[0][0] - base[0], 0.5 / scale * seg, rtol=1e-5, atol=1e-7)
        mass = sum(np.abs(a).sum() for a in base)
        shares[scope] = out.metrics["prover/bonus_share"]
        assert shares[scope] == pytest.approx(0.5 / scale * seg.sum() / mass, rel=1e-5)
    assert shares["none"] == pytest.approx(shares["group"], rel=1e-5)


@pytest.mark.parametrize("segment,reason", [((3, 4), "terminal"), ((0, 4), "too_long"), ((2, 1), None),
                                            ((-1, 0), None), ((1, 1), "invalid_action")])
def test_invalid_proposals_dropped(segment, reason):
    win = fake_traj(5, True, 0, valid=[True, False, True, True, True])
    group = [win] + [fake_traj(6, False, i) for i in range(1, 4)]
    verifier = FixedVerifier(0.0, 1.0)
    out = make_credit("prover", credit_config(k=2, max_segment_turns=4), judge=FixedJudge(segment),
                      verifier=verifier).assign([group])
    assert verifier.starts == [] and out.metrics["prover/valid_proposals"] == 0
    dropped = {k: v for k, v in out.metrics.items() if k.startswith("prover/dropped/")}
    assert sum(dropped.values()) == 1 and (reason is None or dropped == {f"prover/dropped/{reason}": 1})
    np.testing.assert_array_equal(out.advantages[0][0], make_credit("grpo", credit_config()).assign([group]).advantages[0][0])


def test_ineligible_groups_skip_the_judge():
    judge = FixedJudge((0, 0))
    groups = [[fake_traj(2, True, 0), fake_traj(2, True, 1)], [fake_traj(2, False, 2), fake_traj(2, False, 3)]]
    out = make_credit("prover", credit_config(), judge=judge, verifier=FixedVerifier(0, 1)).assign(groups)
    assert judge.seen == [] and out.metrics["prover/eligible_groups"] == 0


def test_verification_is_unbiased_against_exact_dp():
    """For a fixed stochastic policy, the mean of many delta estimates equals V(s_post) - V(s_pre)."""
    env = make("household", task_type="pick_and_place", max_turns=8, expert_turns=(3, 6), num_receptacles=4,
               num_objects=0, num_decoys=1)
    policy = mixed_policy(0.5)
    rng = np.random.default_rng(0)
    # a trajectory of the policy itself, with its snapshots
    traj = Trajectory(env="household", seed=3, uid=0, task="")
    obs, info = env.reset(3)
    traj.snapshots.append(env.snapshot())
    infos = [(obs, info)]
    done = False
    while not done:
        probs = policy(obs, info)
        acts = list(probs)
        a = acts[rng.choice(len(acts), p=[probs[x] for x in acts])]
        obs, _, done, info = env.step(a)
        traj.turns.append(Turn(0, 0, a, a, info["valid"], obs, 0.0, "stop"))
        traj.snapshots.append(env.snapshot())
        infos.append((obs, info))
    assert traj.num_turns >= 3
    l, r = 0, 1
    memo = {}
    value = lambda t: dp.success_probability(env, policy, traj.snapshots[t], *infos[t], _memo=memo)
    exact = value(r + 1) - value(l)
    verifier = PolicyVerifier(env, policy, seed=1)
    k, reps = 8, 150
    deltas = [delta_estimate(*verifier.run([(traj, l, k), (traj, r + 1, k)])) for _ in range(reps)]
    mean, se = np.mean(deltas), np.std(deltas, ddof=1) / np.sqrt(reps)
    assert abs(mean - exact) < 3.5 * se + 1e-9, (mean, exact, se)
    assert se > 0


def test_prover_notes_the_segment_it_verified():
    """CreditOutput.notes: the judged success's uid -> the segment, delta, acceptance, bonus and the
    continuations (outcomes, capped at NOTED_CONTINUATIONS per boundary); a dropped proposal notes its reason."""
    from prover_jax.credit.common import NOTED_CONTINUATIONS
    win = fake_traj(5, True, 0)
    group = [win] + [fake_traj(6, False, i) for i in range(1, 8)]
    out = make_credit("prover", credit_config(k=8), judge=FixedJudge((1, 2)),
                      verifier=FixedVerifier(0.25, 0.75)).assign([group])
    note = out.notes[win.uid]
    assert set(out.notes) == {win.uid}
    assert note["segment"] == [1, 2] and note["accepted"] and note["delta"] == pytest.approx(0.5)
    assert note["bonus"] == pytest.approx(0.5) and note["reason"] == "ok"
    assert len(note["pre"]) == len(note["post"]) == NOTED_CONTINUATIONS
    assert [c["success"] for c in note["pre"]] == [True, True, False, False]
    dropped = make_credit("prover", credit_config(k=2), judge=FixedJudge((3, 4)),
                          verifier=FixedVerifier(0, 1)).assign([group])
    assert dropped.notes[win.uid]["reason"] == "terminal" and "segment" not in dropped.notes[win.uid]
