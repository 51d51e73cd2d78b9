"""The pipelined RL step (judges and verification overlapped with rollouts) against the serial one,
and judges that hang or raise."""

import threading
import time

import numpy as np
import pytest

from prover_jax.credit import EXTRA_TOKENS, RolloutVerifier, make_credit
from prover_jax.credit.pipeline import StepPipeline
from prover_jax.envs.pool import EnvPool
from prover_jax.judges import Judge, Proposal
from prover_jax.judges.random_judge import RandomJudge
from prover_jax.rollout import Rollout, RolloutConfig
from prover_jax.sampling import Driver, Engine, SamplingParams
from prover_jax.training.config import default_config

from helpers.tiny import tiny_config, tiny_model

G, GROUPS, K = 4, 3, 2
SEEDS = [s for s in (11, 12, 13) for _ in range(G)]
UIDS = list(range(100, 100 + G * GROUPS))


class LuckyPool(EnvPool):
    """household, but every action counts as valid and an episode's success is a fixed function of
    its last response (a random policy gets mixed groups; continuations have outcomes to measure)."""

    def act(self, responses):
        out = super().act(responses)
        lucky = {e: sum(map(ord, responses[e])) % 2 == 0 for e in responses}
        return {e: step._replace(info={**step.info, "valid": True, "success": lucky[e]})
                for e, step in out.items()}


@pytest.fixture(scope="module")
def setup(household_tokenizer):
    engine = Engine(tiny_model(tiny_config(vocab_size=1024)), max_concurrent_decodes=8, max_prefill_length=512,
                    max_target_length=2048)
    pool, vpool = LuckyPool("household", G * GROUPS), LuckyPool("household", 2 * GROUPS * K)
    yield engine, household_tokenizer, pool, vpool
    pool.close()
    vpool.close()


def credit_config():
    c = default_config().credit
    c.prover.k = K
    c.prover.band_high = 1.0  # every mixed group is eligible
    return c


def rollout(engine, tok):
    cfg = RolloutConfig(sampling=SamplingParams(temperature=1.0), max_action_tokens=8, max_turns=3, seed=4)
    return Rollout(Driver(engine), tok, cfg)


def step(setup, judge, overlap, timeout=300.0):
    engine, tok, pool, vpool = setup
    ro = rollout(engine, tok)
    credit = make_credit("prover", credit_config(), judge=judge, verifier=RolloutVerifier(ro, vpool), seed=0)
    pipe = StepPipeline(ro, pool, credit, verify_pool=vpool if overlap else None, judge_timeout_s=timeout)
    t0 = time.perf_counter()
    trajs, out = pipe.run(SEEDS, UIDS, G)
    return trajs, out, time.perf_counter() - t0


def test_pipelined_equals_serial(setup):
    s_trajs, serial, _ = step(setup, RandomJudge(), overlap=False)
    p_trajs, piped, _ = step(setup, RandomJudge(), overlap=True)
    assert [t.tokens for t in s_trajs] == [t.tokens for t in p_trajs]
    m = serial.metrics
    assert m["prover/valid_proposals"] >= 1 and m["prover/verify_policy_tokens"] > 0
    for a, b in zip(serial.advantages, piped.advantages):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    same = {k: v for k, v in m.items() if not k.startswith("time/")}
    assert same == {k: v for k, v in piped.metrics.items() if not k.startswith("time/")}
    assert {"time/rollout_s", "time/credit_wait_s", "time/judge_s", "time/verify_s"} <= set(piped.metrics)


class Unreliable(Judge):
    """Hangs on the first group it sees, raises on the second, answers like RandomJudge on others."""

    def __init__(self):
        self.release, self.seen, self.lock = threading.Event(), [], threading.Lock()

    def _propose(self, success, failures, *, max_segment_turns, rng):
        with self.lock:
            self.seen.append(success.uid)
            n = len(self.seen)
        if n == 1:
            self.release.wait(60)
            return Proposal(None, "no_proposal")
        if n == 2:
            raise RuntimeError("judge backend exploded")
        return RandomJudge()._propose(success, failures, max_segment_turns=max_segment_turns, rng=rng)


def test_hanging_or_raising_judge_is_a_drop_within_the_timeout(setup):
    _, reference, plain_s = step(setup, RandomJudge(), overlap=True)
    judge = Unreliable()
    try:
        _, out, took = step(setup, judge, overlap=True, timeout=2.0)
    finally:
        judge.release.set()
    m = out.metrics
    eligible = reference.metrics["prover/eligible_groups"]
    assert eligible == 3 and len(judge.seen) == 3
    assert m["prover/dropped/timeout"] == 1 and m["prover/dropped/judge_error"] == 1
    assert m["prover/eligible_groups"] == 3
    assert took < plain_s + 2.0 + 5.0  # the hang costs at most its timeout, never 60 s


@pytest.mark.parametrize("method", ["budget_grpo", "spo_chain"])
def test_baselines_sample_through_the_rollout_verifier(setup, method):
    """Budget-Matched GRPO's fresh episodes and SPO-chain's cut-point continuations are played by the
    policy itself (RolloutVerifier): real trajectories, their sampled tokens counted as extra."""
    engine, tok, pool, vpool = setup
    ro = rollout(engine, tok)
    c = credit_config()
    c.spo_chain.k, c.spo_chain.interval = K, 1
    credit = make_credit(method, c, judge=RandomJudge(), verifier=RolloutVerifier(ro, vpool), seed=0)
    trajs, out = StepPipeline(ro, pool, credit).run(SEEDS, UIDS, G)
    assert out.metrics[EXTRA_TOKENS] > 0
    if method == "budget_grpo":
        assert out.metrics["budget/eligible_groups"] >= 1
        extra = [t for g in out.groups for t in g[G:]]
        assert len(extra) == out.metrics["budget/extra_episodes"] > 0
        assert all(t.parent[1] == 0 and t.finished and t.num_policy_tokens > 0 for t in extra)
        assert sum(t.num_policy_tokens for t in extra) == out.metrics[EXTRA_TOKENS]
        assert all(len(a) == len(t.tokens) for g, adv in zip(out.groups, out.advantages) for t, a in zip(g, adv))
    else:
        assert out.metrics["spo/cuts"] >= 1 and out.metrics["spo/eligible_groups"] >= 1
