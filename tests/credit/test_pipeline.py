"""The pipelined RL step (plans and continuations overlapped with rollouts) against the serial one, for
every method that samples continuations (prover, budget_grpo, spo_chain), and judges that hang or raise."""

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
    c.band_high = 1.0  # every mixed group is eligible
    return c


def rollout(engine, tok, context_budget_mb=0.0):
    cfg = RolloutConfig(sampling=SamplingParams(temperature=1.0), max_action_tokens=8, max_turns=3, seed=4,
                        context_budget_mb=context_budget_mb)
    return Rollout(Driver(engine), tok, cfg)


def step(setup, judge, overlap, timeout=300.0, speculate=False, starts=None, method="prover", config=None,
         contexts=None):
    """One step of `method`; `starts` (a list) gets, per continuation batch started, whether its group
    had ended; `contexts` (a list): the rollout keeps per-turn caches and the list gets, per release,
    the released trajectories' successes, then the rollout."""
    engine, tok, pool, vpool = setup
    ro = rollout(engine, tok, 0.0 if contexts is None else 1024.0)
    if contexts is not None:
        release = ro.release_contexts
        ro.release_contexts = lambda trajs: contexts.append([t.success for t in trajs]) or release(trajs)
    credit = make_credit(method, config or credit_config(), judge=judge, verifier=RolloutVerifier(ro, vpool),
                         seed=0)
    pipe = StepPipeline(ro, pool, credit, verify_pool=vpool if overlap else None, judge_timeout_s=timeout,
                        speculate=speculate)
    if starts is not None:
        play = ro.play

        def spy(*args, **kwargs):
            p = play(*args, **kwargs)
            add = p.add_continuations

            def add_continuations(pool, traj, turn, k, envs, on_end=None):
                g = UIDS.index(traj.uid) // G
                starts.append(all(t.finished for t in trajs_of[0][g * G:(g + 1) * G]))
                return add(pool, traj, turn, k, envs, on_end)

            p.add_continuations = add_continuations
            return p

        trajs_of = []
        start = ro.start
        ro.play = spy
        ro.start = lambda *a, **k: trajs_of.append(start(*a, **k)) or trajs_of[0]
    t0 = time.perf_counter()
    trajs, out = pipe.run(SEEDS, UIDS, G)
    if contexts is not None:
        contexts.append(ro)
    return trajs, out, time.perf_counter() - t0


def same_step(serial, s_trajs, piped, p_trajs):
    assert [t.tokens for t in s_trajs] == [t.tokens for t in p_trajs]
    assert (serial.groups is None) == (piped.groups is None)
    if serial.groups is not None:  # the enlarged groups: the same extra episodes
        assert [[t.tokens for t in g] for g in serial.groups] == [[t.tokens for t in g] for g in piped.groups]
    assert [len(a) for a in serial.advantages] == [len(a) for a in piped.advantages]
    for a, b in zip(serial.advantages, piped.advantages):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    # the spend adds the tokens of speculative continuations cancelled as wrong (none without any)
    spend = ("prover/verify_policy_tokens", "credit/extra_policy_tokens")
    drop = ("time/", "prover/cancelled_", "prover/extra_token_frac") + spend
    assert ({k: v for k, v in serial.metrics.items() if not k.startswith(drop)}
            == {k: v for k, v in piped.metrics.items() if not k.startswith(drop)})
    cancelled = piped.metrics.get("prover/cancelled_tokens", 0)
    assert cancelled == 0 or piped.metrics["prover/cancelled_continuations"] > 0
    for k in spend:
        if k in serial.metrics:
            assert piped.metrics[k] - cancelled == serial.metrics[k], k
    if "prover/extra_token_frac" in serial.metrics:
        assert piped.metrics["prover/extra_token_frac"] >= serial.metrics["prover/extra_token_frac"]


def test_pipelined_equals_serial(setup):
    s_trajs, serial, _ = step(setup, RandomJudge(), overlap=False)
    p_trajs, piped, _ = step(setup, RandomJudge(), overlap=True)
    m = serial.metrics
    assert m["prover/valid_proposals"] >= 1 and m["prover/verify_policy_tokens"] > 0
    same_step(serial, s_trajs, piped, p_trajs)
    assert {"time/rollout_s", "time/credit_wait_s", "time/judge_s", "time/verify_s"} <= set(piped.metrics)


@pytest.mark.parametrize("speculate", [False, True])
def test_kept_contexts_change_nothing_and_are_given_back(setup, speculate):
    """With per-turn caches kept (rollout.context_budget_mb), ProVer's continuations extend them
    instead of prefilling their histories (fewer prefill tokens than the step that keeps none, same
    episodes); serial and pipelined steps agree; each failure's caches are given back as it ends, the rest when the step
    ends, and the budget is whole again."""
    engine, tok, pool, vpool = setup
    plain = rollout(engine, tok)
    credit = make_credit("prover", credit_config(), judge=RandomJudge(), verifier=RolloutVerifier(plain, vpool), seed=0)
    ref_trajs, _ = StepPipeline(plain, pool, credit).run(SEEDS, UIDS, G)
    runs = []
    for overlap in (False, True):
        log = []
        trajs, out, _ = step(setup, RandomJudge(), overlap=overlap, speculate=speculate, contexts=log)
        *released, ro = log
        assert ro.context_bytes == 0 and all(c is None for t in trajs for c in t.contexts)
        assert sorted(released[-1]) == sorted(t.success for t in trajs)  # the step's end: everything
        if overlap:  # as each episode ends: the failures, one by one
            assert released[:-1] == [[False]] * sum(not t.success for t in trajs)
        assert ro.driver.stats["prefill_tokens"] < plain.driver.stats["prefill_tokens"]  # no history prefills
        runs.append((trajs, out))
    (s_trajs, serial), (p_trajs, piped) = runs
    assert serial.metrics["prover/valid_proposals"] >= 1
    same_step(serial, s_trajs, piped, p_trajs)
    assert [t.tokens for t in ref_trajs] == [t.tokens for t in s_trajs]


class Fickle(RandomJudge):
    """A local judge that changes its mind while a group plays: RandomJudge's segment (l, r) when an
    even number of failures is still playing (none: the final answer), else (l, l) (the same first
    boundary, another second one) or no proposal. As episodes end its proposals go back and forth,
    so continuations are kept, cancelled and started again from boundaries cancelled before."""

    def _propose(self, success, failures, *, max_segment_turns, rng):
        prop = super()._propose(success, failures, max_segment_turns=max_segment_turns, rng=rng)
        if prop.segment is not None and sum(f.termination is None for f in failures) % 2:
            l, r = prop.segment
            return Proposal((l, l), "ok") if r > l else Proposal(None, "no_proposal")
        return prop


@pytest.mark.parametrize("judge", [RandomJudge, Fickle])
def test_speculation_starts_continuations_early_and_changes_nothing(setup, judge):
    """Speculative judging (a local judge asked again as a group's episodes end) equals the serial
    step to the bit, whether its early proposals turn out right (random: its segment ignores the
    failures) or wrong (fickle: cancelled continuations, their seeds given back)."""
    s_trajs, serial, _ = step(setup, judge(), overlap=False)
    starts = []
    p_trajs, piped, _ = step(setup, judge(), overlap=True, speculate=True, starts=starts)
    same_step(serial, s_trajs, piped, p_trajs)
    assert serial.metrics["prover/valid_proposals"] >= 1
    assert not all(starts)  # some continuations started while their group still played
    if judge is Fickle:  # cancelled continuations had sampled tokens: the spend counts them
        assert piped.metrics["prover/cancelled_continuations"] > 0
        assert piped.metrics["prover/cancelled_tokens"] > 0  # same_step: the spend is the serial one's plus these
        assert piped.metrics["credit/extra_policy_tokens"] == piped.metrics["prover/verify_policy_tokens"]
    plain = []
    step(setup, judge(), overlap=True, starts=plain)
    assert all(plain)  # without speculation, only once the group has ended


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


def baseline_config():
    c = credit_config()
    c.spo_chain.k, c.spo_chain.interval = K, 1
    return c


@pytest.mark.parametrize("method", ["budget_grpo", "spo_chain"])
def test_baselines_overlapped_equal_serial(setup, method):
    """budget_grpo's fresh episodes (rounds of turn-0 continuations) and spo_chain's cut-point
    continuations join the step's Play as their group ends: the same episodes, advantages and metrics
    as the serial `assign`."""
    s_trajs, serial, _ = step(setup, RandomJudge(), overlap=False, method=method, config=baseline_config())
    starts = []
    p_trajs, piped, _ = step(setup, RandomJudge(), overlap=True, method=method, config=baseline_config(),
                             starts=starts)
    same_step(serial, s_trajs, piped, p_trajs)
    assert serial.metrics[EXTRA_TOKENS] > 0 and starts and all(starts)  # played in the Play, once groups ended
    assert {"time/rollout_s", "time/credit_wait_s", "time/judge_s", "time/verify_s"} <= set(piped.metrics)


@pytest.mark.parametrize("method", ["budget_grpo", "spo_chain"])
def test_baselines_sample_through_the_rollout_verifier(setup, method):
    """Budget-Matched GRPO's fresh episodes and SPO-chain's cut-point continuations are played by the
    policy itself (RolloutVerifier): real trajectories, their sampled tokens counted as extra."""
    engine, tok, pool, vpool = setup
    ro = rollout(engine, tok)
    credit = make_credit(method, baseline_config(), judge=RandomJudge(), verifier=RolloutVerifier(ro, vpool), seed=0)
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


def test_cancelled_continuations_start_again_as_they_would_have(setup):
    """Play.cancel_continuations stops a boundary's batch mid-play and gives its seeds back: started
    again, the continuations are those a fresh rollout plays from that boundary."""
    engine, tok, pool, vpool = setup
    parent = max(rollout(engine, tok).run(pool, SEEDS[:G], uids=UIDS[:G]), key=lambda t: t.num_turns)
    assert parent.num_turns >= 2
    reference = rollout(engine, tok).continue_from(parent, 1, K, vpool)
    play = rollout(engine, tok).play()
    first = play.add_continuations(vpool, parent, 1, K, list(range(K)))
    play.advance()
    with pytest.raises(ValueError, match="children of one boundary"):
        play.cancel_continuations(first[:1] + [parent])
    assert play.cancel_continuations(first) == sum(not c.finished for c in first) > 0
    assert not play.busy
    again = play.add_continuations(vpool, parent, 1, K, list(range(K)))
    later = play.add_continuations(vpool, parent, 1, K, list(range(K, 2 * K)))
    with pytest.raises(ValueError, match="not the latest"):
        play.cancel_continuations(again)
    play.run()
    assert [c.uid for c in again] == [c.uid for c in reference]
    assert [c.tokens for c in again] == [c.tokens for c in reference]
    assert [c.uid for c in later] != [c.uid for c in reference]


def test_serial_credit_is_timed_as_the_credit_wait():
    """Without overlap, the credit assigned after the rollouts (a critic's or judge's calls) is the
    step's time/credit_wait_s, not time left out of the split."""
    import types

    from prover_jax.credit.base import CreditOutput

    class Played:
        def run(self, pool, seeds, uids):
            time.sleep(0.05)
            return [types.SimpleNamespace(uid=u) for u in uids]

        def release_contexts(self, trajs):
            pass

    class SlowCredit:
        def assign(self, groups):
            time.sleep(0.2)
            return CreditOutput(advantages=[[np.zeros(1)] * len(g) for g in groups], metrics={})

    _, out = StepPipeline(Played(), None, SlowCredit()).run([1, 1], [0, 1], 2)
    assert 0.05 <= out.metrics["time/rollout_s"] < 0.2 <= out.metrics["time/credit_wait_s"] < 1.0
