"""Tests of the `shop` (generated catalogue) and `webshop` (WebShop files) environments."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from prover_jax.envs import make
from prover_jax.envs.shop import MAX_ACTION_CHARS, ShopEnv, ShopState
from prover_jax.envs.shop.catalog import INDEX_BUILDS, NO_PRICE_LIMIT, Goal
from prover_jax.envs.shop.generate import generated_catalogue
from prover_jax.envs.shop.reward import purchase_reward, type_reward
from prover_jax.envs.shop.text import ratio, token_set_ratio
from prover_jax.envs.shop.vocab import PRODUCT_TYPES
from prover_jax.envs.testing import dp


@pytest.fixture(scope="module")
def env() -> ShopEnv:
    return make("shop")


def run_expert(env: ShopEnv, seed: int) -> tuple[list[str], float, dict]:
    env.reset(seed)
    actions, done, reward, info = [], False, 0.0, {}
    while not done:
        action = env.expert_action()
        actions.append(action)
        _, reward, done, info = env.step(action)
    return actions, reward, info


def random_action(rng: random.Random, info: dict) -> str:
    choice = rng.choice(info["admissible"])
    if choice == "search[...]":
        return rng.choice(["search[black]", "search[usda organic coffee]", "search[protein bars]",
                           "search[easy assembly]", "search[nothing matches this]"])
    if rng.random() < 0.05:
        return rng.choice(["click[nowhere]", "buy it", "search[again]", ""])
    return choice


# -- protocol ----------------------------------------------------------------------------------------

def test_registered_prompt_and_first_page(env):
    assert isinstance(env, ShopEnv) and env.name == "shop"
    assert env.prompt.max_turns == 15 and "<action>" in env.prompt.system
    obs, info = env.reset(3)
    assert obs.startswith("WebShop [SEP] Instruction: [SEP] ") and obs.endswith(" [SEP] Search")
    assert env.goal.instruction in obs and "price lower than" in env.goal.instruction
    assert info == dict(success=False, score=0.0, valid=True, admissible=["search[...]"], page="search",
                        turn=0)
    assert env.extract_action("think <action>click[Buy Now]</action>") == "click[Buy Now]"
    assert make("shop", max_turns=7).prompt.max_turns == 7


def test_determinism_across_envs_and_catalogue_rebuilds(env):
    other = ShopEnv()
    for seed in range(20):
        rng_a, rng_b = random.Random(seed), random.Random(seed)
        obs_a, info_a = env.reset(seed)
        obs_b, info_b = other.reset(seed)
        for _ in range(12):
            assert (obs_a, info_a) == (obs_b, info_b)
            if info_a["page"] == "done":
                break
            obs_a, _, _, info_a = env.step(random_action(rng_a, info_a))
            obs_b, _, _, info_b = other.step(random_action(rng_b, info_b))
    first = generated_catalogue().products
    generated_catalogue.cache_clear()
    assert generated_catalogue().products == first
    assert len({env.reset(s)[0] for s in range(30)}) > 25
    assert generated_catalogue(seed=7).products != first


def test_search_index_is_built_once_per_catalogue():
    envs = [make("shop") for _ in range(3)] + [ShopEnv(catalogue_seed=11, n_products=40)]
    for e in envs:
        for seed in range(5):
            e.reset(seed)
    keys = [k for k, _ in INDEX_BUILDS]
    assert keys.count(("shop", 20240, 300)) == 1 and keys.count(("shop", 11, 40)) == 1
    assert envs[0].index is envs[1].index is envs[2].index and envs[3].index is not envs[0].index


def test_restore_is_exact_on_random_walks(env):
    rng = random.Random(0)
    for seed in range(25):
        obs, info = env.reset(seed)
        trace = []
        done = False
        while not done:
            snap = env.snapshot()
            hash(snap)
            action = random_action(rng, info)
            obs, reward, done, info = env.step(action)
            trace.append((snap, action, (obs, reward, done, info)))
        for k in rng.sample(range(len(trace)), min(4, len(trace))):
            env.reset(seed + 1000)
            env.restore(trace[k][0])
            if k:
                assert env.observe() == (trace[k - 1][2][0], {**trace[k - 1][2][3]})
            for snap, action, expected in trace[k:]:
                assert env.snapshot() == snap
                assert env.step(action) == expected


def test_expert_gets_full_reward_on_every_seed(env):
    for seed in range(300):
        actions, reward, info = run_expert(env, seed)
        assert reward == 1.0 and info["success"] and info["score"] == 1.0, (seed, actions)
        assert info["turn"] <= env.max_turns and actions[-1] == "click[buy now]"


def test_paging_and_subpages():
    env = ShopEnv(max_turns=40)
    env.reset(0)
    obs, _, _, info = env.step("search[black]")
    total = int(obs.split("(Total results: ")[1].split(")")[0])
    assert total == 50 and "click[next >]" in info["admissible"] and "click[< prev]" not in info["admissible"]
    page1 = obs
    for page in range(2, 6):
        obs, _, _, info = env.step("click[next >]")
        assert f"Page {page} (Total results: 50) [SEP] < Prev" in obs and info["valid"]
        assert sum(a.startswith("click[b0") for a in info["admissible"]) == 10
    assert "click[next >]" not in info["admissible"]
    assert not env.step("click[next >]")[3]["valid"]
    for _ in range(4):
        obs, _, _, info = env.step("click[< prev]")
    assert obs.split("\n")[-1] == page1
    products = env.catalogue.products
    asin = next(a for a in info["admissible"] if a.startswith("click[b0")
                and products[env.catalogue.by_asin[a[6:-1].upper()]].options)
    obs, _, _, info = env.step(asin.upper().replace("CLICK", "click"))
    assert info["page"] == "item" and "Buy Now" in obs
    value = f"click[{products[env.snapshot().item].options[0][1][0]}]"
    assert value in info["admissible"]
    obs, _, _, _ = env.step(value)
    assert "Selected options: " in obs
    chosen = env.snapshot().chosen
    product = env.catalogue.products[env.snapshot().item]
    obs, _, _, info = env.step("click[description]")
    assert obs.endswith(product.description)
    assert info["admissible"] == ["click[back to search]", "click[< prev]"]
    env.step("click[< prev]")
    obs, _, _, _ = env.step("click[features]")
    assert obs.endswith(" [SEP] ".join(product.bullets))
    env.step("click[< prev]")
    assert env.snapshot().chosen == chosen and env.snapshot().page == "item"
    env.step("click[< prev]")
    assert env.snapshot().page == "results" and env.snapshot().page_no == 1
    obs, _, _, info = env.step("click[back to search]")
    assert obs.endswith(" [SEP] Search") and info["admissible"] == ["search[...]"]
    obs, _, _, info = env.step("search[zzzz qqqq]")
    assert "(Total results: 0)" in obs and info["admissible"] == ["click[back to search]"]


@pytest.mark.parametrize("action, reason", [
    ("search red shoes", "malformed"), ("click[", "malformed"), ("click[nowhere]", "cannot be clicked"),
    ("x" * 5000, "limit is"), ("search[caf\u00e9 cr\u00e8me]", "non-ASCII"), ("", "empty"),
    ("   ", "empty"), ("jump[now]", "unknown action"), ("click[]", "needs an argument"),
    ("search[a\nb]", "control"), ("click[buy now]", "cannot be clicked"), (None, "no action found"),
])
def test_bad_input_is_invalid_and_keeps_state(env, action, reason):
    env.reset(5)
    before = env.snapshot()
    obs, reward, done, info = env.step(action)
    assert not info["valid"] and reason in obs and obs.startswith("Invalid action: ")
    assert (reward, done) == (0.0, False)
    assert dataclasses.replace(env.snapshot(), note="") == dataclasses.replace(before, turn=1)
    while not done:
        _, reward, done, info = env.step(env.expert_action())
    assert info["success"]


def test_search_off_the_search_page_and_non_text_are_invalid(env):
    env.reset(1)
    env.step("search[protein bars]")
    obs, _, _, info = env.step("search[coffee]")
    assert not info["valid"] and "back to search" in obs
    assert not env.step(None)[3]["valid"]
    obs, _, _, info = env.step("click[" + "a" * MAX_ACTION_CHARS + "]")
    assert not info["valid"] and f"the limit is {MAX_ACTION_CHARS}" in obs


def test_turn_limit_and_steps_after_the_end():
    env = make("shop", max_turns=4)
    env.reset(2)
    for turn in range(4):
        obs, reward, done, info = env.step("click[nowhere]")
    assert done and not info["success"] and reward == 0.0 and "Turn limit of 4" in obs
    obs, reward, done, info = env.step("click[buy now]")
    assert done and not info["valid"] and reward == 0.0 and "episode is over" in obs
    assert env.snapshot().turn == 4


# -- reward ------------------------------------------------------------------------------------------

def test_fuzzy_ratios():
    assert ratio("this is a test", "this is a test!") == 97
    assert token_set_ratio("fuzzy was a bear", "fuzzy fuzzy was a bear") == 100
    assert token_set_ratio("natural looking", "Looking-Natural") == 100
    assert token_set_ratio("clip-in", "clip in") == 100
    assert token_set_ratio("jet black", "dark brown") < 50
    assert token_set_ratio("sulfate free", "paraben free") <= 85
    assert token_set_ratio("", "anything") == 0 and ratio("", "") == 0


def test_vocabulary_keeps_wrong_choices_apart():
    for kind in PRODUCT_TYPES:
        attrs = kind.attributes
        for i, a in enumerate(attrs):
            for b in attrs[i + 1:]:
                assert token_set_ratio(a, b) <= 85 and a not in b and b not in a, (kind.noun, a, b)
        values = [(g, v) for g, vals in kind.options for v in vals]
        for g, v in values:
            for h, w in values:
                if v != w and g != "size":
                    assert token_set_ratio(w, v) <= 85, (kind.noun, v, w)
    for p in generated_catalogue().products:
        kind = next(k for k in PRODUCT_TYPES if k.query == p.query)
        texts = (p.title.lower(), " ".join(p.bullets).lower(), p.description.lower())
        assert all(v not in t for _, vals in p.options for v in vals for t in texts)
        for a in set(kind.attributes) - set(p.attributes):
            assert not any(a in t for t in texts) and all(token_set_ratio(x, a) <= 85 for x in p.attributes)


def _goal_with_options(env: ShopEnv, n: int) -> tuple[Goal, int]:
    for seed in range(500):
        goal = env.catalogue.goal(seed)
        if len(goal.options) == n:
            return goal, env.catalogue.by_asin[goal.asin]
    raise AssertionError("no such goal")


def test_reward_cases(env):
    goal, target = _goal_with_options(env, 2)
    product = env.catalogue.products[target]
    right = {g: v for (g, _), v in zip(product.options, goal.options)}
    assert purchase_reward(product, goal, right)[0] == 1.0
    n = len(goal.attributes) + len(goal.options) + 1
    for group, values in product.options:
        wrong = next((v for v in values if v != right[group]), None)
        if wrong is not None:
            assert purchase_reward(product, goal, {**right, group: wrong})[0] == pytest.approx((n - 1) / n)
    assert purchase_reward(product, goal, {})[0] == pytest.approx((n - 2) / n)
    over = dataclasses.replace(goal, price_upper=product.price - 0.01)
    assert purchase_reward(product, over, right)[0] == pytest.approx((n - 1) / n)
    assert purchase_reward(product, dataclasses.replace(goal, price_upper=NO_PRICE_LIMIT), right)[0] == 1.0
    same_type = [p for p in env.catalogue.products if p.query == product.query and p.asin != product.asin
                 and not set(goal.attributes) <= set(p.attributes)]
    for p in same_type:
        score, parts = purchase_reward(p, goal, right)
        assert parts["r_type"] == 1.0 and parts["query_match"] and score < 1.0
    other = [p for p in env.catalogue.products if p.category != product.category]
    assert max(purchase_reward(p, goal, {})[0] for p in other) < 0.5  # r_type <= 0.5, options unmet
    assert sum(type_reward(p, goal)["r_type"] == 0.0 for p in other) > len(other) // 2


def test_type_reward_rules(env):
    product = env.catalogue.products[0]
    goal = dataclasses.replace(env.catalogue.goal(0), query="q", product_category="A › B › C",
                               name="Red Widget Lamp Stand Base Cord")

    def r_type(title: str, **fields) -> float:
        fields = {**dict(query="z", product_category="X › Y"), **fields}
        return type_reward(dataclasses.replace(product, title=title, **fields), goal)["r_type"]

    assert r_type("Blue Widget Lamp") == 1.0                      # title_score 2/6 > 0.2
    assert r_type("Widget Chair") == 0.5                          # 1/6: no query/category match
    assert r_type("Widget Chair", query="q") == 1.0
    assert r_type("Widget Chair", product_category="A › B › D") == 1.0
    assert r_type("Widget Chair", product_category="A › D") == 0.5
    assert r_type("Nothing Shared", query="q") == 0.0
    many = dataclasses.replace(goal, name=" ".join(f"word{c}" for c in "abcdefghijk") + " lamp")
    assert type_reward(dataclasses.replace(product, title="Lamp", query="q"), many)["r_type"] == 0.1
    empty = dataclasses.replace(goal, name="the 2 of it")
    assert type_reward(dataclasses.replace(product, title="Anything"), empty)["title_score"] == 0.2


def test_text_substring_matches(env):
    goal, target = _goal_with_options(env, 1)
    product = env.catalogue.products[target]
    stripped = dataclasses.replace(product, attributes=())
    assert purchase_reward(stripped, goal, {})[1]["n_attr"] == len(goal.attributes)
    blank = dataclasses.replace(stripped, title=product.title.split(",")[0], bullets=(), description="")
    assert purchase_reward(blank, goal, {})[1]["n_attr"] == 0
    group = product.options[0][0]
    assert purchase_reward(blank, goal, {group: "plaid"})[1]["n_opt"] == 0
    plaid = dataclasses.replace(blank, description="A plaid pattern.")
    assert purchase_reward(plaid, goal, {group: "plaid"})[1]["n_opt"] == 1


def test_dp_success_probability_matches_closed_form(env):
    q = 0.5

    def careless_buyer(obs, info):
        action = env.expert_action()
        if info["page"] == "item" and action != "click[buy now]" and "click[buy now]" in info["admissible"]:
            return {"click[buy now]": q, action: 1 - q}
        return {action: 1.0}

    for seed in range(12):
        obs, info = env.reset(seed)
        value = dp.success_probability(env, careless_buyer, env.snapshot(), obs, info)
        assert value == pytest.approx((1 - q) ** len(env.goal.options)), seed


# -- webshop files -----------------------------------------------------------------------------------

def test_webshop_loads_real_formats_and_the_expert_succeeds(tmp_path, webshop_dir, monkeypatch):
    # 12 goals: WebShop's split (test [0, 500), train [1500, n)) needs its full list; 2 test goals here
    env = make("webshop", data_dir=str(tmp_path), eval_goals=2, train_goal_start=2)
    assert env.name == "webshop" and env.catalogue.n_goals == 12 and len(env.catalogue.products) == 12
    first = env.catalogue.products[env.catalogue.by_asin["B0TEST0000"]]
    assert first.price == 10.0 and first.price_tag == "$10.0 to $20.0"
    assert first.options == (("color", ("black | white", "navy")), ("size", ("9", "10", "11")))
    obs, info = env.reset(0)
    assert "Instruction: [SEP] i need " in obs and info["admissible"] == ["search[...]"]
    for seed in range(12):
        _, reward, info = run_expert(env, seed)
        assert info["success"] and reward == 1.0, seed
    monkeypatch.setenv("WEBSHOP_DATA", str(tmp_path))
    synthetic = make("webshop", human_goals=False, eval_goals=2, train_goal_start=2)
    obs, _ = synthetic.reset(4)
    assert "i want " in obs and "price lower than" in obs
    assert run_expert(synthetic, 4)[1] == 1.0
    assert synthetic.catalogue.products is not env.catalogue.products


def test_webshop_option_values_are_clickable_as_shown(tmp_path, webshop_dir):
    # WebShop's '/' -> ' | ' leaves runs of spaces ('black  |  white'); real values may be non-ASCII
    products = json.loads((tmp_path / "items_shuffle_1000.json").read_text())
    human = json.loads((tmp_path / "items_human_ins.json").read_text())
    for i in range(0, 12, 3):  # the running shoes
        products[i]["customization_options"]["Color"] = [{"value": "Black / White"}, {"value": "Caf\u00e9 Brown"}]
        human[products[i]["asin"]][0]["instruction_options"][0] = ("black  |  white", "caf\u00e9 brown")[i % 2]
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps(products))
    (tmp_path / "items_human_ins.json").write_text(json.dumps(human))
    env = make("webshop", data_dir=str(tmp_path), eval_goals=2, train_goal_start=2)
    for seed in range(12):
        _, reward, info = run_expert(env, seed)
        assert info["success"] and reward == 1.0, seed
    env.reset(0)
    env.step("search[running shoe]")
    env.step("click[b0test0000]")
    for click, value in (("click[Black | White]", "black  |  white"), ("click[CAF\u00c9  brown]", "caf\u00e9 brown")):
        _, _, _, info = env.step(click)
        assert info["valid"] and env.snapshot().chosen == (("color", value),), click
    env.step("click[back to search]")
    assert "non-ASCII" in env.step("search[caf\u00e9]")[0]  # queries stay ASCII


@pytest.mark.parametrize("mutate, error, words", [
    (lambda d: (d / "items_shuffle_1000.json").write_text("[{\"asin\": "), ValueError, "not valid JSON"),
    (lambda d: (d / "items_shuffle_1000.json").write_text("{}"), ValueError, "expected a JSON list"),
    (lambda d: (d / "items_shuffle_1000.json").write_text("[{\"name\": \"x\"}]"), ValueError, "product #0"),
    (lambda d: (d / "items_shuffle_1000.json").write_text(
        "[{\"asin\": \"B01\", \"name\": \"x\", \"pricing\": \"$abc\"}]"), ValueError, "unreadable pricing"),
    (lambda d: (d / "items_shuffle_1000.json").unlink(), FileNotFoundError, "items_shuffle*.json"),
    (lambda d: (d / "items_human_ins.json").write_text("[1, 2"), ValueError, "not valid JSON"),
    (lambda d: (d / "items_ins_v2_1000.json").write_text("[]"), ValueError, "expected an object"),
])
def test_webshop_bad_files_raise_one_clear_error(tmp_path, webshop_dir, mutate, error, words):
    mutate(tmp_path)
    with pytest.raises(error) as e:
        make("webshop", data_dir=str(tmp_path))
    assert words in str(e.value) and str(tmp_path) in str(e.value)


def test_webshop_missing_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("WEBSHOP_DATA", raising=False)
    with pytest.raises(ValueError, match="WEBSHOP_DATA"):
        make("webshop")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        make("webshop", data_dir=str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="missing.json"):
        make("webshop", data_dir=str(tmp_path), products_file="missing.json")


def test_snapshot_record_is_hashable_and_complete(env):
    env.reset(9)
    for action in ("search[black]", "click[next >]"):
        env.step(action)
    snap = env.snapshot()
    assert isinstance(snap, ShopState) and {f.name for f in dataclasses.fields(snap)} >= {
        "seed", "turn", "page", "results", "page_no", "item", "chosen"}
    assert snap == dataclasses.replace(snap) and hash(snap) == hash(dataclasses.replace(snap))
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.turn = 0
