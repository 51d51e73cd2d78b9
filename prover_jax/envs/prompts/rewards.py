"""Reward functions of single-turn prompt tasks: (completion, row) -> float.

    fn = reward_fn("gsm8k")                    # a built-in by name
    fn = reward_fn("my_pkg.rewards:judge")     # any importable callable, module:function
    r = fn("... #### 72", {"question": ..., "answer": "... #### 72"})

Built in (the row's answer under `answer_field`, passed as row["answer"] by the env):
    exact_match   1.0 when the completion's final answer equals the row's answer after normalisation
                  (NFKC, casefold, punctuation, articles and extra spaces removed), else 0.0; the final
                  answer is the text after the completion's last `####` when it has one, else the whole
                  completion
    gsm8k         1.0 when the number after the completion's last `####` equals the number after the
                  answer's last `####` (GSM8K's solution format; commas, `$` and a trailing `.` ignored,
                  compared as numbers), else 0.0; a completion without `####` scores 0.0
"""

from __future__ import annotations

import importlib
import math
import re
from typing import Any, Callable

from prover_jax.envs.text import normalize

RewardFn = Callable[[str, dict], float]
MARK = "####"
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def final_answer(text: str) -> str | None:
    """The text after the last `####` (stripped), None when there is none."""
    head, found, tail = text.rpartition(MARK)
    return tail.strip() if found else None


def exact_match(completion: str, row: dict) -> float:
    answer = final_answer(completion)
    pred = completion if answer is None else answer
    gold = str(row["answer"])
    gold = final_answer(gold) if MARK in gold else gold
    return float(normalize(pred, unicode=True, punctuation=True, articles=True)
                 == normalize(gold, unicode=True, punctuation=True, articles=True))


def number(text: str | None) -> float | None:
    """The first number in `text` ($ and thousands commas allowed), None when there is none."""
    if text is None:
        return None
    m = _NUMBER.search(text.replace("$", ""))
    if m is None:
        return None
    value = float(m.group(0).replace(",", ""))
    return value if math.isfinite(value) else None


def gsm8k(completion: str, row: dict) -> float:
    pred, gold = number(final_answer(completion)), number(final_answer(str(row["answer"])))
    if gold is None:
        raise ValueError(f"gsm8k reward: the row's answer has no '#### <number>': {str(row['answer'])[-80:]!r}")
    return float(pred is not None and abs(pred - gold) <= 1e-6 * max(1.0, abs(gold)))


BUILT_IN: dict[str, RewardFn] = {"exact_match": exact_match, "gsm8k": gsm8k}


def reward_fn(spec: str) -> RewardFn:
    """A built-in reward by name, or `module:function` imported; ValueError naming env.kwargs.reward_fn."""
    if spec in BUILT_IN:
        return BUILT_IN[spec]
    module, sep, name = str(spec).partition(":")
    if not sep or not module or not name:
        raise ValueError(f"env.kwargs.reward_fn={spec!r}: expected one of {', '.join(BUILT_IN)} or "
                         "'module:function'")
    try:
        fn: Any = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"env.kwargs.reward_fn={spec!r}: cannot import it ({e})") from None
    if not callable(fn):
        raise ValueError(f"env.kwargs.reward_fn={spec!r} is not callable")
    return fn
