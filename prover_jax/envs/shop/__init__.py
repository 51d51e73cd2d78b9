"""`shop` and `webshop`: WebShop's text protocol and purchase reward over a product catalogue.

  env.py       ShopEnv: pages, clicks, turn limit, expert; registers `shop` (generated catalogue)
  webshop.py   `webshop` (WebShopEnv): reads WebShop's own files into a Catalogue, with WebShop's goal split
  catalog.py   Product / Goal / Catalogue records and the shared BM25 search index per catalogue
  generate.py  the generated catalogue and goals (vocabulary in vocab.py), pure functions of seeds
  reward.py    WebShop's purchase reward; text.py: its fuzzy ratios, search tokens, title words
"""

from prover_jax.envs.shop.catalog import NO_PRICE_LIMIT, PRODUCT_WINDOW, Catalogue, Goal, Product
from prover_jax.envs.shop.env import MAX_ACTION_CHARS, SYSTEM_PROMPT, ShopEnv, ShopState, goal_key
from prover_jax.envs.shop.generate import generated_catalogue
from prover_jax.envs.shop.reward import EXACT_MATCH_OPTION_GROUPS, FUZZY_THRESHOLD, purchase_reward
from prover_jax.envs.shop.text import search_tokens, token_set_ratio
from prover_jax.envs.shop.webshop import load_webshop, webshop_split

__all__ = ["EXACT_MATCH_OPTION_GROUPS", "FUZZY_THRESHOLD", "MAX_ACTION_CHARS", "NO_PRICE_LIMIT", "PRODUCT_WINDOW",
           "SYSTEM_PROMPT", "Catalogue", "Goal", "Product", "ShopEnv", "ShopState", "generated_catalogue", "goal_key",
           "load_webshop", "purchase_reward", "search_tokens", "token_set_ratio", "webshop_split"]
