"""WebShop's purchase reward.

    reward = r_type * (n_attr + n_opt + [price <= price_upper]) / (|goal attributes| + |goal options| + 1)

n_attr: goal attributes g with token_set_ratio(p, g) > 85 for some product attribute p, or g a
substring of the lowercased title, joined bullets or description.
n_opt: chosen (group, value) pairs that match: groups named 'size' need the value among the goal
options exactly, other groups need token_set_ratio(goal option, value) > 85 for some goal option;
a value that fails is still counted when it is a substring of the title, bullets or description.
n_opt is capped at |goal options| so the reward never exceeds 1.

r_type (reconstruction of WebShop's rule, with `title_type_words` in place of spaCy nouns):
    query_match    = product.query == goal.query
    category_match = at least 2 shared components of the ' › ' breadcrumb paths
    title_score    = |W(product.title) & W(goal.name)| / |W(goal.name)|   (0.2 if W(goal.name) empty)
    r_type = 1   if query_match or category_match or title_score > 0.2, else 0.5;
    then     0.1 if title_score < 0.1;   0 if title_score == 0   (these override the match).
success = reward == 1.0.
"""

from __future__ import annotations

from typing import Mapping

from prover_jax.envs.shop.catalog import NO_PRICE_LIMIT, Goal, Product
from prover_jax.envs.shop.text import title_type_words, token_set_ratio

EXACT_MATCH_OPTION_GROUPS = ("size",)
FUZZY_THRESHOLD = 85


def _path(breadcrumb: str) -> set[str]:
    return {part.strip().lower() for part in breadcrumb.split("›") if part.strip()}


def type_reward(product: Product, goal: Goal) -> dict:
    """r_type and its parts (see module docstring)."""
    query_match = product.query.strip().lower() == goal.query.strip().lower()
    category_match = len(_path(product.product_category) & _path(goal.product_category)) >= 2
    desired = title_type_words(goal.name)
    bought = title_type_words(product.title)
    title_score = 0.2 if not desired else len(bought & desired) / len(desired)
    r_type = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return dict(r_type=r_type, query_match=query_match, category_match=category_match,
                title_score=title_score)


def _texts(product: Product) -> tuple[str, str, str]:
    return product.title.lower(), " ".join(product.bullets).lower(), product.description.lower()


def attribute_matches(product: Product, goal: Goal) -> int:
    texts = _texts(product)
    count = 0
    for g in goal.attributes:
        g = g.lower()
        if any(token_set_ratio(p, g) > FUZZY_THRESHOLD for p in product.attributes):
            count += 1
        elif any(g in t for t in texts):
            count += 1
    return count


def option_matches(product: Product, goal: Goal, chosen: Mapping[str, str]) -> int:
    texts = _texts(product)
    wanted = [o.lower() for o in goal.options]
    count = 0
    for group, value in chosen.items():
        value = value.lower()
        if group.lower() in EXACT_MATCH_OPTION_GROUPS:
            hit = value in wanted
        else:
            hit = any(token_set_ratio(g, value) > FUZZY_THRESHOLD for g in wanted)
        if hit or any(value in t for t in texts):
            count += 1
    return min(count, len(wanted))


def purchase_reward(product: Product, goal: Goal, chosen: Mapping[str, str]) -> tuple[float, dict]:
    """(reward, parts) for buying `product` with options `chosen` ({group: value}) against `goal`."""
    parts = type_reward(product, goal)
    n_attr = attribute_matches(product, goal)
    n_opt = option_matches(product, goal, chosen)
    in_budget = goal.price_upper >= NO_PRICE_LIMIT or product.price <= goal.price_upper
    total = (n_attr + n_opt + int(in_budget)) / (len(goal.attributes) + len(goal.options) + 1)
    parts.update(n_attr=n_attr, n_opt=n_opt, in_budget=in_budget)
    return total * parts["r_type"], parts
