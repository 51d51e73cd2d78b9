"""Stop strings matched on token ids (the device automaton) stop exactly where matching the decoded
text does: strings spanning several tokens, inside one longer token, overlapping themselves."""

import numpy as np
import pytest

from prover_jax.rollout.tokenizer import train_tokenizer
from prover_jax.sampling import STOP, Driver, Request, SamplingParams
from prover_jax.sampling.stops import first_match, token_bytes, transitions

from helpers.tiny import DIMS, prompt

HOT = SamplingParams(temperature=1.0)
# token t decodes to PIECES[t]: one to four characters, so strings span tokens or sit inside one
_rng = np.random.default_rng(3)
PIECES = ["".join(_rng.choice(list("ab<>/x"), size=_rng.integers(1, 5))) for _ in range(DIMS["vocab_size"])]


def decode(ids):
    return "".join(PIECES[i] for i in ids)


def host_match(tokens, stop, pieces):
    """First index where the automaton table reaches the end of `stop` (the device's rule, on the host)."""
    table = transitions(stop.encode(), [p.encode() for p in pieces])
    q = 0
    for i, t in enumerate(tokens):
        q = table[q, t]
        if q == len(stop.encode()):
            return i
    return None


@pytest.mark.parametrize("stop", ["ab", "aab", "abab", "</a>", "b>x", "xxx", "<"])
def test_table_equals_text_matching(stop):
    rng = np.random.default_rng(len(stop))
    for _ in range(200):
        tokens = rng.integers(0, len(PIECES), size=rng.integers(1, 30)).tolist()
        assert host_match(tokens, stop, PIECES) == first_match(tokens, stop, decode)


def test_byte_level_token_bytes_concatenate_to_the_decoded_text():
    texts = ["go to cabinet 1", "<action>take apple 1</action>", "café naïve — 東京 ok", "a  b\n\tc"] * 4
    tok = train_tokenizer(texts, vocab_size=300)
    pieces = token_bytes(tok)
    rng = np.random.default_rng(0)
    for text in texts[:4]:
        ids = tok.encode(text, add_special_tokens=False)
        assert b"".join(pieces[i] for i in ids) == tok.decode(ids).encode() == text.encode()
    for _ in range(50):  # any id sequence, special tokens included
        ids = rng.integers(0, len(tok), size=12).tolist()
        assert b"".join(pieces[i] for i in ids).decode(errors="replace") == tok.decode(ids)
    # a multi-byte stop string across tokens
    ids = tok.encode("café naïve — 東京 ok", add_special_tokens=False)
    row = transitions("東京".encode(), pieces)
    q, hit = 0, None
    for i, t in enumerate(ids):
        q = row[q, t]
        if q == len("東京".encode()):
            hit = i
            break
    assert hit is not None and hit == first_match(ids, "東京", tok.decode)


@pytest.fixture(scope="module")
def engine(tiny_engine):
    return tiny_engine


def stops_of(text_tokens):
    """A string spanning several tokens and one strictly inside a longer token of `text_tokens`."""
    bounds = np.cumsum([len(PIECES[t]) for t in text_tokens])
    text = decode(text_tokens)
    start = int(bounds[4]) - 1  # ends a char into token 6: spans tokens 5 and 6 at least
    spanning = text[start:start + 3]
    inner = next(PIECES[t][1:3] for t in text_tokens[3:] if len(PIECES[t]) == 4)
    return spanning, inner


@pytest.mark.parametrize("steps_per_call", [1, 4])
def test_driver_stops_where_text_matching_does(engine, steps_per_call):
    tokens = prompt(6, 6).tolist()
    plain = Driver(engine, steps_per_call=steps_per_call).run(
        [Request(tokens, HOT, max_new_tokens=40, seed=5)])[0][0]
    assert len(plain.tokens) == 40
    driver = Driver(engine, decode_fn=decode, steps_per_call=steps_per_call)
    for stop in stops_of(plain.tokens) + ("<<<<>>>>never",):
        end = first_match(plain.tokens, stop, decode)
        [[c]] = driver.run([Request(tokens, HOT, max_new_tokens=40, seed=5, stop_strings=(stop, "zzz"))])
        if end is None:
            assert c.tokens == plain.tokens and c.finish_reason == "length"
        else:
            assert c.tokens == plain.tokens[:end + 1], stop
            assert c.finish_reason == STOP and c.stop == stop
            assert stop in decode(c.tokens) and stop not in decode(c.tokens[:-1])
        np.testing.assert_allclose(c.logprobs, plain.logprobs[:len(c.tokens)], atol=1e-5)


def test_first_token_ends_and_capacity(engine):
    tokens = prompt(5, 2).tolist()
    plain = Driver(engine).run([Request(tokens, max_new_tokens=3)])[0][0]
    driver = Driver(engine, decode_fn=decode)
    [[c]] = driver.run([Request(tokens, max_new_tokens=3, stop_strings=(PIECES[plain.tokens[0]],),
                                keep_context=True)])
    assert c.tokens == plain.tokens[:1] and c.finish_reason == STOP
    assert c.context.length == len(tokens) + 1
    [[c]] = driver.run([Request(tokens, max_new_tokens=1)])
    assert c.tokens == plain.tokens[:1] and c.finish_reason == "length"
    with pytest.raises(ValueError, match="at most 4 distinct stop strings"):
        driver.run([Request(tokens, stop_strings=("q1", "q2", "q3", "q4", "q5"))])


@pytest.mark.parametrize("buckets", [{}, dict(row_buckets=(1, 3), length_buckets=(5, 12))],
                         ids=["powers-of-two", "row-and-length-buckets"])
def test_warmup_leaves_nothing_to_compile(engine, buckets):
    """After Driver.warmup, requests of any prompt length, fan-out and extension compile nothing (with
    the engine's own row and length buckets too)."""
    from prover_jax.sampling import Engine
    from prover_jax.sampling.engine_types import all_lengths
    from prover_jax.training.metrics import CompileCounter

    if buckets:
        engine = Engine(engine._model, max_concurrent_decodes=engine.max_concurrent_decodes,
                        max_prefill_length=engine.max_prefill_length,
                        max_target_length=engine.max_target_length, **buckets)
        assert all_lengths(engine.length_buckets, 8, engine.max_prefill_length) == [5, 12, 16]
    driver = Driver(engine, decode_fn=decode)
    assert driver.warmup(stop_strings=("b>x",)) > 0
    counter = CompileCounter()
    rng = np.random.default_rng(0)
    reqs = [Request(rng.integers(0, DIMS["vocab_size"], n).tolist(), HOT, max_new_tokens=6, seed=i,
                    num_samples=k, stop_strings=("b>x",), keep_context=True)
            for i, (n, k) in enumerate([(3, 1), (9, 2), (16, 1), (40, 1), (5, 3)])]
    out = driver.run(reqs)
    ctx = [c.context for group in out for c in group if c.context is not None]
    driver.run([Request(rng.integers(0, DIMS["vocab_size"], 4).tolist(), HOT, max_new_tokens=4, context=x)
                for x in ctx[:3]])
    assert counter.take() == 0


def test_stop_length_is_bounded_by_the_table_size():
    """The [P, 1 + bytes, V] int16 table stays within TABLE_BYTES: on Qwen3.5's 248k vocabulary with 8 rows a
    stop string may have 66 bytes (a 1024-byte one would need a 4 GB table on the host and the device)."""
    from prover_jax.sampling.stops import MAX_STOP_BYTES, TABLE_BYTES, StopStrings, max_stop_bytes
    assert max_stop_bytes(248_320, 8) == 66 and 8 * 67 * 248_320 * 2 <= TABLE_BYTES < 8 * 68 * 248_320 * 2
    assert max_stop_bytes(1024, 4) == MAX_STOP_BYTES
    stops = StopStrings([b"a"] * 248_320, capacity=8)
    with pytest.raises(ValueError, match="must have 1 to 66 UTF-8 bytes"):
        stops.index("x" * 67)
    assert stops.strings == []
