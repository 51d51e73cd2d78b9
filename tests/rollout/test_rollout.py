"""Rollouts through the real engine: masks, spans and logprobs line up with the token sequence,
continuations restore env + history exactly, groups share one prefill, bad responses never crash."""

import jax
import numpy as np
import pytest

from prover_jax import envs
from prover_jax.envs.pool import EnvPool
from prover_jax.rollout import CONTEXT_LIMIT, DONE, INVALID_LIMIT, TURN_LIMIT, Rollout, RolloutConfig
from prover_jax.sampling import Driver, Engine, SamplingParams

from helpers.tiny import tiny_config, tiny_model


@pytest.fixture(scope="module")
def tokenizer(household_tokenizer):
    return household_tokenizer


@pytest.fixture(scope="module")
def model():
    return tiny_model(tiny_config(vocab_size=1024), logit_scale=30.0)  # spread logits: greedy far from ties


@pytest.fixture(scope="module")
def engine(model):
    return Engine(model, max_concurrent_decodes=4, max_prefill_length=512, max_target_length=2048)


@pytest.fixture(scope="module")
def pool():
    with EnvPool("household", 4) as p:
        yield p


def rollout(engine, tokenizer, temperature, **kw):
    kw = {"max_turns": 4, **kw}
    cfg = RolloutConfig(sampling=SamplingParams(temperature=temperature), max_action_tokens=12, **kw)
    return Rollout(Driver(engine), tokenizer, cfg)


def test_masks_spans_and_logprobs(engine, tokenizer, pool, model):
    trajs = rollout(engine, tokenizer, 1.0).run(pool, [3, 3, 4, 5])
    env = envs.make("household")
    for traj in trajs:
        assert traj.termination in (DONE, TURN_LIMIT) and traj.num_turns >= 1
        mask = np.asarray(traj.policy_mask)
        assert len(traj.tokens) == len(mask) == len(traj.logprobs)
        covered = np.zeros_like(mask)
        prev_end = 0
        for turn in traj.turns:
            assert prev_end < turn.start < turn.end  # observation / prompt tokens between turns
            covered[turn.start:turn.end] = True
            prev_end = turn.end
            assert tokenizer.decode(traj.tokens[turn.start:turn.end]) == turn.response
            assert turn.action == env.extract_action(turn.response)
        np.testing.assert_array_equal(covered, mask)  # spans partition the policy tokens
        assert np.all(np.asarray(traj.logprobs)[~mask] == 0.0) and np.all(np.asarray(traj.logprobs)[mask] <= 0)
        assert len(traj.snapshots) == traj.num_turns + 1
    # the logprobs are those of the policy over exactly this token sequence (teacher-forced forward)
    traj = trajs[0]
    tokens = np.asarray(traj.tokens)[None]
    logp = jax.nn.log_softmax(model(tokens)[0, :-1], axis=-1)
    want = np.asarray(logp)[np.arange(len(traj.tokens) - 1), tokens[0, 1:]]
    mask = np.asarray(traj.policy_mask)[1:]
    np.testing.assert_allclose(np.asarray(traj.logprobs)[1:][mask], want[mask], atol=1e-4)


def test_continue_from_reproduces_greedy(engine, tokenizer, pool):
    ro = rollout(engine, tokenizer, 0.0)
    [traj] = ro.run(pool, [7])
    assert traj.num_turns == 4
    for turn in (1, 3):
        conts = ro.continue_from(traj, turn, k=2, pool=pool)
        for c in conts:
            assert c.tokens[:traj.turns[turn].start] == traj.tokens[:traj.turns[turn].start]
            assert c.parent == (traj.uid, turn)
            assert c.tokens == traj.tokens and c.policy_mask == traj.policy_mask
            assert [t.response for t in c.turns] == [t.response for t in traj.turns]
            assert [t.observation for t in c.turns] == [t.observation for t in traj.turns]
            assert c.snapshots == traj.snapshots and c.termination == traj.termination
            np.testing.assert_allclose(c.logprobs, traj.logprobs, atol=1e-4)


def test_continuations_extend_the_kept_context(engine, tokenizer, pool):
    """With a context budget, the episode keeps its cache after every response; a continuation from
    turn t extends the cache of turn t - 1 (prefilling only the observation between them, not the
    history) and plays what the history prefill plays (greedy: same tokens, log-probs to 1e-4). The
    budget caps what is kept; released contexts give their bytes back."""
    plain = rollout(engine, tokenizer, 0.0)
    kept = rollout(engine, tokenizer, 0.0, context_budget_mb=1024)
    [a], [b] = plain.run(pool, [7]), kept.run(pool, [7])
    assert a.tokens == b.tokens and all(c is None for c in a.contexts) and plain.context_bytes == 0
    assert len(b.contexts) == b.num_turns and all(c is not None for c in b.contexts)
    assert kept.context_bytes == b.num_turns * kept._bytes_per_context
    for turn in (1, 3):
        before = (plain.driver.stats["prefill_tokens"], kept.driver.stats["prefill_tokens"])
        [ca] = plain.continue_from(a, turn, k=1, pool=pool)
        [cb] = kept.continue_from(b, turn, k=1, pool=pool)
        history, obs = a.turns[turn].start, a.turns[turn].start - a.turns[turn - 1].end
        spent = (plain.driver.stats["prefill_tokens"] - before[0], kept.driver.stats["prefill_tokens"] - before[1])
        assert spent[0] - spent[1] == history - (obs + 1)  # the context replaced the history's prefill
        assert cb.tokens == ca.tokens == a.tokens and cb.turns == ca.turns
        assert cb.contexts == [None] * cb.num_turns  # continuations keep none
        np.testing.assert_allclose(cb.logprobs, ca.logprobs, atol=1e-4)
    kept.release_contexts([b])
    assert kept.context_bytes == 0 and b.contexts == [None] * b.num_turns
    one = rollout(engine, tokenizer, 0.0, context_budget_mb=kept._bytes_per_context * 2.5 / 2 ** 20)
    [c] = one.run(pool, [7])
    assert [x is not None for x in c.contexts] == [True, True] + [False] * (c.num_turns - 2)
    with pytest.raises(ValueError, match="context_budget_mb"):
        RolloutConfig(context_budget_mb=-1)


def test_group_prefilled_once(engine, tokenizer, pool):
    ro = rollout(engine, tokenizer, 1.0, max_turns=1)
    trajs = ro.run(pool, [9, 9, 9, 9])
    opening = trajs[0].turns[0].start
    assert all(t.tokens[:opening] == trajs[0].tokens[:opening] for t in trajs)
    assert ro.driver.stats["prefill_tokens"] == opening
    assert len({tuple(t.tokens[opening:]) for t in trajs}) > 1  # 4 different samples


def test_groups_are_tasks_not_openings(engine, tokenizer):
    """searchqa tasks 2 and 322 open with the same text; each seed's episodes are still one group of
    their own, sampled as when that task plays alone (they depend on their uids only)."""
    with EnvPool("searchqa", 4) as p:
        both = rollout(engine, tokenizer, 1.0, max_turns=1).run(p, [2, 2, 322, 322], uids=[0, 1, 2, 3])
        alone = rollout(engine, tokenizer, 1.0, max_turns=1).run(p, [322, 322], uids=[2, 3])
    opening = both[0].turns[0].start
    assert both[0].tokens[:opening] == both[2].tokens[:opening]
    assert [t.tokens for t in both[2:]] == [t.tokens for t in alone]


def test_invalid_limit_cuts_the_same_episodes(engine, tokenizer, pool):
    """max_invalid=2 ends an episode, unsuccessful, at its second inadmissible action; the turns played
    until then are those the unlimited rollout plays (the limit only cuts)."""
    seeds = [3, 4, 5, 6]
    free = rollout(engine, tokenizer, 1.0, max_turns=6).run(pool, seeds)
    cut = rollout(engine, tokenizer, 1.0, max_turns=6, max_invalid=2).run(pool, seeds)
    assert sum(t.termination == INVALID_LIMIT for t in cut) >= 1  # the random policy's commands are mostly not admissible
    for f, c in zip(free, cut):
        invalid = np.cumsum([not t.valid for t in f.turns])
        if invalid[-1] >= 2:
            n = int(np.argmax(invalid >= 2)) + 1
            assert c.termination == INVALID_LIMIT and not c.success and c.num_turns == n
        else:
            assert c.termination == f.termination and c.num_turns == f.num_turns
        assert [t.response for t in c.turns] == [t.response for t in f.turns[:c.num_turns]]
    with pytest.raises(ValueError, match="rollout.max_invalid_actions"):
        RolloutConfig(max_invalid=-1)


@pytest.mark.parametrize("bad", [dict(max_turns=0), dict(max_turns=-2), dict(max_action_tokens=0)])
def test_config_refuses_limits_below_one(bad):
    """A turn limit below 1 would still play one turn (the limit is checked after it); a response
    budget below 1 cannot sample: both are refused, naming the setting."""
    with pytest.raises(ValueError, match=f"rollout.{next(iter(bad))} must be >= 1"):
        RolloutConfig(**bad)


def test_context_limit(model, tokenizer, pool):
    small = Engine(model, max_concurrent_decodes=2, max_prefill_length=512, max_target_length=700)
    trajs = rollout(small, tokenizer, 1.0, max_turns=30).run(pool, [1, 2])
    for t in trajs:  # every response was sampled with room for max_action_tokens; nothing overflows
        assert t.termination == CONTEXT_LIMIT and not t.success and len(t.tokens) <= 700
        assert t.num_turns > 1 and all(turn.start + 12 <= 700 for turn in t.turns)


@pytest.mark.parametrize("name", ["household", "shop", "searchqa"])
def test_expert_through_the_loop(name, tokenizer):
    """The expert plays every family through the same loop (SFT demonstrations): it succeeds, and its
    continuations from a middle turn are token-identical replays."""
    with EnvPool(name, 3) as p:
        ro = Rollout(None, tokenizer, RolloutConfig())
        trajs = ro.run(p, [0, 1, 2], expert=True)
        assert all(t.success and t.termination == DONE for t in trajs)
        assert all(turn.valid for t in trajs for turn in t.turns)
        t = trajs[0]
        [c] = ro.continue_from(t, t.num_turns // 2, k=1, pool=p, expert=True)
        assert c.tokens == t.tokens and c.success


def test_system_prompt_override(tokenizer, pool):
    """RolloutConfig.system_prompt replaces the family's system prompt in the opening, and nothing else:
    the episode after the opening is token-identical."""
    short = "Reply with one command."
    base = Rollout(None, tokenizer, RolloutConfig()).run(pool, [6], expert=True)[0]
    over = Rollout(None, tokenizer, RolloutConfig(system_prompt=short)).run(pool, [6], expert=True)[0]
    text = tokenizer.decode(over.tokens)
    assert text.startswith(f"<|im_start|>system\n{short}<|im_end|>")
    assert pool.prompt.system not in text and pool.prompt.system in tokenizer.decode(base.tokens)
    cut = base.turns[0].start - over.turns[0].start
    assert cut > 0 and base.tokens[base.turns[0].start:] == over.tokens[over.turns[0].start:]
    assert over.success


@pytest.mark.parametrize("name", ["household", "shop", "searchqa"])
def test_bad_responses_give_feedback(name):
    bad = ["", "no tags at all", "<action></action>", "<search></search>",
           "<action>" + "x" * 5000 + "</action>", "<action>gö to cäbinet 1 ☃</action>",
           "<search>" + "y " * 3000 + "</search>", "<answer>a</answer><search>b</search>", "\x00\x07"]
    with EnvPool(name, 1) as p:
        p.reset([0])
        for response in bad:
            step = p.act({0: response})[0]
            assert step.info["valid"] is False and not step.done and step.reward == 0.0, response[:40]
            assert isinstance(step.observation, str) and step.observation
