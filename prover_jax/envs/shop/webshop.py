"""`webshop`: the shop engine over a user-supplied catalogue in WebShop's file formats.

Files in `data_dir` (names as WebShop ships them):
    items_shuffle*.json   list of products: asin, name, category, query, product_category,
                          pricing ('$12.99' or '$10.00 - $20.00'), customization_options
                          ({group: [{value, image}, ...] | null}), small_description (list | str),
                          full_description; optional Attributes
    items_ins_v2*.json    {asin: {attributes: [...], instruction: str, instruction_attributes: [...]}}
    items_human_ins.json  {asin: [{instruction, instruction_attributes, instruction_options}, ...]}
                          (optional; an entry may also carry its own price_upper)

As in WebShop: asins that are 'nan' or longer than 10 characters and repeated asins are skipped,
option values are lowercased with '/' shown as ' | ', goals without attributes are skipped and the
goal list is shuffled with random.Random(233). Deviations, so that episodes are deterministic: a
price range counts at its lower end, the price bound of goal i is drawn from random.Random(i), and a
synthetic goal (items_ins_v2 instruction) takes the option combination drawn from the episode seed
instead of enumerating every combination. `Catalogue.goal(s)` is goal s mod (number of goals).

Splits (`webshop_split`, WebShop's own: its baselines test on goals [0, 500), keep [500, 1500) for
development and train on [1500, n) of this shuffled list): eval task i plays test goal i mod
eval_goals, train task s plays goal train_goal_start + (s mod the train goals), and train goals that
repeat a test goal (same product, instruction, attributes and options) are dropped from training.
With the human goals this reproduces WebShop's indices; the synthetic goals (one per product here,
every option combination there) are not WebShop's list, but the same cut applies.
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
from pathlib import Path
from typing import Any

from prover_jax.envs.base import Env, register
from prover_jax.envs.shop.catalog import Catalogue, Goal, Product, price_text, price_upper_for
from prover_jax.envs.shop.env import ShopEnv
from prover_jax.envs.splits import IndexSplit

WEBSHOP_TEST_GOALS = 500  # WebShop's test goals: [0, 500) of the shuffled goal list
WEBSHOP_TRAIN_START = 1500  # WebShop trains on [1500, n); [500, 1500) is its development split

_PRICE_NUMBER = re.compile(r"[^\d.]")


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e})") from None


def _pick(data_dir: Path, name: str | None, pattern: str, required: bool) -> Path | None:
    if name is not None:
        path = Path(name) if Path(name).is_absolute() else data_dir / name
        if not path.is_file():
            raise FileNotFoundError(f"{path}: file not found")
        return path
    found = sorted(data_dir.glob(pattern))
    if not found and required:
        raise FileNotFoundError(f"{data_dir}: no {pattern} file in the WebShop data directory")
    return found[0] if found else None


def _fail(path: Path, where: str, problem: str) -> ValueError:
    return ValueError(f"{path}: {where}: {problem}")


def _pricing(raw: Any, path: Path, where: str) -> tuple[float, str]:
    if raw is None or raw == "" or raw == []:
        return 100.0, "$100.0"
    try:
        if isinstance(raw, str):
            values = [float(_PRICE_NUMBER.sub("", x)) for x in raw.split("$")[1:] if _PRICE_NUMBER.sub("", x)]
        else:
            values = [float(x) for x in raw]
    except (TypeError, ValueError):
        raise _fail(path, where, f"unreadable pricing {raw!r}") from None
    if not values:
        raise _fail(path, where, f"unreadable pricing {raw!r}")
    tag = f"${values[0]}" if len(values) == 1 else f"${values[0]} to ${values[1]}"
    return values[0], tag


def _options(raw: Any, path: Path, where: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not raw:
        return ()
    if not isinstance(raw, dict):
        raise _fail(path, where, "customization_options must be an object {group: [values]}")
    out = []
    for group, contents in raw.items():
        if contents is None:
            continue
        if not isinstance(contents, list):
            raise _fail(path, where, f"option group {group!r} must be a list")
        values = []
        for c in contents:
            value = c.get("value") if isinstance(c, dict) else c
            if not isinstance(value, str):
                raise _fail(path, where, f"option group {group!r} has a value that is not text: {c!r}")
            values.append(value.strip().replace("/", " | ").lower())
        if values:
            out.append((str(group).lower(), tuple(dict.fromkeys(values))))
    return tuple(out)


def _text_list(raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    if isinstance(raw, str):
        return (raw,)
    return tuple(str(x) for x in raw)


def _product(p: Any, i: int, path: Path, attrs: dict) -> Product | None:
    if not isinstance(p, dict):
        raise _fail(path, f"product #{i}", "is not an object")
    asin = p.get("asin")
    if not isinstance(asin, str):
        raise _fail(path, f"product #{i}", "has no 'asin' text")
    if asin == "nan" or len(asin) > 10:
        return None
    title = p.get("name", p.get("Title"))
    if not isinstance(title, str):
        raise _fail(path, f"product #{i} ({asin})", "has no 'name' text")
    where = f"product #{i} ({asin})"
    price, tag = _pricing(p.get("pricing"), path, where)
    entry = attrs.get(asin)
    attributes = entry.get("attributes") if isinstance(entry, dict) and "attributes" in entry else p.get(
        "Attributes", ())
    return Product(
        asin=asin, title=title, category=str(p.get("category", "")),
        query=str(p.get("query", "")).lower().strip(), product_category=str(p.get("product_category", "")),
        bullets=_text_list(p.get("small_description", p.get("BulletPoints"))),
        description=str(p.get("full_description", p.get("Description", "")) or ""),
        attributes=_text_list(attributes),
        options=_options(p.get("customization_options", p.get("options")), path, where),
        price=price, price_tag=tag)


def _goal_specs(products: tuple[Product, ...], by_asin: dict[str, int], attrs: dict, human: Any,
                human_path: Path | None) -> list[tuple]:
    """(product index, instruction, attributes, options | None, price_upper | None) per goal."""
    specs = []
    if human is not None:
        if not isinstance(human, dict):
            raise ValueError(f"{human_path}: expected an object {{asin: [instructions]}}")
        for p in products:
            entries = human.get(p.asin) or []
            if not isinstance(entries, list):
                raise _fail(human_path, p.asin, "instructions must be a list")
            for k, e in enumerate(entries):
                if not isinstance(e, dict) or not isinstance(e.get("instruction"), str):
                    raise _fail(human_path, f"{p.asin}[{k}]", "needs an 'instruction' text")
                ga = _text_list(e.get("instruction_attributes"))
                go = e.get("instruction_options") or ()
                go = tuple(str(v).lower() for v in (go.values() if isinstance(go, dict) else go))
                if ga:
                    specs.append((by_asin[p.asin], e["instruction"].strip().strip("."), ga, go,
                                  e.get("price_upper")))
        return specs
    for p in products:
        e = attrs.get(p.asin)
        if isinstance(e, dict) and e.get("instruction") and e.get("instruction_attributes"):
            specs.append((by_asin[p.asin], str(e["instruction"]).strip().strip("."),
                          _text_list(e["instruction_attributes"]), None, None))
    return specs


def _goal(products: tuple[Product, ...], specs: list[tuple], seed: int) -> Goal:
    return _goal_at(products, specs, seed % len(specs), seed)


def _goal_key(spec: tuple) -> str:
    index, instruction, attributes, options, _ = spec
    return repr((index, " ".join(instruction.lower().split()), tuple(attributes),
                 None if options is None else tuple(options)))


def _goal_at(products: tuple[Product, ...], specs: list[tuple], i: int, seed: int) -> Goal:
    """Goal `i` of the list; `seed` draws the options of a synthetic goal."""
    index, instruction, attributes, options, upper = specs[i]
    target = products[index]
    if upper is None:
        upper = price_upper_for(target.price, random.Random(i))
    if options is None:
        rng = random.Random(f"webshop-goal/{seed}")
        chosen = [(g, rng.choice(values)) for g, values in target.options]
        if chosen:
            instruction += " with " + ", and ".join(f"{g}: {v}" for g, v in chosen)
        options = tuple(v for _, v in chosen)
    return Goal(asin=target.asin, instruction=instruction + price_text(float(upper)),
                attributes=attributes, options=options, price_upper=float(upper), query=target.query,
                category=target.category, product_category=target.product_category, name=target.title)


def load_webshop(data_dir: str | Path, *, human_goals: bool | None = None, products_file: str | None = None,
                 attrs_file: str | None = None, num_products: int | None = None) -> Catalogue:
    """The catalogue in `data_dir`; cached per process by the files' paths, sizes and mtimes.

    human_goals: None -> items_human_ins.json when present, else the items_ins_v2 instructions.
    num_products: keep only the first N products (the files are pre-shuffled).
    Raises FileNotFoundError / ValueError naming the path and the problem.
    """
    d = Path(data_dir).expanduser().resolve()
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: WebShop data directory does not exist")
    prod_path = _pick(d, products_file, "items_shuffle*.json", required=True)
    attr_path = _pick(d, attrs_file, "items_ins_v2*.json", required=False)
    human_path = d / "items_human_ins.json"
    use_human = human_path.is_file() if human_goals is None else bool(human_goals)
    if use_human and not human_path.is_file():
        raise FileNotFoundError(f"{human_path}: file not found (human_goals=True)")
    files = tuple(p for p in (prod_path, attr_path, human_path if use_human else None) if p is not None)
    key = ("webshop", tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files), num_products)
    return _load(key, prod_path, attr_path, human_path if use_human else None, num_products)


@functools.lru_cache(maxsize=4)
def _load(key: tuple, prod_path: Path, attr_path: Path | None, human_path: Path | None,
          num_products: int | None) -> Catalogue:
    raw = _read_json(prod_path)
    if not isinstance(raw, list):
        raise ValueError(f"{prod_path}: expected a JSON list of products, got {type(raw).__name__}")
    attrs = _read_json(attr_path) if attr_path is not None else {}
    if not isinstance(attrs, dict):
        raise ValueError(f"{attr_path}: expected an object {{asin: {{attributes, ...}}}}")
    if num_products is not None:
        raw = raw[:num_products]
    products, seen = [], set()
    for i, p in enumerate(raw):
        product = _product(p, i, prod_path, attrs)
        if product is not None and product.asin not in seen:
            seen.add(product.asin)
            products.append(product)
    if not products:
        raise ValueError(f"{prod_path}: no usable products")
    products_t = tuple(products)
    by_asin = {p.asin: i for i, p in enumerate(products_t)}
    human = _read_json(human_path) if human_path is not None else None
    specs = _goal_specs(products_t, by_asin, attrs, human, human_path)
    if not specs:
        used = ", ".join(str(p) for p in (human_path or attr_path, prod_path) if p is not None)
        raise ValueError(f"{used}: no usable goals (instructions with attributes for listed products)")
    random.Random(233).shuffle(specs)
    return Catalogue(key=key, products=products_t, goal_fn=functools.partial(_goal, products_t, specs),
                     n_goals=len(specs), goal_at=functools.partial(_goal_at, products_t, specs),
                     goal_keys=tuple(_goal_key(s) for s in specs))


def webshop_split(catalogue: Catalogue, eval_goals: int = WEBSHOP_TEST_GOALS,
                  train_goal_start: int = WEBSHOP_TRAIN_START) -> IndexSplit:
    """WebShop's split of `catalogue`'s goal list (see module docstring): eval = goals [0, eval_goals),
    train = goals [train_goal_start, n) minus repeats of an eval goal. Raises ValueError when the
    ranges overlap; an empty split raises when it is used (naming these settings)."""
    n, keys = catalogue.n_goals, catalogue.goal_keys
    eval_goals, train_goal_start = int(eval_goals), int(train_goal_start)
    if eval_goals < 0 or train_goal_start < 0:
        raise ValueError(f"webshop: eval_goals and train_goal_start must be >= 0, got {eval_goals}, "
                         f"{train_goal_start}")
    if train_goal_start < eval_goals:
        raise ValueError(f"webshop: train_goal_start={train_goal_start} < eval_goals={eval_goals}: the train "
                         f"goals [{train_goal_start}, {n}) would include eval (test) goals [0, {eval_goals})")
    test = list(range(min(eval_goals, n)))
    test_keys = {keys[i] for i in test}
    train = [i for i in range(train_goal_start, n) if keys[i] not in test_keys]
    dropped = max(0, n - train_goal_start) - len(train)
    settings = {"eval": f"eval_goals={eval_goals}: test goals [0, {eval_goals}) of the {n} goals",
                "train": f"train_goal_start={train_goal_start}: train goals [{train_goal_start}, {n}) of the {n} "
                         f"goals, {dropped} repeating a test goal dropped"}
    if train_goal_start >= n:
        settings["train"] += (f"; the data hold only {n} goals: lower train_goal_start (and eval_goals), "
                              "WebShop's 500 / 1500 need its full goal list")
    return IndexSplit("webshop", [f"webshop:goal{i}" for i in range(n)], train, test, settings)


@register("webshop")
class WebShopEnv(ShopEnv):
    """Real WebShop files in `data_dir` (or $WEBSHOP_DATA); eval_goals (500) / train_goal_start (1500)
    set the split (see `webshop_split`); other kwargs go to `load_webshop`. Privileged facts as `shop`;
    no reference policy: the oracle critic's exact DP is kept to the generated catalogue."""

    name = "webshop"
    reference_policy = Env.reference_policy  # offers none (see the class docstring)

    def __init__(self, data_dir: str | None = None, max_turns: int = 15, eval_goals: int | None = None,
                 train_goal_start: int | None = None, **kwargs):
        data_dir = data_dir or os.environ.get("WEBSHOP_DATA")
        if not data_dir:
            raise ValueError("webshop needs data_dir=... or the WEBSHOP_DATA environment variable")
        catalogue = load_webshop(data_dir, **kwargs)
        split = webshop_split(catalogue, WEBSHOP_TEST_GOALS if eval_goals is None else eval_goals,
                              WEBSHOP_TRAIN_START if train_goal_start is None else train_goal_start)
        super().__init__(catalogue, max_turns=max_turns, split=split)
