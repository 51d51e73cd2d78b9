"""Continuous batching returns, for every request, what running that request alone returns."""

import numpy as np
import pytest

from prover_jax.sampling import Driver, Engine, Request, SamplingParams
from prover_jax.sampling.driver import CACHE_FULL, LENGTH, STOP

from helpers.tiny import prompt, tiny_model

MAX_LEN = 40


@pytest.fixture(scope="module")
def engine():
    return Engine(tiny_model(logit_scale=30.0), max_concurrent_decodes=3, max_prefill_length=16,
                  max_target_length=MAX_LEN)


def requests():
    hot = SamplingParams(temperature=1.0, top_p=0.9)
    return [Request(prompt(5, 0), max_new_tokens=12),
            Request(prompt(20, 1), hot, max_new_tokens=6, seed=1),  # prefilled in two pieces
            Request(prompt(3, 2), max_new_tokens=1),
            Request(prompt(9, 3), SamplingParams(temperature=0.7, top_k=4), max_new_tokens=15, seed=3),
            Request(prompt(11, 4), hot, max_new_tokens=9, seed=4),
            Request(prompt(30, 5), max_new_tokens=20),  # cache fills after 10 tokens
            Request(prompt(2, 6), SamplingParams(temperature=1.5), max_new_tokens=7, seed=6)]


def test_length_buckets_pad_prompt_pieces_and_change_nothing(engine):
    """An engine with length_buckets pads every prompt piece to the least bucket that holds it
    (max_prefill_length always one), and its completions equal the power-of-two engine's."""
    bucketed = Engine(engine._model, max_concurrent_decodes=3, max_prefill_length=16, max_target_length=MAX_LEN,
                      length_buckets=(6, 11, 40))
    assert bucketed.length_buckets == (6, 11, 16) and engine.length_buckets == ()
    assert [bucketed.length_for(n) for n in (1, 6, 7, 11, 12, 16)] == [6, 6, 11, 11, 16, 16]
    assert [engine.length_for(n, 4) for n in (1, 5, 9, 16)] == [4, 8, 16, 16]
    reqs = requests()
    want = [c for [c] in Driver(engine).run(reqs)]
    got = [c for [c] in Driver(bucketed).run(reqs)]
    for i, (a, b) in enumerate(zip(want, got)):
        assert a.tokens == b.tokens and a.finish_reason == b.finish_reason, i
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
    with pytest.raises(ValueError, match="length_buckets"):
        Engine(engine._model, max_concurrent_decodes=3, max_prefill_length=16, max_target_length=MAX_LEN,
               length_buckets=(0, 8))


def test_batched_equals_alone(engine):
    reqs = requests()
    plain = [Driver(engine).run([r])[0][0] for r in reqs]
    eos = plain[0].tokens[4]  # a token that does occur
    driver = Driver(engine, eos_ids=(eos,))
    alone = [driver.run([r])[0][0] for r in reqs]
    batched = [c for [c] in driver.run(reqs)]
    for i, (a, b) in enumerate(zip(alone, batched)):
        assert a.tokens == b.tokens and a.finish_reason == b.finish_reason, i
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
    reasons = [c.finish_reason for c in batched]
    assert reasons[0] == STOP and batched[0].tokens == plain[0].tokens[:plain[0].tokens.index(eos) + 1]
    assert LENGTH in reasons
    for p, b in zip(plain, batched):  # an EOS run is the plain run cut at its first EOS
        assert b.tokens == p.tokens[:len(b.tokens)]
    assert plain[5].finish_reason == CACHE_FULL and len(plain[5].tokens) == MAX_LEN - 30 + 1
    assert all(len(c.tokens) <= r.max_new_tokens for c, r in zip(batched, reqs))
    assert len(batched[2].tokens) == 1


def test_bad_requests(engine):
    with pytest.raises(ValueError, match="max_new_tokens"):
        Request([1, 2], max_new_tokens=0)
    with pytest.raises(ValueError, match="empty prompt"):
        Driver(engine).run([Request([])])
    with pytest.raises(ValueError, match="max_target_length"):
        Driver(engine).run([Request(prompt(MAX_LEN + 1, 0))])


def test_cancel_drops_a_ticket_and_keeps_the_rest(engine):
    reqs = requests()
    alone = [Driver(engine).run([r])[0][0] for r in reqs]
    driver = Driver(engine)
    tickets = [driver.submit(r) for r in reqs]
    done = {}
    for _ in range(2):
        done.update({f.ticket: f.completion for f in driver.step()})
    decoding = {t: len(c.tokens) for t, _, c in driver.partial()}
    assert tickets[0] in decoding and tickets[6] not in decoding  # 3 slots: the last request is queued
    assert driver.cancel(tickets[0]) == 1 and driver.cancel(tickets[6]) == 1
    assert driver.cancel(tickets[0]) == 0  # nothing left of it
    assert tickets[0] not in {t for t, _, _ in driver.partial()}
    while not driver.idle:
        done.update({f.ticket: f.completion for f in driver.step()})
    assert sorted(done) == tickets[1:6]
    for t in tickets[1:6]:  # the freed slot served the others, whose samples did not change
        assert done[t].tokens == alone[t].tokens
        np.testing.assert_allclose(done[t].logprobs, alone[t].logprobs, atol=1e-5)
    assert driver.stats["cancelled"] == 2
    # what ticket 0 sampled before it was cancelled, the calls already issued included (ticket 6: none)
    assert 1 <= max(decoding[tickets[0]], 1) <= driver.stats["cancelled_tokens"] <= len(alone[0].tokens)
