"""Records of the shop engine (product, goal, catalogue) and its cached BM25 search index.

A catalogue is identified by `key` (a hashable tuple: generator seed and size, or the data files'
paths, sizes and mtimes). The search index of a catalogue is built once per process and shared by
every environment over that catalogue (`search_index`); `INDEX_BUILDS` logs (key, seconds) per build.
"""

from __future__ import annotations

import dataclasses
import random
import time
from typing import Callable, Hashable

from prover_jax.envs.shop.text import search_tokens
from prover_jax.envs.text import BM25Index

SEARCH_RETURN_N = 50
PRODUCT_WINDOW = 10
PRICE_LADDER = tuple(10.0 * i for i in range(1, 100))
NO_PRICE_LIMIT = 1_000_000.0


@dataclasses.dataclass(frozen=True)
class Product:
    """One catalogue item, in the fields WebShop's engine reads.

    Attributes:
      asin: 10-character product id, shown upper case, clicked in any case.
      title: product name shown on results and item pages.
      category: top-level category (beauty, grocery, fashion, furniture, electronics, ...).
      query: the search term the product was listed under (type reward's query match).
      product_category: breadcrumb path joined by ' › ' (type reward's category match).
      bullets: feature bullet points (the Features page).
      description: the Description page text.
      attributes: attribute phrases (attribute reward's fuzzy match).
      options: ((group, (value, ...)), ...), lowercase, in display order.
      price: the price every goal and the reward use.
      price_tag: how the price is shown, e.g. '$12.99' or '$10.0 to $20.0'.
    """

    asin: str
    title: str
    category: str
    query: str
    product_category: str
    bullets: tuple[str, ...]
    description: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    price: float
    price_tag: str

    def option_group(self, value: str) -> str | None:
        """The group that offers `value` (first one if several do), else None."""
        for group, values in self.options:
            if value in values:
                return group
        return None

    def search_text(self) -> str:
        """The text the search index holds for this product."""
        opts = " ".join(v for _, vals in self.options for v in vals)
        return " ".join([self.title, self.query, self.product_category, *self.bullets,
                         self.description, *self.attributes, opts])


@dataclasses.dataclass(frozen=True)
class Goal:
    """One instruction: buy `asin` (or anything as good) with these attributes/options under a price.

    Attributes:
      asin: the product the instruction was written for.
      instruction: the text the agent reads.
      attributes: goal attribute phrases.
      options: goal option values (lowercase), one per option group of the target where known.
      price_upper: price bound; NO_PRICE_LIMIT when the instruction states none.
      query, category, product_category, name: the target's fields, for the type reward.
    """

    asin: str
    instruction: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]
    price_upper: float
    query: str
    category: str
    product_category: str
    name: str


def price_upper_for(price: float, rng: random.Random) -> float:
    """WebShop's bound: two of the first four ladder steps above `price`, sorted; take the larger."""
    steps = [p for p in PRICE_LADDER if p > price][:4]
    if len(steps) < 2:
        return NO_PRICE_LIMIT
    return max(rng.sample(steps, 2))


def price_text(upper: float) -> str:
    return "" if upper >= NO_PRICE_LIMIT else f", and price lower than {upper:.2f} dollars"


class SearchIndex:
    """BM25 over the products' search text (`envs.text.BM25Index` with the shop's `search_tokens`);
    results sorted by (-score, catalogue order), score > 0."""

    def __init__(self, products: tuple[Product, ...]):
        self.bm25 = BM25Index.build((search_tokens(p.search_text()) or [""] for p in products),
                                    tokenizer=search_tokens)
        self._cache: dict[str, tuple[int, ...]] = {}

    def search(self, query: str) -> tuple[int, ...]:
        """Indices of the top SEARCH_RETURN_N products for `query` (empty when nothing matches)."""
        hit = self._cache.get(query)
        if hit is not None:
            return hit
        out = tuple(self.bm25.search(query, SEARCH_RETURN_N))
        if len(self._cache) < 100_000:
            self._cache[query] = out
        return out


class Catalogue:
    """Products plus a goal source; `goal(seed)` gives the goal drawn from seed `seed` (generated), or
    goal seed % n_goals of a finite goal list.

    A finite goal list also has `goal_at(index, seed)` (goal `index`; `seed` draws what the goal leaves
    open) and `goal_keys` (the content of each goal, equal keys <=> the same task), from which
    `shop.env.ShopEnv` builds its train / eval split.
    """

    def __init__(self, key: Hashable, products: tuple[Product, ...], goal_fn: Callable[[int], Goal],
                 n_goals: int | None = None, goal_at: Callable[[int, int], Goal] | None = None,
                 goal_keys: tuple[str, ...] | None = None):
        self.key = key
        self.products = products
        self.by_asin = {p.asin: i for i, p in enumerate(products)}
        self._goal_fn = goal_fn
        self.n_goals = n_goals
        self.goal_at = goal_at
        self.goal_keys = goal_keys

    def goal(self, seed: int) -> Goal:
        return self._goal_fn(seed)

    @property
    def index(self) -> SearchIndex:
        return search_index(self)


_INDEXES: dict[Hashable, SearchIndex] = {}
INDEX_BUILDS: list[tuple[Hashable, float]] = []


def search_index(catalogue: Catalogue) -> SearchIndex:
    """The shared index of `catalogue`, built on first use (each build appended to INDEX_BUILDS)."""
    index = _INDEXES.get(catalogue.key)
    if index is None:
        start = time.perf_counter()
        index = SearchIndex(catalogue.products)
        INDEX_BUILDS.append((catalogue.key, time.perf_counter() - start))
        _INDEXES[catalogue.key] = index
    return index
