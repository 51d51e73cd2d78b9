"""A credit method added in one file: registered, with its own config section, metrics and headline,
overlapped with the rollout by the step pipeline and equal to its serial `assign`; no change anywhere
else (trainer, pipeline, training config, progress bar)."""

import ml_collections
import numpy as np
import pytest

from prover_jax.credit import EXTRA_TOKENS, Figure, Needs, OverlapCredit, credit_class, make_credit, register_credit
from prover_jax.credit.base import METHODS, CreditOutput
from prover_jax.credit.common import grpo_advantages, new_policy_tokens, rewards, shortest_success
from prover_jax.training.config import default_config
from prover_jax.training.run import _live, _totals, summary_block

from helpers.credit import fake_traj
from test_pipeline import G, K, same_step, setup, step  # noqa: F401  (setup: the fixture `step` plays on)

METRICS = ("restart/groups", "restart/improved", "restart/value_sum")


@register_credit("restart")
class Restart(OverlapCredit):
    """V(1) = mean success of `rounds` x K continuations of an eligible group's shortest success from
    turn 1 (each round its own K, the later ones asked after the earlier ended); that trajectory's
    turn-0 policy tokens get lam * (V(1) - mean_g(R)) on top of A^GRPO."""

    headline = (Figure("improved", "improved", "improved_rate", "restart/improved", den="restart/groups",
                       den_key="restart_groups", den_name="restarted groups"),)

    def __init__(self, config, verifier=None, **_):
        super().__init__(config)
        self.verifier = verifier

    @classmethod
    def default_config(cls):
        s = ml_collections.ConfigDict()
        s.k = K  # continuations per round
        s.rounds = 2  # rounds of k continuations from turn 1
        s.lam = 1.0  # weight of V(1) - mean_g(R)
        return s

    @classmethod
    def needs(cls, config, groups, group_size):
        return Needs(verifier=True, verify_envs=groups * config.restart.k, metrics=METRICS, headline=cls.headline)

    def plan(self, group):
        i = shortest_success(group)
        return i if group[i].num_turns > 1 else None

    def starts(self, group, plan, runs):
        s = self.config.restart
        return [(group[plan], 1, s.k)] if plan is not None and len(runs) < s.rounds else []

    def most_envs(self):
        return self.config.restart.k

    def combine(self, groups, plans, runs, cancelled=0, cancelled_tokens=0):
        advantages, n, improved, value_sum, extra = grpo_advantages(groups, self.config), 0, 0, 0.0, 0
        for g in sorted(plans):
            if not runs[g]:
                continue
            i, conts = plans[g], [c for r in runs[g] for c in r]
            traj = groups[g][i]
            v1 = float(np.mean([c.success for c in conts]))
            bonus = self.config.restart.lam * (v1 - float(np.mean(rewards(groups[g]))))
            turn0 = np.zeros(len(traj.tokens), np.float32)
            turn0[traj.turns[0].start:traj.turns[0].end] = np.asarray(traj.policy_mask, np.float32)[
                traj.turns[0].start:traj.turns[0].end]
            advantages[g][i] = advantages[g][i] + np.float32(bonus) * turn0
            n, improved, value_sum = n + 1, improved + (bonus > 0), value_sum + v1
            extra += sum(new_policy_tokens(c, traj) for c in conts)
        metrics = {"restart/groups": n, "restart/improved": improved, "restart/value_sum": value_sum,
                   EXTRA_TOKENS: extra}
        return CreditOutput(advantages, metrics)


@pytest.fixture(scope="module", autouse=True)
def registered():
    yield
    METHODS._table.pop("restart")  # other test files see the built-in methods only


def restart_config():
    c = default_config().credit  # holds credit.restart: the registered method's own section
    c.band_high = 1.0  # every mixed group is eligible
    return c


def test_overlapped_equals_serial(setup):
    s_trajs, serial, _ = step(setup, None, overlap=False, method="restart", config=restart_config())
    starts = []
    p_trajs, piped, _ = step(setup, None, overlap=True, method="restart", config=restart_config(), starts=starts)
    same_step(serial, s_trajs, piped, p_trajs)
    groups = serial.metrics["restart/groups"]
    assert groups >= 1 and serial.metrics[EXTRA_TOKENS] > 0
    assert len(starts) == 2 * groups and all(starts)  # two rounds per group, in the step's Play


def test_config_needs_and_headline():
    c = default_config()
    assert c.credit.restart.to_dict() == {"k": K, "rounds": 2, "lam": 1.0}
    needs = credit_class("restart").needs(c.credit, groups=3, group_size=G)
    assert needs.verifier and needs.verify_envs == 3 * K and needs.headline == Restart.headline
    row = {"success_rate": 0.5, "restart/groups": 2.0, "restart/improved": 1.0, "time/step_s": 1.0}
    assert _live(row, None) == {"train": "0.50", "improved": "0.50 (1/2)", "s/step": "1.0"}
    assert _live({**row, "restart/groups": 0.0}, None)["improved"] == "-"
    totals = _totals([row, {**row, "restart/groups": 0.0, "restart/improved": 0.0}])
    assert totals["improved_rate"] == 0.5 and totals["restart_groups"] == 2.0
    assert "acceptance_rate" not in totals  # ProVer's figures belong to ProVer's runs
    text = summary_block({"eval_after_rl": {"eval/success": 0.5}, **totals})
    assert "improved        50% of 2 restarted groups" in text


def test_serial_assign_plays_the_rounds_in_order():
    """Hand-built group, a verifier that records its calls: round 2 is asked once round 1 has ended, from
    the same boundary."""
    class Recorder:
        def __init__(self):
            self.calls = []

        def run(self, starts):
            self.calls.append([(t.uid, turn, k) for t, turn, k in starts])
            return [[fake_traj(3, j == 0, uid=100 + j) for j in range(k)] for _, _, k in starts]

    group = [fake_traj(3, True, uid=0), fake_traj(4, False, uid=1), fake_traj(4, False, uid=2)]
    rec = Recorder()
    out = make_credit("restart", restart_config(), verifier=rec).assign([group])
    assert rec.calls == [[(0, 1, K)], [(0, 1, K)]]
    assert out.metrics["restart/groups"] == 1 and out.metrics["restart/value_sum"] == 0.5
    first, second = group[0].turns[:2]
    np.testing.assert_allclose(out.advantages[0][0][first.start:first.end], 2 / 3 + (0.5 - 1 / 3), rtol=1e-6)
    np.testing.assert_allclose(out.advantages[0][0][second.start:second.end], 2 / 3, rtol=1e-6)
