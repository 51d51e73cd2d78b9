"""The eligibility band is credit.band_low / credit.band_high, read by every method that spends extra
samples (prover, budget_grpo, spo_chain); a config that still sets credit.prover.band_* is refused by
the new name."""

import pytest

from prover_jax.credit import make_credit
from prover_jax.credit.common import in_band
from prover_jax.training.config import default_config

from helpers.credit import FixedJudge, fake_traj

METHODS = ("prover", "budget_grpo", "spo_chain")


class CountingVerifier:
    """Every continuation fails; `starts` counts the starts asked for."""

    def __init__(self):
        self.starts = 0

    def run(self, starts):
        self.starts += len(starts)
        return [[fake_traj(2, False, uid=500 + j) for j in range(k)] for _, _, k in starts]


def group(wins, n=4):
    return [fake_traj(4, i < wins, uid=i) for i in range(n)]


def sampled(method, config, g):
    """How many continuation starts `method` asked for on group `g` (0: the group was not eligible)."""
    config.spo_chain.interval = 1
    verifier = CountingVerifier()
    make_credit(method, config, judge=FixedJudge((1, 1)), verifier=verifier).assign([g])
    return verifier.starts


@pytest.mark.parametrize("method", METHODS)
def test_band_is_the_credit_sections(method):
    c = default_config().credit
    assert "band_low" not in c.prover and "band_high" not in c.prover
    assert (c.band_low, c.band_high) == (0.0, 0.5)
    assert sampled(method, c, group(wins=1)) > 0  # p = 0.25 in (0, 0.5)
    assert sampled(method, default_config().credit, group(wins=3)) == 0  # p = 0.75: outside
    c = default_config().credit
    c.band_high = 1.0
    assert sampled(method, c, group(wins=3)) > 0
    c = default_config().credit
    c.band_low = 0.3
    assert sampled(method, c, group(wins=1)) == 0


@pytest.mark.parametrize("field", ["band_low", "band_high"])
@pytest.mark.parametrize("method", METHODS)
def test_old_band_fields_are_refused_by_their_new_name(method, field):
    c = default_config().credit
    c.prover[field] = 0.9
    with pytest.raises(ValueError, match=rf"credit\.prover\.{field} is now credit\.{field}"):
        make_credit(method, c, judge=FixedJudge((1, 1)), verifier=CountingVerifier())


@pytest.mark.parametrize("method", METHODS)
def test_a_band_that_admits_groups_without_a_success_is_refused_by_name(method):
    """band_low < 0 makes all-failure groups eligible; a method that picks their success is refused
    when built, not in the middle of a step; spo_chain over every trajectory needs no success."""
    c = default_config().credit
    c.band_low = -0.1
    with pytest.raises(ValueError, match=r"credit\.band_low must be >= 0"):
        make_credit(method, c, judge=FixedJudge((1, 1)), verifier=CountingVerifier())
    if method == "spo_chain":
        c.spo_chain.trajectories = "all"
        assert sampled(method, c, group(wins=0)) > 0


@pytest.mark.parametrize("wins, low, high", [(1, 0.1, 0.5), (7, 0.0, 0.7), (1, 1 / 3, 1.0)])
def test_a_success_rate_on_the_bands_edge_is_outside(wins, low, high):
    """The band is strict at both ends, also where p (1/10, 7/10, 1/3) has no exact float32 form."""
    c = default_config().credit
    c.band_low, c.band_high = low, high
    n = 3 if low == 1 / 3 else 10
    assert not in_band([fake_traj(1, i < wins, uid=i) for i in range(n)], c)
