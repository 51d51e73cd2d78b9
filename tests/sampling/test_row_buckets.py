"""Row buckets without 1 (e.g. rollout.row_buckets=[8, 32]): a one-row prefill is padded to
rows_for(1) rows, yet as a prefix it holds one row, so long prompts (prefilled in pieces), Engine.prefill
on an existing prefix and Driver.warmup work, with the tokens of an engine whose buckets contain 1."""

import numpy as np
import pytest

from prover_jax.sampling import Driver, Engine, Request, SamplingParams

from helpers.tiny import prompt

HOT = SamplingParams(temperature=1.0)


@pytest.fixture(scope="module")
def engines(tiny_engine):
    """The same model with row buckets (1, 2, 4) and (2, 4); one length bucket (a short warmup)."""
    kw = dict(max_concurrent_decodes=3, max_prefill_length=16, max_target_length=96, length_buckets=(16,))
    plain, padded = (Engine(tiny_engine._model, **kw, row_buckets=rows) for rows in ((), (2, 4)))
    assert plain.rows_for(1) == 1 and padded.row_buckets == (2, 4) and padded.rows_for(1) == 2
    return plain, padded


def play(engine, warmup=False):
    """Completions of a 40-token prompt (3 prefill pieces), then of its extension by 20 tokens (2
    pieces) beside a short prompt; and the compilations they took."""
    from prover_jax.training.metrics import CompileCounter

    driver = Driver(engine)
    if warmup:
        assert driver.warmup() > 0
    counter = CompileCounter()
    [[alone]] = driver.run([Request(prompt(40, 1).tolist(), HOT, max_new_tokens=5, seed=3, keep_context=True)])
    out = driver.run([Request(prompt(20, 3).tolist(), HOT, max_new_tokens=3, seed=4, context=alone.context),
                      Request(prompt(5, 2).tolist(), max_new_tokens=4)])
    compiles = counter.take()
    return [alone] + [c for group in out for c in group], compiles


def test_long_prompts_and_warmup_without_a_one_row_bucket(engines):
    plain, padded = engines
    want, _ = play(plain)
    got, compiles = play(padded, warmup=True)
    assert compiles == 0  # warmup compiled the one-row prefix's programs too
    for a, b in zip(got, want):
        assert a.tokens == b.tokens and a.finish_reason == b.finish_reason
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)


def test_prefill_on_an_existing_prefill(engines):
    """Engine.prefill gives one cache row whatever the row buckets: it extends as a prefix."""
    out = []
    for engine in engines:
        params, pad = engine.load_params(), lambda t: np.pad(t, (0, 16 - len(t)))  # the compiled length
        first, _ = engine.prefill(params=params, padded_tokens=pad(prompt(6, 4)), true_length=6)
        assert engine._model.cache_lengths(first.cache).shape == (1,)
        prefix, result = engine.prefill(params=params, existing_prefix=first, padded_tokens=pad(prompt(5, 5)),
                                        true_length=5, sampler=HOT, rng=2)
        assert engine._model.cache_lengths(prefix.cache).tolist() == [11]
        out.append((int(result.tokens[0]), float(result.logprobs[0])))
    assert out[0][0] == out[1][0]
    np.testing.assert_allclose(out[0][1], out[1][1], atol=1e-5)
