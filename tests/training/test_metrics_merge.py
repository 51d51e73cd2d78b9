"""One metrics row from several (processes, dynamic-sampling draws): `training.metrics.merge_rows` adds
the counts, weighs the means and recomputes the rates, by the base rules and each credit method's
`Needs.merge`."""

import pytest


def test_merged_metrics_weigh_and_add_up():
    from prover_jax.training.metrics import merge_rows
    a = {"step": 1, "loss": 0.5, "episodes": 4, "turns_total": 10, "success_rate": 0.5, "policy_tokens": 100,
         "invalid_action_frac": 0.1, "prover/valid_proposals": 1, "prover/accepted": 1,
         "prover/verify_policy_tokens": 30, "prover/segment_len": 2.0, "prover/acceptance_rate": 1.0,
         "prover/extra_token_frac": 0.3, "time/rollout_s": 2.0, "prover/dropped/schema": 1}
    b = dict(a, success_rate=0.25, turns_total=30, invalid_action_frac=0.5, **{
        "prover/valid_proposals": 3, "prover/accepted": 0, "prover/segment_len": 1.0,
        "prover/verify_policy_tokens": 10, "time/rollout_s": 3.0})
    del b["prover/dropped/schema"]
    from prover_jax.credit.prover import MERGE
    m = merge_rows([a, b], MERGE)
    assert m["loss"] == 0.5 and m["episodes"] == 8 and m["policy_tokens"] == 200
    assert m["success_rate"] == pytest.approx(0.375)
    assert m["invalid_action_frac"] == pytest.approx((0.1 * 10 + 0.5 * 30) / 40)
    assert m["prover/acceptance_rate"] == pytest.approx(1 / 4)
    assert m["prover/segment_len"] == pytest.approx((2.0 + 3.0) / 4)
    assert m["prover/extra_token_frac"] == pytest.approx(40 / 200)
    assert m["time/rollout_s"] == 3.0 and m["prover/dropped/schema"] == 1
    assert merge_rows([a]) == a
    # the overlong penalty is a mean over each process's episodes, not process 0's
    o = merge_rows([{"episodes": 4, "overlong_penalty": -0.4}, {"episodes": 4, "overlong_penalty": 0.0}])
    assert o["overlong_penalty"] == pytest.approx(-0.2)


@pytest.mark.parametrize("method, counts, means", [
    ("budget_grpo", ("budget/eligible_groups", "budget/extra_episodes", "budget/budget_tokens", "judge/calls"), ()),
    ("spo_chain", ("spo/eligible_groups", "spo/trajectories", "spo/cuts", "spo/segment_tokens"),
     (("spo/value_mean", "spo/cuts"), ("spo/segment_adv_abs", "spo/segment_tokens"))),
    ("gigpo", ("gigpo/anchor_groups", "gigpo/text_fallback_groups", "gigpo/turns"),
     (("gigpo/anchor_group_size", "gigpo/anchor_groups"), ("gigpo/anchored_turn_frac", "gigpo/turns"))),
    ("critic", ("critic/calls", "critic/turns", "critic/input_tokens", "critic/dp_states", "critic/cached"),
     (("critic/good_frac", "critic/turns"),)),
    ("prover", ("prover/cancelled_continuations", "prover/cancelled_tokens", "judge/input_tokens"), ())])
def test_every_method_counts_add_up_over_processes_and_draws(method, counts, means):
    """Each method's counts are summed and its means weighted by what they average over, by the rules
    its Needs declare (the headline figures of budget_grpo and spo_chain were the first row's)."""
    from prover_jax.credit import credit_class
    from prover_jax.training.config import default_config
    from prover_jax.training.metrics import merge_rows
    needs = credit_class(method).needs(default_config().credit, groups=2, group_size=4)
    a = {**{k: 3 for k in counts}, **{k: 0.5 for k, _ in means}, **{w: 1 for _, w in means}}
    b = {**{k: 7 for k in counts}, **{k: 0.25 for k, _ in means}, **{w: 3 for _, w in means}}
    m = merge_rows([a, b], needs.merge)
    for k in counts:
        assert m[k] == a[k] + b[k], k
    for k, w in means:
        assert m[k] == pytest.approx((0.5 * a[w] + 0.25 * b[w]) / (a[w] + b[w])), k
    assert set(counts) | {k for k, _ in means} <= set(needs.metrics)


def test_advantage_metrics_net_push_of_longer_failures():
    """GRPO's advantages sum to 0 over a group's episodes, not over its tokens: with the failure twice as
    long as the success, the token mean is negative; a process's figures merge weighted by its tokens."""
    from helpers.credit import fake_traj
    from prover_jax.credit.common import broadcast
    from prover_jax.training.metrics import advantage_metrics, merge_rows

    win, lose = fake_traj(2, True, 0), fake_traj(4, False, 1)  # 2 policy tokens a turn: 4 and 8 tokens
    m = advantage_metrics([win, lose], [broadcast(win, 0.5), broadcast(lose, -0.5)])
    assert m["adv/tokens"] == 12 and m["adv/abs_token_mean"] == 0.5
    assert m["adv/net_token_mean"] == (4 * 0.5 - 8 * 0.5) / 12
    other = {**advantage_metrics([win], [broadcast(win, 1.0)]), "episodes": 1}
    row = merge_rows([{**m, "episodes": 2}, other])
    assert row["adv/tokens"] == 16 and row["adv/net_token_mean"] == (2 * 1 - 8 * 0.5 + 4 * 1.0) / 16
