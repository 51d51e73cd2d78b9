"""Tests of the contract's default action extraction (`envs.base.Env.extract_action`)."""

from __future__ import annotations

import random
import re
import time

from prover_jax.envs import make

_REFERENCE = re.compile(r"<action>(.*?)</action>", re.DOTALL)  # the last non-overlapping span


def test_extract_action_takes_the_last_span():
    env = make("household")
    rng = random.Random(0)
    pieces = ["<action>", "</action>", "look", " ", "\n", "<act", "ion>", "</", "é"]
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        found = _REFERENCE.findall(text)
        assert env.extract_action(text) == (found[-1].strip() if found else None), text
    assert env.extract_action("<action>a<action>b</action></action>") == "a<action>b"


def test_extract_action_is_linear_on_unclosed_tags():
    env = make("household")
    start = time.perf_counter()
    assert env.extract_action("<action>" * 50_000) is None
    assert env.extract_action("<action>" * 50_000 + "look</action>") == "<action>" * 49_999 + "look"
    assert time.perf_counter() - start < 1.0
