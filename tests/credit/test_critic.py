"""The `critic` credit method: labels -> advantages, the exact-DP oracle critic, and the LLM critic driven
through the real openai client against a scripted local endpoint (httpx mock transport)."""

import glob
import json

import httpx
import numpy as np
import pytest

from prover_jax.credit import EXTRA_TOKENS, credit_class, make_credit
from prover_jax.credit.critic import METRICS, make_critic
from prover_jax.credit.critic_llm import OpenAICritic, parse_labels
from prover_jax.credit.critic_oracle import OracleCritic
from prover_jax.envs import make
from prover_jax.envs.testing import dp, mixed_policy
from prover_jax.rollout.trajectory import DONE, Trajectory, Turn
from prover_jax.training.config import default_config

from helpers.credit import play_actions

SMALL = dict(task_type="pick_and_place", max_turns=8, expert_turns=(3, 6), num_receptacles=4, num_objects=0,
             num_decoys=1)
LOCAL = "http://localhost:8000/v1"


def section(**kw):
    c = default_config().credit
    c.critic.update(kw)
    return c


# ------------------------------------------------------------------------------------ labels -> advantages

def fake_traj(num_turns, success, uid=0):
    """Prompt of 2 tokens, then per turn 2 policy tokens and (but after the last) 1 observation token."""
    t = Trajectory(env="household", seed=0, uid=uid, task="task")
    t.append([0, 0], policy=False)
    for k in range(num_turns):
        start = len(t.tokens)
        t.append([5, 5], policy=True, logprobs=[-0.1, -0.1])
        t.turns.append(Turn(start, start + 2, f"a{k}", f"a{k}", True, "obs", 0.0, "stop"))
        if k < num_turns - 1:
            t.append([1], policy=False)
    t.snapshots = [None] * (num_turns + 1)
    t.success, t.score, t.termination = success, float(success), DONE
    return t


class FakeCritic:
    def __init__(self, labels):
        self.labels, self.steps = labels, 0
        self.calls, self.cost_usd, self.dropped = 3, 0.25, 2

    def begin_step(self):
        self.steps += 1

    def label(self, group):
        return [self.labels[t.uid] for t in group]


def test_labels_become_turn_rewards_on_top_of_grpo():
    a, b, c = fake_traj(3, True, 0), fake_traj(2, False, 1), fake_traj(1, False, 2)
    d = fake_traj(2, True, 3)
    critic = FakeCritic({0: [1, -1, 0], 1: [-1, 1], 2: [0], 3: [1, 1]})
    out = make_credit("critic", section(beta=0.2), critic=critic).assign([[a, b], [c, d]])
    # group 1: R = (1, 0) -> A = (0.5, -0.5); group 2: R = (0, 1) -> A = (-0.5, 0.5)
    # tokens: prompt 0 0 | turn 0: p p | obs | turn 1: p p | obs | turn 2: p p
    np.testing.assert_allclose(out.advantages[0][0], [0, 0, .7, .7, 0, .3, .3, 0, .5, .5], atol=1e-7)
    np.testing.assert_allclose(out.advantages[0][1], [0, 0, -.7, -.7, 0, -.3, -.3], atol=1e-7)
    np.testing.assert_allclose(out.advantages[1][0], [0, 0, -.5, -.5], atol=1e-7)
    np.testing.assert_allclose(out.advantages[1][1], [0, 0, .7, .7, 0, .7, .7], atol=1e-7)
    assert all(x.dtype == np.float32 for g in out.advantages for x in g)
    m = out.metrics
    assert critic.steps == 1 and set(METRICS) <= set(m) and m[EXTRA_TOKENS] == 0
    assert m["critic/turns"] == 8 and m["critic/good_frac"] == 4 / 8 and m["critic/bad_frac"] == 2 / 8
    assert (m["critic/calls"], m["critic/cost_usd"], m["critic/dropped"]) == (3, 0.25, 2)
    # beta = 0: plain GRPO
    base = make_credit("grpo", section()).assign([[a, b], [c, d]]).advantages
    zero = make_credit("critic", section(beta=0.0), critic=critic).assign([[a, b], [c, d]]).advantages
    for g in range(2):
        for i in range(2):
            np.testing.assert_array_equal(zero[g][i], base[g][i])
    needs = credit_class("critic").needs(section(), groups=2, group_size=2)
    assert needs.critic and not needs.judge and not needs.verifier and needs.metrics == METRICS
    with pytest.raises(ValueError, match="label each of the 3 turns"):
        make_credit("critic", section(), critic=FakeCritic({0: [1, 1], 1: [0, 0]})).assign([[a, b]])
    with pytest.raises(ValueError, match="needs a critic"):
        make_credit("critic", section())


# --------------------------------------------------------------------------------------------- oracle

def expert_path(env, seed, n):
    obs, info = env.reset(seed)
    out = []
    for _ in range(n):
        out.append(info["expert"])
        obs, _, done, info = env.step(out[-1])
    return out


def test_oracle_labels_follow_exact_dp_values():
    eps = 0.3
    env = make("household", **SMALL)
    # task 0: the expert opens the fridge and would put the knife in it; closing the fridge instead latches
    # it for good (an irreversible pivot), then the agent looks around until the turn limit (8 turns)
    actions = expert_path(env, 0, 5) + ["close fridge 1", "look", "look"]
    traj, seen = play_actions(env, 0, actions)
    assert traj.num_turns == 8 and traj.termination == DONE and not traj.success
    assert env.snapshot().locked  # the latch is shut
    policy, memo = mixed_policy(eps), {}
    v = [dp.success_probability(env, policy, traj.snapshots[t], *seen[t], _memo=memo) for t in range(8)] + [0.0]
    critic = make_critic(section(name="oracle", oracle_eps=eps).critic, "household", SMALL)
    assert isinstance(critic, OracleCritic) and critic.eps == eps and critic.max_states == 200_000
    [labels] = critic.label([traj])
    expected = [int(np.sign(round(v[t + 1] - v[t], 12))) for t in range(8)]
    assert labels == expected
    assert v[1] > v[0] and labels[0] == 1  # the expert's first move raises V: good
    assert v[5] > 0 and v[6] == 0.0 and labels[5] == -1  # closing the target fridge: bad
    assert labels[6:] == [0, 0]  # nothing changes after the failure
    assert sum(x == 1 for x in labels[:5]) >= 3
    assert critic.dropped == 0 and critic.dp_states > 0 and critic.calls == 0

    # the expert's own successful run: every turn gets closer to the goal
    good, _ = play_actions(env, 0, expert_path(env, 0, 6), uid=1)
    assert good.success and critic.label([good]) == [[1] * 6]

    # memoised over the step: labelling again expands no new state; begin_step clears the memo
    states = critic.dp_states
    critic.label([traj, good])
    assert critic.dp_states == states
    critic.begin_step()
    assert critic.dp_states == 0 and not critic.memo


def test_oracle_drops_what_it_cannot_value():
    env = make("household", **SMALL)
    traj, _ = play_actions(env, 0, expert_path(env, 0, 5) + ["close fridge 1", "look", "look"])
    tiny = OracleCritic("household", SMALL, eps=0.3, max_states=3)  # the DP budget runs out at once
    [labels] = tiny.label([traj])
    assert labels == [0] * 8 and tiny.dropped == 8 and tiny.dp_states == 3
    other = OracleCritic("household", {**SMALL, "num_receptacles": 5})  # not the rollout's env: no replay
    assert other.label([traj]) == [[0] * 8] and other.dropped == 8


def test_oracle_shop_search_is_good_and_a_wrong_purchase_bad():
    env = make("shop", max_turns=6)
    obs, info = env.reset(2)
    search = env.expert_action()
    env.step(search)
    _, info = env.observe()
    target = env.expert_action()  # click the target product
    wrong = next(a for a in info["admissible"] if a.startswith("click[b0") and a != target)  # another product
    traj, _ = play_actions(env, 2, [search, wrong, "click[buy now]"])
    right, _ = play_actions(env, 2, [search, target], uid=1)
    assert traj.termination == DONE and not traj.success
    critic = OracleCritic("shop", {"max_turns": 6}, eps=0.2)
    # the expert's query is the reference policy's only search: neutral; opening the wrong product and
    # buying it are bad, opening the target good
    assert critic.label([traj, right]) == [[0, -1, -1], [0, 1]]


def test_oracle_searchqa_hops_are_good_and_a_wrong_answer_bad():
    env = make("searchqa")
    q = env.kb.question(3)
    hops = [f"<search>{h}</search>" for h in q.hops]
    assert len(hops) == 3
    wander, _ = play_actions(env, 3, [hops[0], "<search>weather today</search>", hops[1], "<answer>Paris</answer>"])
    solve, _ = play_actions(env, 3, hops + [f"<answer>{q.golden_answers[0]}</answer>"], uid=1)
    assert solve.success and not wander.success
    # with turns to spare, a useless search leaves V unchanged under the reference policy: 0
    assert OracleCritic("searchqa", {}).label([wander, solve]) == [[1, 0, 1, -1], [1, 1, 1, 1]]


def test_oracle_refuses_envs_without_exact_dp():
    for env in ("alfworld", "webshop", "searchqa_data"):
        with pytest.raises(ValueError, match=f"credit.critic.name='oracle'.*'{env}'"):
            make_critic(section(name="oracle").critic, env, {})
    with pytest.raises(ValueError, match="credit.critic.name='bogus'"):
        make_critic(section(name="bogus").critic, "household", SMALL)


# ----------------------------------------------------------------------------------------- LLM critic

def reply(content, usage=(1000, 100)):
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "critic-model",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                      "total_tokens": usage[0] + usage[1]}}


def labels_json(*words):
    return json.dumps({"labels": [{"turn": t, "label": w} for t, w in enumerate(words)]})


class Server:
    """Scripted endpoint: each entry is a response body (dict), an int HTTP status, or a function of the
    request body returning one; the last one repeats forever. Records every request body."""

    def __init__(self, *script):
        self.script, self.requests = list(script), []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(json.loads(request.content))
        item = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if callable(item):
            item = item(self.requests[-1])
        if isinstance(item, int):
            return httpx.Response(item, json={"error": {"message": f"status {item}", "type": "x"}})
        return httpx.Response(200, json=item)


def llm_critic(server, **kw):
    kw = {"model": "critic-model", "base_url": LOCAL, "max_retries": 1, "backoff_base_s": 0.0,
          "usd_per_m_input": 2.0, "usd_per_m_output": 8.0, "cache": False, **kw}
    return OpenAICritic("household", SMALL, http_client=httpx.Client(transport=httpx.MockTransport(server)),
                        sleep=lambda s: None, **kw)


@pytest.fixture(scope="module")
def runs():
    env = make("household", **SMALL)
    a, _ = play_actions(env, 0, expert_path(env, 0, 2) + ["examine cabinet 1"], uid=0)
    b, _ = play_actions(env, 0, ["look", "go to cabinet 1"], uid=1)
    return a, b


def test_llm_critic_parses_structured_labels(runs):
    a, _ = runs
    server = Server(reply(labels_json("good", "good", "bad")))
    critic = llm_critic(server)
    assert critic.label([a]) == [[1, 1, -1]]
    assert (critic.calls, critic.cached, critic.dropped) == (1, 0, 0)
    assert (critic.input_tokens, critic.output_tokens) == (1000, 100)
    assert critic.cost_usd == pytest.approx(1000 / 1e6 * 2.0 + 100 / 1e6 * 8.0)
    [req] = server.requests
    assert req["model"] == "critic-model" and "tools" not in req and req["temperature"] == 0.0
    fmt = req["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"]["required"] == ["labels"]
    system, user = req["messages"][0]["content"], req["messages"][1]["content"]
    assert '"label": "good"' in system
    assert "PRIVILEGED INFORMATION" in user and "Goal: put" in user and "Target receptacle: fridge 1" in user
    assert "Reference solution" in user and "4. open fridge 1" in user  # the expert's plan, from the start
    assert "[turn 2] (valid) action: examine cabinet 1" in user and "Label each of the 3 turns 0..2" in user
    assert a.task[:40] in user


def test_llm_critic_plain_json_fallback_and_partial_replies(runs):
    a, _ = runs
    fenced = "Here you go:\n```json\n" + json.dumps([{"turn": 0, "label": "Bad"}, {"turn": "2", "label": "good"}]) \
             + "\n```"
    server = Server(reply(fenced))
    critic = llm_critic(server, structured=False, temperature=-1.0)
    assert critic.label([a]) == [[-1, 0, 1]] and critic.dropped == 1  # turn 1 was not labelled
    assert "response_format" not in server.requests[0] and "temperature" not in server.requests[0]
    assert parse_labels('{"labels": [{"turn": 0, "label": "good"}]} trailing', 2) == ([1, 0], 1)
    assert parse_labels('[{"turn": 5, "label": "good"}]', 2) is None  # no usable label


@pytest.mark.parametrize("answer", [reply("not json at all {"), reply('{"labels": "good"}'),
                                    reply(json.dumps({"labels": [{"turn": 0, "label": "great"}]})),
                                    reply(None), 500, 400])
def test_llm_critic_failures_are_dropped_not_raised(runs, answer):
    a, b = runs
    server = Server(answer)
    critic = llm_critic(server)
    assert critic.label_many([[a], [b]]) == [[[0, 0, 0]], [[0, 0]]]
    assert critic.dropped == 5 and critic.calls == 2
    assert len(server.requests) == (4 if answer == 500 else 2)  # 5xx retried once


def test_llm_critic_cache(runs, tmp_path):
    a, b = runs
    def answer(request):  # the calls run concurrently: answer by the trajectory asked about
        three = "Label each of the 3 turns" in request["messages"][1]["content"]
        return reply(labels_json("good", "bad", "bad") if three else labels_json("bad", "good"))

    server = Server(answer)
    critic = llm_critic(server, cache=True, workdir=str(tmp_path))
    assert critic.label([a, b]) == [[1, -1, -1], [-1, 1]] and critic.calls == 2
    files = glob.glob(str(tmp_path / "critic_cache" / "*" / "*.json"))
    assert len(files) == 2
    critic.begin_step()
    assert critic.label([a, b]) == [[1, -1, -1], [-1, 1]]  # served from disk: no new request
    assert len(server.requests) == 2 and (critic.calls, critic.cached, critic.input_tokens) == (0, 2, 0)
    # a resumed run with no budget left still reads its answers from disk
    resumed = llm_critic(server, cache=True, workdir=str(tmp_path), max_calls_per_step=0)
    assert resumed.label([a]) == [[1, -1, -1]] and len(server.requests) == 2
    # a malformed reply is not cached: the next step asks again
    bad = Server(reply("garbage"))
    other = llm_critic(bad, cache=True, workdir=str(tmp_path / "w2"))
    other.label([a])
    other.label([a])
    assert len(bad.requests) == 2 and not glob.glob(str(tmp_path / "w2" / "critic_cache" / "*" / "*.json"))


def test_llm_critic_budget(runs):
    a, b = runs
    server = Server(reply(labels_json("good", "good", "good")))
    critic = llm_critic(server, max_calls_per_step=1)
    out = make_credit("critic", section(beta=0.5), critic=critic).assign([[a, b]])
    assert len(server.requests) == 1  # the budget goes to the trajectories in order
    m = out.metrics
    assert m["critic/calls"] == 1 and m["critic/dropped"] == 2 and m["critic/good_frac"] == 3 / 5
    # R = (0, 0): A^GRPO = 0; only the labelled trajectory's turns carry +beta
    np.testing.assert_allclose(out.advantages[0][0][np.asarray(a.policy_mask)], [0.5, 0.5, 0.5])
    np.testing.assert_array_equal(out.advantages[0][1], 0.0)
    # the next step (assign calls begin_step) has a fresh budget
    server.script = [reply(labels_json("bad", "bad", "bad"))]
    assert make_credit("critic", section(), critic=critic).assign([[a]]).metrics["critic/calls"] == 1


def test_make_llm_critic_from_config(monkeypatch, tmp_path):
    monkeypatch.delenv("PROVER_CRITIC_KEY", raising=False)
    cfg = section(name="openai")
    cfg.critic.openai.api_key_env = "PROVER_CRITIC_KEY"
    with pytest.raises(ValueError, match="PROVER_CRITIC_KEY"):
        make_critic(cfg.critic, "household", SMALL, str(tmp_path))
    with pytest.raises(ValueError, match="credit.critic.name='openai'.*'alfworld'"):
        make_critic(cfg.critic, "alfworld", {}, str(tmp_path))
    monkeypatch.setenv("PROVER_CRITIC_KEY", "sk-test")
    critic = make_critic(cfg.critic, "household", SMALL, str(tmp_path))
    assert isinstance(critic, OpenAICritic) and critic.model == cfg.critic.openai.model
    assert critic.cache is not None and critic.cache.root.endswith("critic_cache")
    assert critic.max_calls_per_step == cfg.critic.openai.max_calls_per_step
