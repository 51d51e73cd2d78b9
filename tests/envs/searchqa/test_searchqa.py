"""Tests of the `searchqa` family (generated KB); `searchqa_data` is in test_searchqa_data.py."""

from __future__ import annotations

import collections
import pickle
import random
import time

import pytest

from prover_jax.envs import make
from prover_jax.envs.searchqa import (SearchQAState, exact_match, find_blocks, format_information, normalize_answer,
                                      token_f1)
from prover_jax.envs.searchqa.kb import _TEMPLATES, KnowledgeBase
from prover_jax.envs.testing import dp


def run_expert(env, seed):
    obs, info = env.reset(seed)
    turns = []
    while True:
        action = env.expert_action()
        obs, reward, done, info = env.step(action)
        turns.append((action, obs))
        if done:
            return reward, info, turns


def test_prompt_spec_and_registry():
    env = make("searchqa")
    spec = env.prompt
    assert spec.stop_strings == ("</search>", "</answer>")
    assert spec.max_turns == 10 and spec.show_admissible is False
    assert "<search>" in spec.system and "<answer>" in spec.system and "<information>" in spec.system
    _, info = env.reset(0)
    assert info["admissible"] is None and info["valid"] and not info["success"]


def test_kb_and_questions_are_deterministic():
    a, b, c = KnowledgeBase(0), KnowledgeBase(0), KnowledgeBase(1)
    assert a.passages == b.passages and a.passages != c.passages
    assert [a.question(s) for s in range(50)] == [b.question(s) for s in range(50)]
    assert len(a.passages) == len(a.passage_of) < 3000
    assert all(p.isascii() and p.startswith('"') for p in a.passages)
    e1, e2 = make("searchqa"), make("searchqa")
    for seed in range(20):
        assert e1.reset(seed) == e2.reset(seed)
        assert e1.step("<search>capital city</search>") == e2.step("<search>capital city</search>")
    texts = {a.question(s).text for s in range(100)}
    assert len(texts) > 80


def test_distractors_share_name_parts():
    kb = KnowledgeBase(0)
    firsts = collections.Counter(p.name.split()[0] for p in kb.persons)
    lasts = collections.Counter(p.name.split()[1] for p in kb.persons)
    assert max(firsts.values()) >= 3 and max(lasts.values()) >= 3
    names = [c.name for c in kb.cities]
    near = sum(1 for x in names for y in names
               if x < y and len(x) == len(y) and sum(p != q for p, q in zip(x, y)) == 1)
    assert near >= 3


@pytest.mark.parametrize("kb_seed,n_seeds", [(0, 300), (1, 60), (7, 60)])
def test_expert_solves_every_seed(kb_seed, n_seeds):
    env = make("searchqa", kb_seed=kb_seed)
    hop_counts, templates = collections.Counter(), set()
    for seed in range(n_seeds):
        reward, info, turns = run_expert(env, seed)
        q = env.question_record()
        assert reward == 1.0 and info["success"] and info["score"] == 1.0, (seed, q, turns)
        assert len(turns) == len(q.hops) + 1
        hop_counts[len(q.hops)] += 1
        templates.add(q.template)
    assert set(hop_counts) == {1, 2, 3}
    if n_seeds >= 300:
        assert templates == set(_TEMPLATES)


def test_each_hop_passage_is_retrieved_and_names_the_next_hop():
    env = make("searchqa", kb_seed=0)
    kb, index = env.kb, env.index
    for name, doc in kb.passage_of.items():
        assert index.search(name, 3)[0] == doc, name
    for seed in range(200):
        q = kb.question(seed)
        for i, hop in enumerate(q.hops):
            top = [kb.passages[j] for j in index.search(hop, 3)]
            own = kb.passages[kb.passage_of[hop]]
            assert own in top
            following = q.hops[i + 1] if i + 1 < len(q.hops) else q.golden_answers[0]
            assert following in own.split("\n", 1)[1], (q, hop, own)
        first = kb.passages[kb.passage_of[q.hops[0]]]
        assert len(q.hops) == 1 or not any(g in first for g in q.golden_answers)


def test_information_format():
    env = make("searchqa")
    env.reset(0)
    obs, reward, done, info = env.step("<search>Riston</search>")
    assert obs.startswith("<information>Doc 1(Title: \"") and obs.endswith("</information>")
    assert obs.count("\nDoc ") == 2 and "\nDoc 2(Title: " in obs and "\nDoc 3(Title: " in obs
    assert info["valid"] and not done and reward == 0.0
    expected = '<information>Doc 1(Title: "T") line one\nline two</information>'
    assert format_information(['"T"\nline one\nline two']) == expected
    obs, *_ = env.step("<search>zzqx wwvy</search>")
    assert obs == "<information>No documents matched the query.</information>"


def test_normalisation_and_exact_match():
    assert normalize_answer("  The  Orlan-Guild! ") == "orlanguild"
    assert normalize_answer("An Apple, a Pear and THE end.") == "apple pear and end"
    assert normalize_answer("theatre") == "theatre"
    assert exact_match("the Orlan Guild", ["Orlan Guild"])
    assert exact_match("ORLAN   guild.", ["Orlan Guild"])
    assert exact_match("Kingdom of Arvel", ["Arvel", "Kingdom of Arvel"])
    assert exact_match("arvel", ["Arvel", "Kingdom of Arvel"])
    assert not exact_match("Arvel City", ["Arvel"])
    assert not exact_match("1843.5", ["1843"])
    assert not exact_match("", ["x"])
    precision, recall = 2 / 4, 1.0  # "orlan guild of arvel" vs "orlan guild"
    assert token_f1("the Orlan Guild of Arvel", ["Orlan Guild"]) == pytest.approx(
        2 * precision * recall / (precision + recall))


def test_answer_rewards_alias_and_wrong_answers():
    env = make("searchqa")
    seed = next(s for s in range(100) if len(env.kb.question(s).golden_answers) == 2)
    q = env.kb.question(seed)
    env.reset(seed)
    _, reward, done, info = env.step(f"<answer> the {q.golden_answers[1].upper()}. </answer>")
    assert done and reward == 1.0 and info["success"]
    env.reset(seed)
    _, reward, done, info = env.step("<answer>Nowhere</answer>")
    assert done and reward == 0.0 and not info["success"] and info["valid"]
    obs, reward, done, info = env.step("<answer>x</answer>")
    assert done and not info["valid"] and reward == 0.0


def test_extract_action():
    env = make("searchqa")
    assert env.extract_action("I think.\n<search> Orlan Guild </search>") == "<search> Orlan Guild </search>"
    assert env.extract_action("<think>hmm</think><answer>1843</answer>") == "<answer>1843</answer>"
    assert env.extract_action("no tags here") is None
    assert env.extract_action("<search>unclosed") is None
    assert env.extract_action("<search>a</answer>") is None
    assert env.extract_action("<search>a<answer>b</answer>") == "<answer>b</answer>"
    both = env.extract_action("<search>a</search><answer>b</answer>")
    assert both == "<search>a</search><answer>b</answer>"
    assert find_blocks("<search>" * 50_000 + "x") == []
    start = time.perf_counter()
    env.extract_action("<search><answer>" * 50_000)
    assert time.perf_counter() - start < 1.0


BAD_ACTIONS = {
    "no block": "just thinking out loud",
    "empty query": "<search>   </search>",
    "empty answer": "<answer></answer>",
    "both tags": "<search>Riston</search><answer>Riston</answer>",
    "two searches": "<search>Riston</search><search>Ristun</search>",
    "non-ASCII": "<search>Ristön ☃</search>",
    "control": "<search>Riston\x00\x07</search>",
    "huge turn": "<search>" + "a " * 50_000 + "</search>",
    "huge query": "<search>" + "word " * 100 + "</search>",
    "markup": "<search><answer>x</answer></search>",
    "stopwords only": "<search>the a of</search>",
    "not text": None,
    "empty string": "",
}


@pytest.mark.parametrize("label", sorted(BAD_ACTIONS))
def test_bad_input_is_invalid_and_episode_continues(label):
    env = make("searchqa")
    env.reset(5)
    env.step(env.expert_action())
    before = env.snapshot()
    obs, reward, done, info = env.step(BAD_ACTIONS[label])
    assert not info["valid"] and not done and reward == 0.0 and not info["success"]
    assert obs.startswith("Invalid turn: ") and info["error"] in obs
    after = env.snapshot()
    assert after == SearchQAState(**{**before.__dict__, "turn": before.turn + 1})
    reward, info, _ = run_expert_from_here(env)
    assert reward == 1.0


def test_a_response_without_a_block_is_told_so():
    env = make("searchqa")
    env.reset(0)
    obs, _, _, info = env.step(env.extract_action("I would look up the city first."))
    assert not info["valid"] and "no well-formed <search>...</search> or <answer>...</answer> block" in obs


def run_expert_from_here(env):
    turns = []
    while True:
        obs, reward, done, info = env.step(env.expert_action())
        turns.append(obs)
        if done:
            return reward, info, turns


def test_turn_limit_truncates():
    env = make("searchqa", max_turns=3)
    env.reset(0)
    for t in range(3):
        obs, reward, done, info = env.step("<search>Riston</search>" if t else "bad")
        assert done == (t == 2) and info["truncated"] == (t == 2)
    assert not info["success"] and reward == 0.0
    obs, reward, done, info = env.step("<answer>x</answer>")
    assert done and not info["valid"]
    env = make("searchqa", max_turns=2)
    seed = next(s for s in range(100) if len(env.kb.question(s).hops) == 3)
    reward, info, turns = run_expert(env, seed)
    assert len(turns) == 2 and turns[-1][0].startswith("<answer>")


def random_action(env, rng):
    kb = env.kb
    u = rng.random()
    if u < 0.3:
        return env.expert_action()
    if u < 0.6:
        return f"<search>{rng.choice(list(kb.passage_of))}</search>"
    if u < 0.75:
        return f"<answer>{rng.choice(list(kb.passage_of))}</answer>"
    return rng.choice([a for a in BAD_ACTIONS.values() if a is not None])


def test_restore_is_exact_on_random_walks():
    env, other = make("searchqa"), make("searchqa")
    rng = random.Random(0)
    for episode in range(40):
        seed = rng.randrange(1000)
        env.reset(seed)
        walk = []
        while not env.snapshot().done:
            snap = env.snapshot()
            action = random_action(env, rng)
            walk.append((snap, action, env.step(action), env.snapshot()))
        assert len(walk) <= env.max_turns
        for snap, action, result, nxt in rng.sample(walk, min(4, len(walk))):
            hash(snap)
            assert pickle.loads(pickle.dumps(snap)) == snap
            for target in (env, other):
                target.restore(snap)
                assert target.step(action) == result and target.snapshot() == nxt


def test_dp_matches_closed_form():
    p = 0.7

    def policy_for(env):
        def policy(obs, info):
            return {env.expert_action(): p, "<answer>certainly wrong</answer>": 1 - p}
        return policy

    env = make("searchqa")
    for seed in range(12):
        obs, info = env.reset(seed)
        hops = len(env.question_record().hops)
        value = dp.success_probability(env, policy_for(env), env.snapshot(), obs, info)
        assert value == pytest.approx(p ** (hops + 1))
