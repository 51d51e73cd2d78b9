"""The env hooks the turn critics ask for (`Env.privileged_facts`, `Env.reference_policy`): the built-in
families answer with their own facts and policies, a new family written in one place is accepted by both
critics without any change to them, and an env without the hooks is refused by name."""

from __future__ import annotations

import dataclasses
import json

import httpx
import pytest

from prover_jax.credit.critic import make_critic
from prover_jax.credit.critic_llm import OpenAICritic, privileged_text
from prover_jax.credit.critic_oracle import OracleCritic
from prover_jax.envs import Env, PromptSpec, info_dict, make, register
from prover_jax.envs.searchqa.kb import KnowledgeBase
from prover_jax.envs.testing import dp, mix
from prover_jax.training.config import default_config

from helpers.credit import play_actions

LOCAL = "http://localhost:8000/v1"
SOLUTION = "Reference solution (the expert's actions from the start; other routes may be fine): "
SMALL = dict(task_type="pick_and_place", max_turns=8, expert_turns=(3, 6), num_receptacles=4, num_objects=0,
             num_decoys=1)


# ------------------------------------------------------------------------------------------ a new family

@dataclasses.dataclass(frozen=True)
class Cell:
    """The state of a walk: task seed, position, turns taken, whether it ended and how."""

    seed: int
    pos: int = 0
    turn: int = 0
    done: bool = False
    success: bool = False


class Walk(Env):
    """Walk from cell 0 to cell `length` within `max_turns` moves, one cell left or right per turn."""

    name = "test_hooks_plain"

    def __init__(self, length: int = 2, max_turns: int = 4):
        self.length, self.max_turns = int(length), int(max_turns)
        self.state: Cell | None = None

    @property
    def prompt(self) -> PromptSpec:
        return PromptSpec(system="Walk right until you reach the goal.", max_turns=self.max_turns)

    def reset(self, seed: int) -> tuple[str, dict]:
        self.state = Cell(int(seed))
        return self.observe(True)

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        s, valid = self.state, action in ("left", "right")
        pos = min(max(s.pos + (1 if action == "right" else -1 if action == "left" else 0), 0), self.length)
        success = pos == self.length
        self.state = Cell(s.seed, pos, s.turn + 1, success or s.turn + 1 >= self.max_turns, success)
        obs, info = self.observe(valid)
        return obs, float(success), self.state.done, info

    def observe(self, valid: bool) -> tuple[str, dict]:
        s = self.state
        return f"You are at cell {s.pos}.", info_dict(success=s.success, valid=valid, admissible=["left", "right"])

    def snapshot(self) -> Cell:
        return self.state

    def restore(self, snapshot: Cell) -> None:
        self.state = snapshot

    def expert_action(self) -> str | None:
        return None if self.state.done else "right"


class HookedWalk(Walk):
    """The walk with both critic hooks: all a new family needs for the critics."""

    name = "test_hooks_walk"

    def privileged_facts(self, seed: int) -> list[str]:
        return [f"Task {seed}: the goal is cell {self.length}.", "Moving left never helps."]

    def reference_policy(self, eps: float):
        def walk(obs: str, info: dict) -> dict[str, float]:
            return mix(self.expert_action(), info["admissible"], eps)
        return walk


def built_walk(**kwargs) -> Walk:
    """A factory (not a class): only the built env can say that it offers no hook."""
    return Walk(**kwargs)


register("test_hooks_walk")(HookedWalk)
register("test_hooks_plain")(Walk)
register("test_hooks_built")(built_walk)


def reply(content):
    return {"id": "c1", "object": "chat.completion", "created": 0, "model": "m", "usage": {
        "prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}, "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}]}


def llm(env_name, env_kwargs=None, answer=None):
    """The LLM critic over a mock transport (no network); `answer`: the labels every request gets."""
    requests = []

    def handle(request: httpx.Request) -> httpx.Response:
        requests.append(json.loads(request.content))
        labels = [{"turn": t, "label": w} for t, w in enumerate(answer or [])]
        return httpx.Response(200, json=reply(json.dumps({"labels": labels})))

    critic = OpenAICritic(env_name, env_kwargs, model="m", base_url=LOCAL, cache=False, max_retries=0,
                          http_client=httpx.Client(transport=httpx.MockTransport(handle)), sleep=lambda s: None)
    return critic, requests


def test_a_new_family_in_one_place_is_accepted_by_both_critics():
    env = make("test_hooks_walk")
    traj, _ = play_actions(env, 5, ["right", "left", "right", "right"])
    assert traj.success and traj.num_turns == 4

    oracle = OracleCritic("test_hooks_walk", {}, eps=0.2)
    v = oracle.values(traj)
    obs, info = env.reset(5)
    assert v[0] == pytest.approx(dp.success_probability(env, env.reference_policy(0.2), env.snapshot(), obs, info))
    assert v[-1] == 1.0 and oracle.label([traj]) == [[1, -1, 1, 1]] and oracle.dropped == 0

    critic, requests = llm("test_hooks_walk", {}, answer=["good", "bad", "good", "good"])
    facts = "Task 5: the goal is cell 2.\nMoving left never helps."
    assert critic.privileged(5) == f"{facts}\n{SOLUTION}0. right; 1. right"
    assert critic.label([traj]) == [[1, -1, 1, 1]]
    [request] = requests
    assert "PRIVILEGED INFORMATION" in request["messages"][1]["content"]
    assert "Task 5: the goal is cell 2." in request["messages"][1]["content"]
    sec = default_config().credit.critic
    sec.update(name="oracle")
    assert isinstance(make_critic(sec, "test_hooks_walk", {"length": 3}), OracleCritic)


@pytest.mark.parametrize("name", ["test_hooks_plain", "test_hooks_built"])
def test_an_env_without_the_hooks_is_refused_by_name(name):
    with pytest.raises(ValueError, match=rf"credit.critic.name='oracle' needs .*reference_policy.*'{name}'"):
        OracleCritic(name, {})
    with pytest.raises(ValueError, match=rf"credit.critic.name='openai' needs .*'{name}'.*no privileged facts"):
        llm(name, {})
    sec = default_config().credit.critic
    sec.update(name="oracle")
    with pytest.raises(ValueError, match=f"'{name}'"):
        make_critic(sec, name, {})
    with pytest.raises(ValueError, match="'test_hooks_plain'.*no privileged facts"):
        privileged_text(make(name), 0)
    assert make(name).reference_policy(0.1) is None


# ---------------------------------------------------------------------------------- the built-in families

def write_webshop(root) -> str:
    """Four products in WebShop's file formats, one human goal each."""
    products, attrs, human = [], {}, {}
    kinds = [("Organic Green Tea Bags", "green tea", {"Size": ["20 Count", "100 Count"]}, "caffeine free"),
             ("Velvet Throw Pillow Cover", "pillow covers", None, "hidden zipper")]
    for i in range(4):
        title, query, opts, attribute = kinds[i % 2]
        asin = f"B0HOOK{i:04d}"
        products.append({"asin": asin, "name": f"{title} {i}", "category": query.split()[-1], "query": query,
                         "product_category": "Home", "pricing": f"${12 + 3 * i}.99", "small_description": ["Soft"],
                         "full_description": title, "customization_options": None if opts is None else {
                             k: [{"value": v, "image": ""} for v in vs] for k, vs in opts.items()}})
        attrs[asin] = {"attributes": [attribute], "instruction": f"i want {query}",
                       "instruction_attributes": [attribute]}
        human[asin] = [{"asin": asin, "instruction": f"i need {query}, {attribute}.",
                        "instruction_attributes": [attribute],
                        "instruction_options": [vs[i % len(vs)].lower() for vs in (opts or {}).values()]}]
    for name, data in (("items_shuffle_1000.json", products), ("items_ins_v2_1000.json", attrs),
                       ("items_human_ins.json", human)):
        (root / name).write_text(json.dumps(data))
    return str(root)


def write_qa(root) -> dict:
    """searchqa_data kwargs: four questions of a small knowledge base and its passages, one held out."""
    kb = KnowledgeBase(5, n_countries=4, n_cities=10, n_persons=30, n_orgs=8, n_works=10)
    (root / "c.jsonl").write_text("".join(json.dumps({"id": str(i), "contents": c}) + "\n"
                                          for i, c in enumerate(kb.passages)))
    (root / "q.jsonl").write_text("".join(json.dumps({"question": kb.question(s).text, "golden_answers": list(
        kb.question(s).golden_answers)}) + "\n" for s in range(4)))
    return dict(qa_path=str(root / "q.jsonl"), corpus_path=str(root / "c.jsonl"), eval_fraction=0.25)


# (family, env kwargs, task seed) -> the lines its privileged information held before the families owned it
FACTS = {
    ("household", "small", 0): [
        "Goal: put some knife on fridge 1. (task type pick_and_place)",
        "Objects of the target type 'knife': knife 1 (in/on cabinet 1)",
        "Lookalike decoys (butterknife; using them fails the task): butterknife 1 (in/on cabinet 1)",
        "Target receptacle: fridge 1"],
    ("household", "default", 3): [
        "Goal: clean some butterknife and put it in garbagecan 1. (task type pick_clean_then_place)",
        "Objects of the target type 'butterknife': butterknife 1 (in/on microwave 1)",
        "Lookalike decoys (knife; using them fails the task): knife 1 (in/on cabinet 1), knife 2 (in/on countertop 1)",
        "Target receptacle: garbagecan 1"],
    ("shop", "small", 2): [
        "Instruction: i need a bookshelf that is industrial style with color: walnut, and price lower than 80.00 "
        "dollars",
        "Target product: B00D7NGXRU (Belcastro Bookshelf, 5 Tier, Easy Assembly)",
        "Required attributes: industrial style", "Required options: walnut", "Price must be below: 80.00"],
    ("shop", "small", -1): [
        "Instruction: i need wireless earbuds that are charging case with color: black, and price lower than 130.00 "
        "dollars", "Target product: B0CX1J5M5R (Talvik Wireless Earbuds, Ipx5 Waterproof, Charging Case)",
        "Required attributes: charging case", "Required options: black", "Price must be below: 130.00"],
    ("webshop", "files", 0): [
        "Instruction: i need green tea, caffeine free, and price lower than 40.00 dollars",
        "Target product: B0HOOK0000 (Organic Green Tea Bags 0)", "Required attributes: caffeine free",
        "Required options: 20 count", "Price must be below: 40.00"],
    ("webshop", "files", -1): [
        "Instruction: i need pillow covers, hidden zipper, and price lower than 60.00 dollars",
        "Target product: B0HOOK0003 (Velvet Throw Pillow Cover 3)", "Required attributes: hidden zipper",
        "Required options: none", "Price must be below: 60.00"],
    ("searchqa", "default", 3): [
        "Question: Where was the founder of the organisation that Keifel Liken worked for born?",
        "Gold answer(s): Draefiabis", "Entities to look up, in order: Keifel Liken, Noitrei Trust, Nuegiam Tueper"],
    ("searchqa_data", "files", 0): [
        "Question: In which year was the founder of the Naekern Trust born?", "Gold answer(s): 1848"],
}
SOLUTIONS = {  # the expert's solution privileged_text appends (none: searchqa_data has no expert)
    ("household", "small", 0): "0. go to cabinet 1; 1. open cabinet 1; 2. take knife 1 from cabinet 1; "
                               "3. go to fridge 1; 4. open fridge 1; 5. put knife 1 in/on fridge 1",
    ("shop", "small", 2): "0. search[bookshelves industrial style]; 1. click[b00d7ngxru]; 2. click[walnut]; "
                          "3. click[buy now]",
    ("webshop", "files", 0): "0. search[green tea caffeine free]; 1. click[b0hook0000]; 2. click[20 count]; "
                             "3. click[buy now]",
    ("searchqa", "default", 3): "0. <search>Keifel Liken</search>; 1. <search>Noitrei Trust</search>; "
                                "2. <search>Nuegiam Tueper</search>; 3. <answer>Draefiabis</answer>",
}


@pytest.fixture(scope="module")
def kwargs_of(tmp_path_factory):
    root = tmp_path_factory.mktemp("hooks")
    files = {"webshop": dict(data_dir=write_webshop(root), eval_goals=1, train_goal_start=1),
             "searchqa_data": write_qa(root)}
    return lambda family, which: {"small": {"household": SMALL, "shop": {"max_turns": 6}}.get(family),
                                  "default": {}, "files": files.get(family)}[which]


@pytest.mark.parametrize("key", list(FACTS), ids=lambda k: f"{k[0]}-{k[1]}-{k[2]}")
def test_builtin_privileged_facts_are_the_families_own(key, kwargs_of):
    family, which, seed = key
    env = make(family, **kwargs_of(family, which))
    assert env.privileged_facts(seed) == FACTS[key]
    text = "\n".join(FACTS[key]) + (f"\n{SOLUTION}{SOLUTIONS[key]}" if key in SOLUTIONS else "")
    if key in SOLUTIONS or family == "searchqa_data":  # the whole text, the expert's solution included
        assert privileged_text(env, seed) == text
        if which != "default":  # the LLM critic accepts every family with facts and asks the env for them
            assert llm(family, kwargs_of(family, which))[0].privileged(seed) == text


# (family, env kwargs, task seed, eps) -> V(s_0) under the reference policy, and pi(. | s_0)
POLICIES = {
    ("household", "small", 0, 0.3): (0.488696862684961, {
        "go to cabinet 1": 0.75, "go to countertop 1": 0.05, "go to fridge 1": 0.05, "go to sinkbasin 1": 0.05,
        "inventory": 0.05, "look": 0.05}),
    ("shop", "small", 2, 0.2): (0.7697770472684146, {"search[bookshelves industrial style]": 1.0}),
    ("searchqa", "default", 3, 0.1): (0.8830400000000002, {
        "<search>Keifel Liken</search>": 0.92, "<search>Noitrei Trust</search>": 0.02,
        "<search>Nuegiam Tueper</search>": 0.02, "<answer>Draefiabis</answer>": 0.02,
        "<answer>unknown</answer>": 0.02}),
}


@pytest.mark.parametrize("key", list(POLICIES), ids=lambda k: k[0])
def test_builtin_reference_policies_are_the_families_own(key, kwargs_of):
    family, which, seed, eps = key
    value, first = POLICIES[key]
    env = make(family, **kwargs_of(family, which))
    policy = env.reference_policy(eps)
    obs, info = env.reset(seed)
    assert policy(obs, info) == pytest.approx(first, abs=1e-12)
    assert dp.success_probability(env, policy, env.snapshot(), obs, info) == pytest.approx(value, abs=1e-12)
    critic = OracleCritic(family, kwargs_of(family, which), eps=eps)  # the oracle asks the env for it
    assert critic.values(play_actions(critic.env, seed, [])[0])[0] == pytest.approx(value, abs=1e-12)
    if family == "shop":  # on the results page: the expert's click, eps spread over the 12 clickable buttons
        env.step(env.expert_action())
        obs, info = env.observe()
        probs = policy(obs, info)
        assert len(probs) == 12 and probs[env.expert_action()] == pytest.approx(0.8 + 0.2 / 12)
