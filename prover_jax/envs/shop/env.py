"""`shop` and `webshop`: WebShop's text protocol over a generated or a user-supplied catalogue.

Pages and what can be clicked on them (clicks match case-insensitively and up to runs of whitespace;
search queries must be ASCII, clicks may name any value shown, e.g. a non-ASCII option):
    search       search[query]
    results      back to search, < prev (page > 1), next > (more results), <asin> (10 per page, 50 max)
    item         back to search, < prev (to the results), <option value>, description, features, buy now
    description  back to search, < prev (to the item)
    features     back to search, < prev (to the item)
`buy now` ends the episode with WebShop's reward (see `shop.reward`); the step reward is that graded
score, info["score"] repeats it and info["success"] = score == 1.0. Every step, valid or not, costs a
turn; after `max_turns` turns the episode ends unsuccessful with score 0.

The state is one frozen `ShopState` (hashable, includes the turn counter and the message of the last
step), so `snapshot()` returns it and `restore()` puts it back; `observe()` re-renders (obs, info).

Splits: `shop` holds out a share `eval_fraction` (default 0.1) of its generated goals by content (goals
repeat across seeds; see `envs.splits.ContentSplit`); `webshop` follows WebShop's goal split (test goals
[0, eval_goals=500) are the eval tasks, training uses [train_goal_start=1500, n); see `shop.webshop`).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable

from prover_jax.envs.base import Env, PromptSpec, info_dict, register, split_seed
from prover_jax.envs.shop.catalog import NO_PRICE_LIMIT, PRODUCT_WINDOW, Catalogue, Goal, Product
from prover_jax.envs.shop.reward import EXACT_MATCH_OPTION_GROUPS, FUZZY_THRESHOLD, purchase_reward
from prover_jax.envs.shop.text import search_tokens, token_set_ratio
from prover_jax.envs.splits import EVAL_FRACTION, ContentSplit, IndexSplit, digest

MAX_ACTION_CHARS = 300
_ACTION = re.compile(r"([a-z_]+)\[(.*)\]", re.DOTALL)
_PAGE_BUTTONS = {"description", "features"}

SYSTEM_PROMPT = """You are shopping on a web store to buy the product an instruction asks for.
Every page is shown as text with its parts separated by [SEP]. On the search page you may search:
  search[your keywords]
On every other page you click one of the buttons, product ids or option values shown on it:
  click[back to search]  click[next >]  click[< prev]  click[B0ABCDE123]  click[large]
  click[description]  click[features]  click[buy now]
Open a product by clicking its id, select every option the instruction asks for by clicking its value,
then click[buy now]. Buying ends the episode; you are scored on how well the product, its options and
its price match the instruction. Reply with exactly one action inside <action>...</action>,
for example <action>search[red running shoes]</action>."""


@dataclasses.dataclass(frozen=True)
class ShopState:
    """Everything that determines the episode from here on.

    Attributes:
      seed: episode seed (selects the goal, split included: see `envs.base`).
      turn: turns taken so far.
      page: 'search' | 'results' | 'item' | 'description' | 'features' | 'done'.
      query: last search query (normalised).
      results: catalogue indices the last search returned, best first.
      page_no: 1-based results page.
      item: catalogue index of the open product, -1 if none.
      chosen: ((group, value), ...) options selected on the open product, in the product's group order.
      score: reward of the purchase (0 until bought).
      note: what the last step reported (an invalid action's reason, the turn limit), '' otherwise.
    """

    seed: int
    turn: int = 0
    page: str = "search"
    query: str = ""
    results: tuple[int, ...] = ()
    page_no: int = 1
    item: int = -1
    chosen: tuple[tuple[str, str], ...] = ()
    score: float = 0.0
    note: str = ""


def goal_key(goal: Goal) -> str:
    """The content of a goal (equal keys <=> the same task)."""
    return repr((goal.asin, goal.instruction, goal.attributes, goal.options, goal.price_upper))


class ShopEnv(Env):
    """WebShop's text protocol over `catalogue` (see module docstring).

    `split`: how episode seeds map to goals; None: a generated catalogue's goals split by content with
    `eval_fraction` (an `IndexSplit` over the goal list for a finite one, see `shop.webshop.webshop_split`).
    """

    name = "shop"

    def __init__(self, catalogue: Catalogue | None = None, *, catalogue_seed: int | None = None,
                 n_products: int | None = None, max_turns: int = 15, eval_fraction: float = EVAL_FRACTION,
                 split: ContentSplit | IndexSplit | None = None):
        if catalogue is None:
            from prover_jax.envs.shop.generate import (DEFAULT_CATALOGUE_SEED, DEFAULT_N_PRODUCTS,
                                                       generated_catalogue)
            catalogue = generated_catalogue(
                DEFAULT_CATALOGUE_SEED if catalogue_seed is None else int(catalogue_seed),
                DEFAULT_N_PRODUCTS if n_products is None else int(n_products))
        self.catalogue = catalogue
        if split is None:
            split = ContentSplit("shop", lambda draw: goal_key(catalogue.goal(draw)), eval_fraction,
                                 cache_key=catalogue.key)
        self.split = split
        self.index = catalogue.index
        self.max_turns = int(max_turns)
        self._state: ShopState | None = None
        self._goal: Goal | None = None
        self._goal_seed: int | None = None
        self._expert: tuple[str, int, tuple[tuple[str, str], ...]] = ("", -1, ())

    @property
    def prompt(self) -> PromptSpec:
        return PromptSpec(system=SYSTEM_PROMPT, max_turns=self.max_turns)

    @property
    def goal(self) -> Goal:
        if self._goal is None:
            raise RuntimeError("call reset(seed) first")
        return self._goal

    def reset(self, seed: int) -> tuple[str, dict]:
        self._load_goal(int(seed))
        self._state = ShopState(seed=int(seed))
        return self.observe()

    def task_id(self, seed: int, split: str = "train") -> str:
        seed = split_seed(seed, split)
        if isinstance(self.split, ContentSplit):
            return self.split.task_id(seed)
        goal = self._goal_of(seed)  # a synthetic goal's options come from the seed: part of the task
        return f"{self.split.task_id(seed)}:{digest(repr(goal.options))}"

    def split_sizes(self) -> dict[str, int | None]:
        return self.split.sizes()

    def _goal_of(self, seed: int) -> Goal:
        """The goal episode seed `seed` plays."""
        if isinstance(self.split, ContentSplit):
            return self.catalogue.goal(self.split.index(seed))
        return self.catalogue.goal_at(self.split.index(seed), seed)

    def snapshot(self) -> ShopState:
        return self._require_state()

    def restore(self, snapshot: ShopState) -> None:
        if not isinstance(snapshot, ShopState):
            raise TypeError(f"expected a ShopState, got {type(snapshot).__name__}")
        self._load_goal(snapshot.seed)
        self._state = snapshot

    def observe(self) -> tuple[str, dict]:
        """(observation, info) of the current state, exactly as the step that reached it returned."""
        s = self._require_state()
        text = self._render(s)
        if s.note:
            text = f"{s.note}\n{text}"
        success = s.page == "done" and s.score == 1.0
        valid = not s.note.startswith("Invalid")
        return text, info_dict(success=success, score=s.score, valid=valid, admissible=self._admissible(s),
                               page=s.page, turn=s.turn)

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        s = self._require_state()
        if s.page == "done":
            obs, info = self.observe()
            info["valid"] = False
            return f"The episode is over.\n{obs}", 0.0, True, info
        new, error = self._transition(s, action)
        note = f"Invalid action: {error}" if error else ""
        new = dataclasses.replace(new, turn=s.turn + 1, note=note)
        if new.page != "done" and new.turn >= self.max_turns:
            limit = f"Turn limit of {self.max_turns} reached without a purchase; the episode is over."
            new = dataclasses.replace(new, page="done", score=0.0,
                                      note=f"{new.note}\n{limit}" if new.note else limit)
        self._state = new
        obs, info = self.observe()
        info["valid"] = not error
        reward = new.score if new.page == "done" else 0.0
        return obs, reward, new.page == "done", info

    def expert_action(self) -> str | None:
        """Search the goal's words, page to the target, select the goal options, buy."""
        s = self._require_state()
        query, target, plan = self._expert
        if s.page == "done" or target < 0:
            return None
        if s.page == "search":
            return f"search[{query}]"
        if s.page == "results":
            if target not in s.results:
                return "click[back to search]"
            rank_page = s.results.index(target) // PRODUCT_WINDOW + 1
            if rank_page == s.page_no:
                return f"click[{self.catalogue.products[target].asin.lower()}]"
            return "click[next >]" if rank_page > s.page_no else "click[< prev]"
        if s.page != "item" or s.item != target:
            return "click[< prev]"
        chosen = dict(s.chosen)
        for group, value in plan:
            if chosen.get(group) != value:
                return f"click[{value}]"
        return "click[buy now]"

    def privileged_facts(self, seed: int) -> list[str]:
        """The instruction, the target product, the required attributes and options, the price bound."""
        self.reset(seed)
        goal, catalogue = self.goal, self.catalogue
        target = catalogue.by_asin.get(goal.asin)
        out = [f"Instruction: {goal.instruction}"]
        if target is not None:
            out.append(f"Target product: {goal.asin} ({catalogue.products[target].title})")
        out.append(f"Required attributes: {', '.join(goal.attributes) or 'none'}")
        out.append(f"Required options: {', '.join(goal.options) or 'none'}")
        if goal.price_upper < NO_PRICE_LIMIT:
            out.append(f"Price must be below: {goal.price_upper:.2f}")
        return out

    def reference_policy(self, eps: float) -> Callable[[str, dict], dict[str, float]]:
        """pi(a|s) = (1 - eps) 1[a = expert(s)] + eps / |C(s)| 1[a in C(s)], C(s): the clickable buttons; on
        the search page the expert's query only (free text). Reads the expert from this env."""
        from prover_jax.envs.testing import mix

        def shop(obs: str, info: dict) -> dict[str, float]:
            clicks = [a for a in info.get("admissible") or [] if a != "search[...]"]
            return mix(self.expert_action(), clicks, eps)
        return shop

    # -- internals -----------------------------------------------------------------------------

    def _require_state(self) -> ShopState:
        if self._state is None:
            raise RuntimeError("call reset(seed) first")
        return self._state

    def _load_goal(self, seed: int) -> None:
        if self._goal_seed == seed:
            return
        goal = self._goal_of(seed)
        self._goal, self._goal_seed = goal, seed
        target = self.catalogue.by_asin.get(goal.asin, -1)
        if target < 0:
            self._expert = ("", -1, ())
            return
        product = self.catalogue.products[target]
        query = " ".join(search_tokens(" ".join([goal.query, *goal.attributes])))
        if target not in self.index.search(query):
            query = " ".join(search_tokens(product.title))[:MAX_ACTION_CHARS - 8]
        self._expert = (query, target, _option_plan(product, goal))

    def _transition(self, s: ShopState, action: str) -> tuple[ShopState, str]:
        """(next state, '') for a valid action; (s, reason) for an invalid one."""
        if action is None:
            return s, "no action found; reply with one action inside <action>...</action>"
        if not isinstance(action, str):
            return s, f"expected text, got {type(action).__name__}"
        action = action.strip()
        if not action:
            return s, "empty action; write search[keywords] or click[button]"
        if len(action) > MAX_ACTION_CHARS:
            return s, f"action is {len(action)} characters long; the limit is {MAX_ACTION_CHARS}"
        if any(ord(c) < 32 for c in action):
            return s, "action contains control characters (newline, tab, ...)"
        m = _ACTION.fullmatch(action.lower())
        if m is None:
            return s, f"malformed action {action!r}; write search[keywords] or click[button]"
        kind, arg = m.group(1), " ".join(m.group(2).split())
        if kind not in ("search", "click"):
            return s, f"unknown action type {kind!r}; only search[...] and click[...] exist"
        if not arg:
            return s, f"{kind}[] needs an argument"
        if kind == "search":
            if not arg.isascii():
                return s, "action contains non-ASCII characters"
            if s.page != "search":
                return s, "search is only available on the search page; click[back to search] first"
            return ShopState(seed=s.seed, turn=s.turn, page="results", query=arg,
                             results=self.index.search(arg)), ""
        clickables = self._clickables(s)
        target = {" ".join(c.split()): c for c in reversed(clickables)}.get(arg)
        if target is None:
            shown = ", ".join(clickables[:20]) or "nothing (use search[...])"
            return s, f"{arg!r} cannot be clicked on the {s.page} page; clickable: {shown}"
        return self._click(s, target), ""

    def _click(self, s: ShopState, arg: str) -> ShopState:
        if arg == "back to search":
            return ShopState(seed=s.seed, turn=s.turn)
        if s.page == "results":
            if arg == "next >":
                return dataclasses.replace(s, page_no=s.page_no + 1)
            if arg == "< prev":
                return dataclasses.replace(s, page_no=s.page_no - 1)
            item = next(i for i in self._page_items(s) if self.catalogue.products[i].asin.lower() == arg)
            return dataclasses.replace(s, page="item", item=item, chosen=())
        if s.page in _PAGE_BUTTONS:
            return dataclasses.replace(s, page="item")
        product = self.catalogue.products[s.item]
        if arg == "< prev":
            return dataclasses.replace(s, page="results", item=-1, chosen=())
        if arg in _PAGE_BUTTONS:
            return dataclasses.replace(s, page=arg)
        if arg == "buy now":
            score, _ = purchase_reward(product, self.goal, dict(s.chosen))
            return dataclasses.replace(s, page="done", score=score)
        group = product.option_group(arg)
        chosen = dict(s.chosen)
        chosen[group] = arg
        return dataclasses.replace(s, chosen=tuple((g, chosen[g]) for g, _ in product.options if g in chosen))

    def _page_items(self, s: ShopState) -> tuple[int, ...]:
        start = (s.page_no - 1) * PRODUCT_WINDOW
        return s.results[start:start + PRODUCT_WINDOW]

    def _clickables(self, s: ShopState) -> list[str]:
        if s.page == "results":
            out = ["back to search"]
            if s.page_no > 1:
                out.append("< prev")
            if s.page_no * PRODUCT_WINDOW < len(s.results):
                out.append("next >")
            return out + [self.catalogue.products[i].asin.lower() for i in self._page_items(s)]
        if s.page == "item":
            product = self.catalogue.products[s.item]
            values = list(dict.fromkeys(v for _, vals in product.options for v in vals))
            return ["back to search", "< prev", *values, "description", "features", "buy now"]
        if s.page in _PAGE_BUTTONS:
            return ["back to search", "< prev"]
        return []

    def _admissible(self, s: ShopState) -> list[str]:
        if s.page == "search":
            return ["search[...]"]
        return [f"click[{c}]" for c in self._clickables(s)]

    def _render(self, s: ShopState) -> str:
        if s.page == "done":
            return f"Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] {s.score:.2f}"
        head = f"WebShop [SEP] Instruction: [SEP] {self.goal.instruction} [SEP] "
        if s.page == "search":
            return head + "Search"
        if s.page == "results":
            parts = ["Back to Search", f"Page {s.page_no} (Total results: {len(s.results)})"]
            if s.page_no > 1:
                parts.append("< Prev")
            if s.page_no * PRODUCT_WINDOW < len(s.results):
                parts.append("Next >")
            for i in self._page_items(s):
                p = self.catalogue.products[i]
                parts += [p.asin, p.title, p.price_tag]
            return head + " [SEP] ".join(parts)
        product: Product = self.catalogue.products[s.item]
        parts = ["Back to Search", "< Prev"]
        if s.page == "description":
            return head + " [SEP] ".join(parts + [product.description])
        if s.page == "features":
            return head + " [SEP] ".join(parts + list(product.bullets))
        for group, values in product.options:
            parts += [group, *values]
        if s.chosen:
            parts.append("Selected options: " + ", ".join(f"{g}: {v}" for g, v in s.chosen))
        parts += [product.title, f"Price: {product.price_tag}", "Rating: N.A.", "Description", "Features",
                  "Buy Now"]
        return head + " [SEP] ".join(parts)


def _option_plan(product: Product, goal: Goal) -> tuple[tuple[str, str], ...]:
    """For each goal option, the (group, value) of `product` that matches it best, if any does."""
    plan: dict[str, str] = {}
    for wanted in goal.options:
        wanted = wanted.lower()
        best, best_score = None, FUZZY_THRESHOLD
        for group, values in product.options:
            for v in values:
                if v == wanted:
                    score = 101
                elif group.lower() in EXACT_MATCH_OPTION_GROUPS:
                    continue
                else:
                    score = token_set_ratio(wanted, v)
                if score > best_score and group not in plan:
                    best, best_score = (group, v), score
        if best is not None:
            plan[best[0]] = best[1]
    return tuple((g, plan[g]) for g, _ in product.options if g in plan)


@register("shop")
def _make_shop(**kwargs) -> ShopEnv:
    """Generated catalogue; kwargs: catalogue_seed, n_products, max_turns, eval_fraction."""
    return ShopEnv(**kwargs)
