"""Engine output equals the full forward; sampling controls behave; bad requests are refused."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from prover_jax.sampling import Engine, SamplingParams, kept_mask, sample

from helpers.tiny import prompt, tiny_config, tiny_model

CFG = tiny_config()
SLOTS, MAX_PREFILL, MAX_LEN = 4, 16, 40
GREEDY = SamplingParams()


@pytest.fixture(scope="module")
def setup():
    model = tiny_model(CFG, logit_scale=30.0)  # logits of std ~3: greedy choices far from ties
    engine = Engine(model, max_concurrent_decodes=SLOTS, max_prefill_length=MAX_PREFILL,
                    max_target_length=MAX_LEN)
    graphdef, params = nnx.split(model)
    # causal model: right padding to MAX_LEN does not change the logits of earlier positions
    forward = jax.jit(lambda p, t: nnx.merge(graphdef, p)(t))
    return engine, engine.load_params(), forward


def pad(tokens, length=MAX_PREFILL):
    return np.concatenate([tokens, np.zeros(length - len(tokens), tokens.dtype)])


def start(engine, params, state, slot, tokens, sampler=GREEDY, rng=None):
    """Prefill + insert; returns (state, first token, first logprob)."""
    prefix, first = engine.prefill(params=params, padded_tokens=pad(tokens), true_length=len(tokens),
                                   sampler=sampler, rng=rng)
    state = engine.insert(prefix, state, slot)
    return state, int(first.tokens[0]), float(first.logprobs[0])


def reference(forward, params, tokens, generated):
    """Full-forward argmax and log_softmax at each generated position (teacher-forced on `generated`)."""
    seq = np.concatenate([tokens, generated[:-1]]).astype(np.int32)
    logits = forward(params, jnp.asarray(pad(seq, MAX_LEN))[None])[0]
    pos = np.arange(len(tokens) - 1, len(seq))
    logp = jax.nn.log_softmax(logits[pos], axis=-1)
    return np.asarray(jnp.argmax(logits[pos], axis=-1)), np.asarray(logp[np.arange(len(pos)), generated])


def run_slots(engine, params, requests, steps, late=()):
    """requests: {slot: (tokens, sampler, rng)}; `late` slots are inserted after 3 steps.
    Returns {slot: (tokens, logprobs)} of steps + 1 tokens (first from prefill)."""
    state = engine.init_decode_state()
    out = {}
    for slot, (tokens, sampler, rng) in requests.items():
        if slot not in late:
            state, tok, lp = start(engine, params, state, slot, tokens, sampler, rng)
            out[slot] = ([tok], [lp])
    for step in range(steps + 3 * bool(late)):
        if step == 3:
            for slot in late:
                tokens, sampler, rng = requests[slot]
                state, tok, lp = start(engine, params, state, slot, tokens, sampler, rng)
                out[slot] = ([tok], [lp])
        state, res = engine.generate(params, state)
        for slot, (toks, lps) in out.items():
            if len(toks) <= steps:
                assert bool(res.valid[slot])
                toks.append(int(res.tokens[slot]))
                lps.append(float(res.logprobs[slot]))
    return {s: (np.array(t), np.array(lp)) for s, (t, lp) in out.items()}


def test_greedy_matches_full_forward_ragged_slots(setup):
    engine, params, forward = setup
    lens = {2: 3, 0: 7, 3: 12, 1: 1}
    requests = {slot: (prompt(n, slot), GREEDY, None) for slot, n in lens.items()}
    out = run_slots(engine, params, requests, steps=10)
    for slot, (toks, lps) in out.items():
        ref_toks, ref_lps = reference(forward, params, requests[slot][0], toks)
        np.testing.assert_array_equal(toks, ref_toks, err_msg=f"slot {slot}")
        np.testing.assert_allclose(lps, ref_lps, atol=1e-4, err_msg=f"slot {slot}")
        assert np.all(lps <= 0)


def test_request_independent_of_batch(setup):
    engine, params, _ = setup
    target = prompt(5, 7)
    alone = run_slots(engine, params, {0: (target, GREEDY, None)}, steps=8)[0]
    busy = {0: (prompt(9, 1), SamplingParams(temperature=1.0), jax.random.PRNGKey(1)),
            1: (prompt(2, 2), GREEDY, None),
            2: (target, GREEDY, None),
            3: (prompt(14, 3), SamplingParams(temperature=0.8, top_k=5), jax.random.PRNGKey(3))}
    together = run_slots(engine, params, busy, steps=8, late=(2,))[2]
    np.testing.assert_array_equal(together[0], alone[0])
    np.testing.assert_allclose(together[1], alone[1], atol=1e-5)


def test_same_seed_same_tokens(setup):
    engine, params, forward = setup
    sampler = SamplingParams(temperature=1.0, top_p=0.95)
    req = lambda seed: {1: (prompt(6, 5), sampler, jax.random.PRNGKey(seed))}
    a = run_slots(engine, params, req(42), steps=12)[1]
    b = run_slots(engine, params, req(42), steps=12)[1]
    c = run_slots(engine, params, req(43), steps=12)[1]
    np.testing.assert_array_equal(a[0], b[0])
    typed = run_slots(engine, params, {1: (prompt(6, 5), sampler, jax.random.key(42))}, steps=12)[1]
    np.testing.assert_array_equal(typed[0], a[0])
    assert not np.array_equal(a[0], c[0])
    # logprobs of sampled tokens are those of the raw (temperature 1) policy
    _, ref_lps = reference(forward, params, prompt(6, 5), a[0])
    np.testing.assert_allclose(a[1], ref_lps, atol=1e-4)


def test_temperature_sampling_chi_square():
    logits_V = jnp.array([2.0, 1.0, 0.5, 0.0, -1.0])
    n, temperature = 20000, 0.7
    logits = jnp.broadcast_to(logits_V, (n, 5))
    tokens, logprobs = sample(logits, jax.random.PRNGKey(0), jnp.full((n,), temperature),
                              jnp.zeros((n,), jnp.int32), jnp.ones((n,)))
    counts = np.bincount(np.asarray(tokens), minlength=5)
    expected = n * np.asarray(jax.nn.softmax(logits_V / temperature))
    chi2 = np.sum((counts - expected) ** 2 / expected)
    assert chi2 < 18.47, (chi2, counts, expected)  # df = 4, p = 0.001
    np.testing.assert_allclose(logprobs, jax.nn.log_softmax(logits_V)[tokens], atol=1e-6)


def numpy_kept(logits_V, top_k, top_p):
    order = np.argsort(-logits_V, kind="stable")
    k = len(order) if top_k == 0 else min(top_k, len(order))
    top = order[:k]
    p = np.exp(logits_V[top] - logits_V[top].max())
    p /= p.sum()
    n = 1 + int(np.sum(np.cumsum(p)[:-1] < top_p)) if top_p < 1 else k
    return set(top[:n].tolist())


def test_top_k_top_p_stay_in_kept_set():
    B, V = 512, 16
    logits = 2.0 * jax.random.normal(jax.random.PRNGKey(0), (B, V))
    top_k = jnp.array([0, 1, 3, 8] * (B // 4), jnp.int32)
    top_p = jnp.tile(jnp.array([1.0, 0.5, 0.9, 0.3, 0.7, 0.05, 0.99, 0.6]), B // 8)
    temperature = jnp.full((B,), 1.5)
    tokens, _ = sample(logits, jax.random.PRNGKey(1), temperature, top_k, top_p)
    mask = np.asarray(kept_mask(logits / 1.5, top_k, top_p))
    for b in range(B):
        kept = numpy_kept(np.asarray(logits[b]) / 1.5, int(top_k[b]), float(top_p[b]))
        assert set(np.flatnonzero(mask[b]).tolist()) == kept, b
        assert int(tokens[b]) in kept, b
    # top_k = 1 and greedy rows are the argmax
    np.testing.assert_array_equal(tokens[1::4], jnp.argmax(logits[1::4], axis=-1))
    greedy, _ = sample(logits, jax.random.PRNGKey(1), jnp.zeros((B,)), top_k, top_p)
    np.testing.assert_array_equal(greedy, jnp.argmax(logits, axis=-1))


def test_sampled_rows_draw_their_own_keys_whatever_the_greedy_rows():
    """The [B, V] draw is skipped only when every row is greedy: a sampled row's token is the
    categorical draw of its own key, with greedy rows beside it or not."""
    B, V = 6, 32
    logits = 3.0 * jax.random.normal(jax.random.PRNGKey(3), (B, V))
    keys = jax.random.split(jax.random.PRNGKey(4), B)
    zeros, ones = jnp.zeros((B,), jnp.int32), jnp.ones((B,))
    expected = jax.vmap(jax.random.categorical)(keys, logits)
    mixed, _ = sample(logits, keys, jnp.array([1.0, 0, 1, 0, 0, 1]), zeros, ones)
    every, _ = sample(logits, keys, ones, zeros, ones)
    greedy, _ = sample(logits, keys, jnp.zeros((B,)), zeros, ones)
    np.testing.assert_array_equal(every, expected)
    np.testing.assert_array_equal(np.asarray(mixed)[[0, 2, 5]], np.asarray(expected)[[0, 2, 5]])
    np.testing.assert_array_equal(np.asarray(mixed)[[1, 3, 4]], np.asarray(jnp.argmax(logits, -1))[[1, 3, 4]])
    np.testing.assert_array_equal(greedy, jnp.argmax(logits, -1))


def test_top_k_distribution_renormalised():
    logits_V = jnp.array([1.0, 0.8, 0.6, 0.4, 0.2, 0.0])
    n = 12000
    tokens, _ = sample(jnp.broadcast_to(logits_V, (n, 6)), jax.random.PRNGKey(2), jnp.ones((n,)),
                       jnp.full((n,), 3, jnp.int32), jnp.ones((n,)))
    counts = np.bincount(np.asarray(tokens), minlength=6)
    assert counts[3:].sum() == 0
    expected = n * np.asarray(jax.nn.softmax(logits_V[:3]))
    assert np.sum((counts[:3] - expected) ** 2 / expected) < 13.82  # df = 2, p = 0.001


def test_sampling_params_validation():
    for kw in (dict(temperature=-1.0), dict(top_k=-2), dict(top_p=0.0), dict(top_p=1.5)):
        with pytest.raises(ValueError):
            SamplingParams(**kw)


def test_bad_requests(setup):
    engine, params, _ = setup
    with pytest.raises(ValueError, match="max_prefill_length"):
        engine.prefill(params=params, padded_tokens=np.zeros(MAX_PREFILL + 1, np.int32))
    with pytest.raises(ValueError, match="empty prompt"):
        engine.prefill(params=params, padded_tokens=np.zeros(0, np.int32))
    with pytest.raises(ValueError, match="empty prompt"):
        engine.prefill(params=params, padded_tokens=np.zeros(8, np.int32), true_length=0)
    with pytest.raises(ValueError, match=r"outside the vocabulary.*\[-1, 64\]"):
        engine.prefill(params=params, padded_tokens=np.array([1, 64, -1, 3]))
    with pytest.raises(ValueError, match="slot"):
        engine.insert(None, engine.init_decode_state(), SLOTS)


def test_prefill_in_pieces_and_full_cache(setup):
    engine, params, _ = setup
    tokens = prompt(14, 9)
    whole, first = engine.prefill(params=params, padded_tokens=pad(tokens), true_length=14)
    part, _ = engine.prefill(params=params, padded_tokens=pad(tokens[:6]), true_length=6)
    part, first2 = engine.prefill(params=params, existing_prefix=part, padded_tokens=pad(tokens[6:]),
                                  true_length=8)
    assert int(first.tokens[0]) == int(first2.tokens[0]) and int(part.cache.pos[0]) == 14
    np.testing.assert_allclose(first.logprobs, first2.logprobs, atol=1e-5)
    # the slot steps until its cache holds MAX_LEN tokens, then reports invalid results
    state = engine.insert(whole, engine.init_decode_state(), 0)
    valid = []
    for _ in range(MAX_LEN - 14 + 2):
        state, res = engine.generate(params, state)
        valid.append(bool(res.valid[0]))
        assert not np.any(np.asarray(res.valid[1:]))
    assert valid == [True] * (MAX_LEN - 14) + [False] * 2
    state = engine.deactivate(state, 0)
    state, res = engine.generate(params, state)
    assert not bool(res.valid[0])
    with pytest.raises(ValueError, match="max_target_length"):
        engine.prefill(params=params, existing_prefix=state_prefix_full(whole), padded_tokens=pad(tokens))


def state_prefix_full(prefix):
    """`prefix` with its cache position moved to MAX_LEN - 4 (only the position is read)."""
    return prefix.replace(cache=prefix.cache.replace(pos=prefix.cache.pos + MAX_LEN - 4 - 14))


def test_raw_key_of_an_int_is_prngkey_data_built_on_the_host():
    from prover_jax.sampling.engine import raw_key
    for seed in (0, 1, 12345, 2 ** 31 - 1, 2 ** 32 - 1):
        got = raw_key(seed)
        assert isinstance(got, np.ndarray)
        np.testing.assert_array_equal(got, np.asarray(jax.random.key_data(jax.random.key(seed))))


def test_a_batch_of_prefilled_and_fresh_rows_compiles_once_per_shape():
    """On a mesh, continuing some rows from earlier prefixes and starting others fresh compiles the
    row stacking and the prefill once for a given [R, T], whatever the pattern of prefixed rows, and a
    continued row equals the same continuation prefilled alone."""
    from prover_jax.sharding import make_mesh
    from prover_jax.training.metrics import CompileCounter
    model = tiny_model(CFG, logit_scale=30.0)
    mesh = make_mesh((1, 1, 1), devices=jax.devices()[:1])
    engine = Engine(model, max_concurrent_decodes=SLOTS, max_prefill_length=MAX_PREFILL,
                    max_target_length=MAX_LEN, mesh=mesh)
    # weights placed on the mesh, as the trainer's are: prefixes come out committed to it, fresh rows not
    params = jax.device_put(engine.load_params(), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
    first = [engine.prefill(params=params, padded_tokens=pad(prompt(n, seed=n)), true_length=n,
                            sampler=GREEDY)[0] for n in (3, 5)]
    more = prompt(4, seed=9)

    def batch(pattern):
        prefixes = [first[i] if i is not None else None for i in pattern]
        return engine.prefill_batch(params=params, padded_tokens=np.stack([pad(more, 8)] * 4),
                                    true_lengths=[4] * 4, samplers=[GREEDY] * 4, rngs=[None] * 4,
                                    num_samples=[1] * 4, existing_prefixes=prefixes)

    batch([0, None, 1, None])  # compiles this shape
    counter = CompileCounter()
    outs = [batch(p) for p in ([None, 0, None, 1], [1, 0, None, None], [None, None, None, 0])]
    assert counter.take() == 0
    batch([None] * 4)  # fresh rows only: their empty cache is laid out as stacked rows are
    assert engine._prefill._cache_size() == 2  # the two single-row prompts' shape, and [4, 8]
    alone = engine.prefill(params=params, existing_prefix=first[0], padded_tokens=pad(more, 8),
                           true_length=4, sampler=GREEDY)[1]
    assert int(outs[2].token_N[3]) == int(alone.tokens[0])
    np.testing.assert_allclose(np.asarray(outs[2].logprob_N[3]), np.asarray(alone.logprobs[0]), atol=1e-5)


def test_extracted_rows_stack_without_moving(monkeypatch):
    """On a mesh, rows `extract` takes from the decode state are already in the layout the batched
    prefill stacks (no device_put per row, the per-turn host cost it was), and continuing them gives
    the tokens of the same rows continued one by one."""
    import prover_jax.sampling.rows as rows_module
    from prover_jax.sharding import make_mesh
    mesh = make_mesh((1, 1, 1), devices=jax.devices()[:1])
    engine = Engine(tiny_model(CFG, logit_scale=30.0), max_concurrent_decodes=SLOTS,
                    max_prefill_length=MAX_PREFILL, max_target_length=MAX_LEN, mesh=mesh)
    params = jax.device_put(engine.load_params(), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
    state = engine.init_decode_state()
    for slot in range(3):
        state = start(engine, params, state, slot, prompt(3 + slot, seed=slot))[0]
    state, _ = engine.generate(params, state)
    rows = [engine.extract(state, slot) for slot in range(3)]
    moved = []
    real_put = jax.device_put
    monkeypatch.setattr(rows_module.jax, "device_put", lambda *a, **k: moved.append(1) or real_put(*a, **k))
    more = prompt(4, seed=7)
    out = engine.prefill_batch(params=params, padded_tokens=np.stack([pad(more, 8)] * 3), true_lengths=[4] * 3,
                               samplers=[GREEDY] * 3, rngs=[None] * 3, num_samples=[1] * 3,
                               existing_prefixes=rows)
    assert moved == []
    monkeypatch.undo()
    for b, row in enumerate(rows):
        alone = engine.prefill(params=params, existing_prefix=row, padded_tokens=pad(more, 8), true_length=4,
                               sampler=GREEDY)[1]
        assert int(out.token_N[b]) == int(alone.tokens[0])


def test_row_buckets_pad_prefill_and_insert_to_few_shapes(setup):
    """With row_buckets=(3,) batched prefills and inserts of 1-3 rows all run the programs compiled for
    the first, and the tokens equal the default engine's (padding rows change nothing); bad buckets
    are refused."""
    from prover_jax.training.metrics import CompileCounter
    engine, params, _ = setup
    padded = Engine(tiny_model(CFG, logit_scale=30.0), max_concurrent_decodes=SLOTS,
                    max_prefill_length=MAX_PREFILL, max_target_length=MAX_LEN, row_buckets=(3,))
    assert padded.row_buckets == (3, 4) and engine.row_buckets == (1, 2, 4)
    assert [padded.rows_for(n) for n in (1, 3, 4, 5)] == [3, 3, 4, 8]

    prompts_of = {B: [prompt(3 + b, seed=10 * B + b) for b in range(B)] for B in (1, 2, 3)}

    def play(eng, B):
        prompts = prompts_of[B]
        prefix = eng.prefill_batch(params=params, padded_tokens=np.stack([pad(t) for t in prompts]),
                                   true_lengths=[len(t) for t in prompts], samplers=[GREEDY] * B,
                                   rngs=[None] * B, num_samples=[1] * B, existing_prefixes=[None] * B)
        state, r = eng.generate(params, eng.bulk_insert(prefix, eng.init_decode_state(), list(range(B))))
        return np.asarray(prefix.token_N)[:B], np.asarray(r.tokens)[:B]

    ours = [play(padded, 1)]
    counter = CompileCounter()
    ours += [play(padded, B) for B in (2, 3)]
    assert counter.take() == 0
    for B, (first, second) in zip((1, 2, 3), ours):
        want = play(engine, B)
        np.testing.assert_array_equal(first, want[0])
        np.testing.assert_array_equal(second, want[1])
    with pytest.raises(ValueError, match="row_buckets"):
        Engine(tiny_model(CFG), max_concurrent_decodes=SLOTS, max_prefill_length=MAX_PREFILL,
               max_target_length=MAX_LEN, row_buckets=(0, 4))


def test_engines_of_one_shape_share_their_programs_and_keep_their_own_weights(setup):
    """A second engine over another model of the same graph and sizes compiles nothing (programs.Programs)
    and decodes with its own weights; another slot count is another shape; the programs go with the
    last engine that holds them."""
    import gc
    import weakref

    engine, params, forward = setup
    run_slots(engine, params, {0: (prompt(6, 4), GREEDY, None)}, steps=4)  # this shape compiled
    other_model = tiny_model(CFG, seed=1, logit_scale=30.0)
    other = Engine(other_model, max_concurrent_decodes=SLOTS, max_prefill_length=MAX_PREFILL,
                   max_target_length=MAX_LEN)
    assert other._programs is engine._programs
    before = engine.compiled_shapes()
    tokens = prompt(6, 4)
    mine = run_slots(engine, params, {0: (tokens, GREEDY, None)}, steps=6)[0][0]
    theirs = run_slots(other, other.load_params(), {0: (tokens, GREEDY, None)}, steps=6)[0][0]
    assert engine.compiled_shapes() == before  # the second engine ran on the first one's executables
    other_forward = jax.jit(lambda p, t: nnx.merge(nnx.graphdef(other_model), p)(t))
    np.testing.assert_array_equal(theirs, reference(other_forward, other.load_params(), tokens, theirs)[0])
    np.testing.assert_array_equal(mine, reference(forward, params, tokens, mine)[0])
    assert not np.array_equal(mine, theirs)  # different weights, different greedy tokens

    wider = Engine(other_model, max_concurrent_decodes=2 * SLOTS, max_prefill_length=MAX_PREFILL,
                   max_target_length=MAX_LEN)
    assert wider._programs is not engine._programs
    gone = weakref.ref(wider._programs)
    del wider
    gc.collect()
    assert gone() is None
