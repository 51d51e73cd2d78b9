"""The generated shop catalogue and its goals, both pure functions of integer seeds.

Product i of type T: a brand, 3-4 of T's attributes (the first two also in the title), 1-2 of T's
option groups with 1-5 values each, a price uniform in T's range. Option values that occur as a
substring of the product's own title/bullets/description are dropped, because WebShop's option
reward counts such values as matched whatever the goal says.

Goal of episode seed s: a uniformly drawn product, 1-3 of its attributes, one value of each of its
option groups, and WebShop's price bound (two of the four $10 steps above the price, the larger).
"""

from __future__ import annotations

import functools
import random

from prover_jax.envs.shop.catalog import Catalogue, Goal, Product, price_text, price_upper_for
from prover_jax.envs.shop.vocab import BRANDS, FILLERS, LEADS, PRODUCT_TYPES, ProductType

DEFAULT_CATALOGUE_SEED = 20240
DEFAULT_N_PRODUCTS = 300
_ASIN_CHARS = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"


def _title_case(text: str) -> str:
    return " ".join(w[:1].upper() + w[1:] for w in text.split())


def _product(rng: random.Random, kind: ProductType, asin: str) -> Product:
    brand = rng.choice(BRANDS)
    attrs = rng.sample(kind.attributes, rng.randint(3, 4))
    title = f"{brand} {_title_case(kind.noun)}, {_title_case(attrs[0])}, {_title_case(attrs[1])}"
    bullets = tuple(f"{a[:1].upper() + a[1:]}: {rng.choice(FILLERS)}" for a in attrs) + (
        rng.choice(FILLERS),)
    description = (f"The {brand} {kind.noun} is {', '.join(attrs[:-1])} and {attrs[-1]}. "
                   f"{rng.choice(FILLERS)}.")
    texts = (title.lower(), " ".join(bullets).lower(), description.lower())
    groups = [g for g in kind.options if rng.random() < 0.85] or [rng.choice(kind.options)]
    options = []
    for group, pool in groups:
        values = set(rng.sample(pool, rng.randint(min(2, len(pool)), len(pool))))
        kept = tuple(v for v in pool if v in values and not any(v in t for t in texts))
        if kept:
            options.append((group, kept))
    price = round(rng.uniform(*kind.price), 2)
    return Product(asin=asin, title=title, category=kind.category, query=kind.query,
                   product_category=kind.path, bullets=bullets, description=description,
                   attributes=tuple(attrs), options=tuple(options), price=price,
                   price_tag=f"${price:.2f}")


@functools.lru_cache(maxsize=8)
def generated_catalogue(seed: int = DEFAULT_CATALOGUE_SEED,
                        n_products: int = DEFAULT_N_PRODUCTS) -> Catalogue:
    """The catalogue of `n_products` items for catalogue seed `seed` (cached per process)."""
    if n_products < len(PRODUCT_TYPES):
        raise ValueError(f"n_products must be >= {len(PRODUCT_TYPES)}, got {n_products}")
    rng = random.Random(f"shop-catalogue/{seed}")
    asins: set[str] = set()
    products = []
    for i in range(n_products):
        asin = "B0" + "".join(rng.choice(_ASIN_CHARS) for _ in range(8))
        while asin in asins:
            asin = "B0" + "".join(rng.choice(_ASIN_CHARS) for _ in range(8))
        asins.add(asin)
        products.append(_product(rng, PRODUCT_TYPES[i % len(PRODUCT_TYPES)], asin))
    rng.shuffle(products)
    products_t = tuple(products)
    nouns = {t.query: t.noun for t in PRODUCT_TYPES}
    return Catalogue(key=("shop", seed, n_products), products=products_t,
                     goal_fn=functools.partial(_goal, products_t, nouns, seed))


def _goal(products: tuple[Product, ...], nouns: dict[str, str], catalogue_seed: int, seed: int) -> Goal:
    rng = random.Random(f"shop-goal/{catalogue_seed}/{seed}")
    target = products[rng.randrange(len(products))]
    attrs = tuple(rng.sample(target.attributes, rng.randint(1, min(3, len(target.attributes)))))
    chosen = tuple((group, rng.choice(values)) for group, values in target.options)
    upper = price_upper_for(target.price, rng)
    noun = nouns[target.query]
    plural = noun.endswith("s")
    article = "" if plural else ("an " if noun[0] in "aeiou" else "a ")
    attr_text = attrs[0] if len(attrs) == 1 else f"{', '.join(attrs[:-1])} and {attrs[-1]}"
    text = f"{rng.choice(LEADS)} {article}{noun} that {'are' if plural else 'is'} {attr_text}"
    if chosen:
        text += " with " + ", and ".join(f"{g}: {v}" for g, v in chosen)
    return Goal(asin=target.asin, instruction=text + price_text(upper), attributes=attrs,
                options=tuple(v for _, v in chosen), price_upper=upper, query=target.query,
                category=target.category, product_category=target.product_category,
                name=target.title)
