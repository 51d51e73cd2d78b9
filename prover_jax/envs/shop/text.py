"""Text helpers of the shop engine: fuzzy ratios, search tokens and title type words.

Fuzzy ratios follow the definitions WebShop's reward uses, computed with `difflib`:

    ratio(a, b)           = round(100 * 2 M / (|a| + |b|))      M = matched characters of
                                                                difflib.SequenceMatcher(None, a, b)
    token_set_ratio(a, b) = max(ratio(S, S + D_ab), ratio(S, S + D_ba), ratio(S + D_ab, S + D_ba))

where both strings are first normalised (`envs.text.normalize(s, alnum=True)`: lowercase, every
non-alphanumeric character -> space, whitespace squeezed), S is the sorted intersection of their token
sets joined by spaces and D_ab the sorted tokens of a not in b. Either string empty after
normalisation -> 0. difflib's M is the size of its greedy matching blocks, which can fall a little
below the longest common subsequence that Levenshtein-based libraries use; on the short
attribute/option phrases compared here the two agree to within a point or two of the 85 threshold
margin the catalogue keeps.
"""

from __future__ import annotations

import difflib
import re

from prover_jax.envs.text import normalize, tokenize

_WORD = re.compile(r"[a-z0-9]+")

STOPWORDS = frozenset(
    "a an and are as at be but by for from has have i if in into is it its me my of on or our "
    "so than that the their them then there these they this to was we were what when which while "
    "who will with you your need want looking find am im i'm get buy".split()
)


def ratio(a: str, b: str) -> int:
    """difflib similarity of two strings in [0, 100] (no normalisation)."""
    if not a or not b:
        return 0
    return int(round(100.0 * difflib.SequenceMatcher(None, a, b).ratio()))


def token_set_ratio(a: str, b: str) -> int:
    """Order- and duplicate-insensitive similarity in [0, 100] (see module docstring)."""
    ta, tb = set(normalize(a, alnum=True).split()), set(normalize(b, alnum=True).split())
    if not ta or not tb:
        return 0
    sect = " ".join(sorted(ta & tb))
    ab = (sect + " " + " ".join(sorted(ta - tb))).strip()
    ba = (sect + " " + " ".join(sorted(tb - ta))).strip()
    return max(ratio(sect, ab), ratio(sect, ba), ratio(ab, ba))


def search_tokens(text: str) -> list[str]:
    """Tokens the search index and queries share: lowercase alphanumeric runs minus stopwords."""
    return tokenize(text, _WORD, STOPWORDS)


def title_type_words(title: str) -> set[str]:
    """The words of a title that name the product type (stand-in for WebShop's noun tagging).

    WebShop keeps the NOUN/PROPN tokens of a spaCy parse. Without a tagger we keep the alphabetic
    tokens of three or more letters that are not stopwords: nouns, proper nouns and the descriptive
    words around them. This over-counts adjectives, which makes `title_score` a little more lenient
    for products of the same type and changes nothing for products that share no words.
    """
    return {t for t in search_tokens(title) if t.isalpha() and len(t) >= 3}
