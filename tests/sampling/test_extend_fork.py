"""Extension, fork, stop strings, weight swaps, queueing and a sharded decode state, each checked
against a fresh prefill of the full text (what the driver must be equivalent to)."""

import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from prover_jax import sharding
from prover_jax.models import qwen3_5
from prover_jax.sampling import STOP, Context, Driver, Engine, Request, SamplingParams

from helpers.tiny import DIMS, prompt, tiny_model

MAX_LEN = 96  # the shared tiny_engine's (tests/conftest.py)
ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789<>"  # one char per id
HOT = SamplingParams(temperature=1.0)


def decode(ids):
    return "".join(ALPHABET[i] for i in ids)


def make_model(seed=0, mesh=None):
    model = tiny_model(seed=seed, logit_scale=30.0)
    return model if mesh is None else qwen3_5.shard_model(model, mesh)


@pytest.fixture(scope="module")
def engine(tiny_engine):
    assert tiny_engine.max_target_length == MAX_LEN
    return tiny_engine


def fresh(driver, tokens, **kw):
    [[c]] = driver.run([Request(list(tokens), **kw)])
    return c


def assert_same(a, b):
    assert a.tokens == b.tokens
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)


@pytest.mark.parametrize("sampling", [SamplingParams(), HOT], ids=["greedy", "sampled"])
def test_extension_equals_fresh_prefill(engine, sampling):
    """Three turns, each prefilling only [last token] + observation on the kept cache, equal one
    fresh request over the whole history (also when other requests share the batch)."""
    driver = Driver(engine)
    history = list(prompt(7, 0))
    observations = [prompt(5, 1), prompt(20, 2), np.zeros(0, np.int32)]  # 20 > max_prefill: 2 pieces
    [[turn]] = driver.run([Request(history, sampling, max_new_tokens=6, seed=10, keep_context=True)])
    history += turn.tokens
    for t, obs in enumerate(observations):
        others = [Request(prompt(9, 50 + t), HOT, max_new_tokens=11, seed=t)]
        before = driver.stats["prefill_tokens"]
        [[turn], _] = driver.run([Request(obs, sampling, max_new_tokens=5, seed=20 + t,
                                          context=turn.context, keep_context=True)] + others)
        assert driver.stats["prefill_tokens"] - before == 1 + len(obs) + 9  # new tokens only
        history += list(obs)
        assert turn.context.length == len(history) + len(turn.tokens)
        assert_same(turn, fresh(Driver(engine), history, sampling=sampling, max_new_tokens=5, seed=20 + t))
        history += turn.tokens


def test_fork_prefills_once_and_matches(engine):
    driver = Driver(engine)
    tokens = prompt(13, 3)
    [group] = driver.run([Request(tokens, max_new_tokens=8, num_samples=4)])
    assert driver.stats["prefill_tokens"] == 13  # one prefill for the 4 samples (3 slots: queued)
    single = fresh(Driver(engine), tokens, max_new_tokens=8)
    for c in group:
        assert_same(c, single)
    # sampled fork: samples differ, and each is independent of what else runs
    req = Request(tokens, SamplingParams(temperature=1.5), max_new_tokens=10, seed=5, num_samples=5)
    [alone] = Driver(engine).run([req])
    [mixed, _] = Driver(engine).run([req, Request(prompt(4, 9), HOT, max_new_tokens=12, seed=2)])
    assert len({tuple(c.tokens) for c in alone}) > 1
    for a, b in zip(alone, mixed):
        assert_same(a, b)


def test_fork_from_context(engine):
    """K continuations of a kept sequence equal fresh prefills of the whole text (greedy)."""
    driver = Driver(engine)
    tokens = list(prompt(10, 4))
    [[first]] = driver.run([Request(tokens, max_new_tokens=4, keep_context=True)])
    obs = list(prompt(3, 5))
    [group] = driver.run([Request(obs, max_new_tokens=6, num_samples=3, context=first.context,
                                  keep_context=True)])
    ref = fresh(Driver(engine), tokens + first.tokens + obs, max_new_tokens=6)
    for c in group:
        assert_same(c, ref)
        assert c.context.length == len(tokens) + 4 + 3 + 6



@pytest.mark.parametrize("cached, new", [(89, 3), (85, 10)], ids=["one_piece", "two_pieces"])
def test_extension_at_the_end_of_the_cache(engine, cached, new):
    """An extension whose padded prefill piece would run past the cache (89 + 8 > 96; 85 + 16 > 96)
    is split into pieces that fit, so it is written where it belongs: it equals a fresh prefill."""
    driver = Driver(engine)
    tokens = list(prompt(cached, 8))
    [[first]] = driver.run([Request(tokens, max_new_tokens=1, keep_context=True)])
    obs = list(prompt(new - 1, 9))
    budget = MAX_LEN - cached - new
    ext = fresh(driver, obs, max_new_tokens=budget, context=first.context)
    assert_same(ext, fresh(Driver(engine), tokens + first.tokens + obs, max_new_tokens=budget))


def test_stop_strings_and_ids(engine):
    tokens = prompt(6, 6)
    plain = fresh(Driver(engine), tokens, max_new_tokens=20)
    text = decode(plain.tokens)
    stop = text[5:7]  # ends inside the 7th token at the latest
    end = text.index(stop) + len(stop)
    driver = Driver(engine, decode_fn=decode)
    c = fresh(driver, tokens, max_new_tokens=20, stop_strings=("never", stop), keep_context=True)
    assert c.finish_reason == STOP and c.stop == stop and c.tokens == plain.tokens[:end]
    assert isinstance(c.context, Context) and c.context.last_token == c.tokens[-1]
    c = fresh(driver, tokens, max_new_tokens=20, stop_ids=(plain.tokens[3],))
    assert c.tokens == plain.tokens[:plain.tokens.index(plain.tokens[3]) + 1] and c.finish_reason == STOP
    with pytest.raises(ValueError, match="decode_fn"):
        Driver(engine).run([Request(tokens, stop_strings=("x",))])
    with pytest.raises(ValueError, match="not one string"):
        Request(tokens, stop_strings="</action>")


def test_weight_swap_without_recompile(engine):
    tokens = prompt(9, 7)
    driver = Driver(engine)
    before = fresh(driver, tokens, max_new_tokens=8)
    compiled = engine.compiled_shapes()
    other = nnx.split(make_model(seed=1))[1]
    driver.update_params(other)
    after = fresh(driver, tokens, max_new_tokens=8)
    assert engine.compiled_shapes() == compiled
    ref_engine = Engine(make_model(seed=1), max_concurrent_decodes=3, max_prefill_length=16,
                        max_target_length=MAX_LEN)
    assert_same(after, fresh(Driver(ref_engine), tokens, max_new_tokens=8))
    assert after.tokens != before.tokens


def test_submit_step_queueing(engine):
    """More requests than slots, submitted while others decode: each equals its run alone."""
    reqs = [Request(prompt(3 + 2 * i, 20 + i), HOT if i % 2 else SamplingParams(), max_new_tokens=4 + i,
                    seed=i) for i in range(7)]
    alone = [fresh(Driver(engine), r.prompt, sampling=r.sampling, max_new_tokens=r.max_new_tokens,
                   seed=r.seed) for r in reqs]
    driver = Driver(engine)
    tickets, got = {}, {}
    for r in reqs[:4]:
        tickets[driver.submit(r)] = len(tickets)
    for _ in range(3):
        for f in driver.step():
            got[tickets[f.ticket]] = f.completion
    for r in reqs[4:]:
        tickets[driver.submit(r)] = len(tickets)
    while not driver.idle:
        for f in driver.step():
            got[tickets[f.ticket]] = f.completion
    assert sorted(got) == list(range(7))
    for i, a in enumerate(alone):
        assert_same(got[i], a)


def test_bad_input_keeps_driver_usable(engine):
    driver = Driver(engine)
    good = Request(prompt(5, 8), max_new_tokens=3)
    for bad, match in [(Request([1, 2, DIMS["vocab_size"]]), "outside the vocabulary"),
                       (Request([1.5, 2.0]), "integer token ids"),
                       (Request([]), "empty prompt"),
                       (Request(prompt(MAX_LEN + 1, 0)), "max_target_length")]:
        with pytest.raises(ValueError, match=match):
            driver.run([good, bad])  # validated up front: nothing of this batch runs
        assert driver.idle
    with pytest.raises(ValueError, match="Context"):
        Request([1], context=[1, 2])
    [[c]] = driver.run([Request(prompt(MAX_LEN - 2, 1), max_new_tokens=1, keep_context=True)])
    with pytest.raises(ValueError, match="max_target_length"):
        driver.run([Request([1, 2, 3], context=c.context)])
    assert fresh(driver, good.prompt, max_new_tokens=3).tokens == fresh(Driver(engine), good.prompt,
                                                                        max_new_tokens=3).tokens


@pytest.mark.parametrize("shape,slots,kv_spec", [
    ((2, 2, 2), 4, P(("data", "fsdp"), None, "tensor", None)),  # kv heads (2) over tensor
    ((1, 2, 4), 8, P(("fsdp", "tensor"), None, None, None)),  # 2 kv heads cannot split 4 ways: slots do
], ids=["heads-over-tensor", "slots-over-tensor"])
def test_sharded_decode_state(shape, slots, kv_spec):
    """Slots over data x fsdp, cache heads over tensor (or slots, where the heads do not divide it):
    same tokens as one device, and the KV cache is never copied onto every tensor shard."""
    mesh = sharding.make_mesh(shape)
    engine = Engine(make_model(mesh=mesh), max_concurrent_decodes=slots, max_prefill_length=16,
                    max_target_length=MAX_LEN)
    state = engine.init_decode_state()
    kv = next(layer for layer in state.cache.layers if hasattr(layer, "k")).k
    assert len(kv.sharding.device_set) == 8 and kv.sharding.spec == kv_spec
    reqs = [Request(prompt(4 + 3 * i, 30 + i), HOT if i % 2 else SamplingParams(), max_new_tokens=5,
                    seed=i) for i in range(5)]
    ref_engine = Engine(make_model(), max_concurrent_decodes=4, max_prefill_length=16,
                        max_target_length=MAX_LEN)
    driver = Driver(engine)
    for got, want in zip(driver.run(reqs), Driver(ref_engine).run(reqs)):
        assert_same(got[0], want[0])
    assert driver._state.cache.layers[1].k.sharding == kv.sharding  # layout kept across steps
