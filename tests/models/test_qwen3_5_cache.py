"""Cached decode equals the full forward, for both layer kinds, with ragged rows."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from prover_jax.models import qwen3_5

from helpers.tiny import tiny_config

L, A = qwen3_5.LINEAR, qwen3_5.FULL
CFG = tiny_config((L, A, L, A), vocab_size=80, hidden_size=48, intermediate_size=64, head_dim=16)


def model_and_tokens(T=90, B=3, seed=0):
    model = qwen3_5.Qwen3_5(CFG, rngs=nnx.Rngs(seed))
    # random norm / gate parameters so every term matters
    for path, var in nnx.to_flat_state(nnx.state(model)):
        if path[-1] in ("weight", "dt_bias", "A_log"):
            var.set_value(var.get_value() + 0.3 * jax.random.normal(jax.random.PRNGKey(len(path)),
                                                                     var.get_value().shape))
    tokens = jax.random.randint(jax.random.PRNGKey(seed + 1), (B, T), 0, CFG.vocab_size)
    return model, tokens


def test_prefill_then_steps_equals_full_forward():
    check_prefill_then_steps()


def test_decode_attention_off_cpu_equals_full_forward(monkeypatch):
    """Off the CPU a decode step's attention takes the GQA einsums over the cache where it lies (the
    one-query layout is CPU only): the same function."""
    from prover_jax.models.common import attention

    monkeypatch.setattr(attention, "platform", lambda mesh: "tpu")
    check_prefill_then_steps(T=76)


def check_prefill_then_steps(T=90):
    model, tokens = model_and_tokens(T=T)
    full = model(tokens)
    P = 70  # prefill crosses the 64-token chunk
    cache = qwen3_5.init_cache(CFG, tokens.shape[0], 128)
    logits, cache = model(tokens[:, :P], cache=cache)
    np.testing.assert_allclose(logits, full[:, :P], atol=1e-4)
    step = nnx.jit(lambda m, t, c: m(t, cache=c))
    for t in range(P, tokens.shape[1]):
        logits, cache = step(model, tokens[:, t:t + 1], cache)
        np.testing.assert_allclose(logits[:, 0], full[:, t], atol=1e-4)
    assert list(cache.pos) == [tokens.shape[1]] * tokens.shape[0]


def test_attention_over_the_filled_window_equals_the_whole_cache(monkeypatch):
    """On CPU a cache of 640 positions is attended in windows of 128, 256 or 640 keys (none past half
    the cache), the smallest that holds every row's keys: decode steps across the window edges
    (127 -> 128 -> 129, 255 -> 257) and a ragged extension give the full forward's logits, and the
    whole-cache attention's to 1e-6."""
    from prover_jax.models.common import attention

    assert attention.windows(640) == [128, 256, 640] and attention.windows(128) == [128]
    assert attention.windows(1536) == [128, 256, 512, 1536] and attention.windows(256) == [128, 256]
    model, tokens = model_and_tokens(T=262)
    full = model(tokens)

    def run():
        cache = qwen3_5.init_cache(CFG, tokens.shape[0], 640)
        logits, cache = model(tokens[:, :120], cache=cache)
        out = [logits]
        step = nnx.jit(lambda m, t, c: m(t, cache=c))
        for t in range(120, tokens.shape[1]):
            logits, cache = step(model, tokens[:, t:t + 1], cache)
            out.append(logits)
        return jnp.concatenate(out, axis=1)

    windowed = run()
    np.testing.assert_allclose(windowed, full, atol=1e-4)
    monkeypatch.setattr(attention, "windows", lambda S: [S])
    np.testing.assert_allclose(windowed, run(), atol=1e-6)
    monkeypatch.undo()
    lens = jnp.array([20, 200, 3], jnp.int32)  # one long row sets the window of all three
    cache = qwen3_5.init_cache(CFG, 3, 640)
    _, cache = model(tokens[:, :208], cache=cache, valid_len_B=lens)
    ext = tokens[:, 208:262]
    logits, cache = model(ext, cache=cache)
    for b in range(3):
        n = int(lens[b])
        ref = model(jnp.concatenate([tokens[b, :n], ext[b]])[None])[0, n:]
        np.testing.assert_allclose(logits[b], ref, atol=1e-4)


def test_ragged_prefill_and_extension():
    """Rows with different true lengths (right padding) then a multi-token extension."""
    model, tokens = model_and_tokens(T=60)
    lens = jnp.array([20, 45, 3], jnp.int32)
    cache = qwen3_5.init_cache(CFG, 3, 128)
    _, cache = model(tokens[:, :48], cache=cache, valid_len_B=lens)  # padded block of 48
    ext = jax.random.randint(jax.random.PRNGKey(9), (3, 12), 0, CFG.vocab_size)
    logits, cache = model(ext, cache=cache)
    for b in range(3):
        n = int(lens[b])
        seq = jnp.concatenate([tokens[b, :n], ext[b]])[None]
        ref = model(seq)[0, n:]
        np.testing.assert_allclose(logits[b], ref, atol=1e-4)
    np.testing.assert_array_equal(cache.pos, lens + 12)


def test_uncached_arguments_are_refused_with_a_cache():
    """A mask or positions would be dropped in the cached mode (right padding via valid_len_B, positions
    from cache.pos): a named error instead of logits for the wrong tokens."""
    model, tokens = model_and_tokens(T=5, B=1)
    for kw in (dict(mask_BxT=jnp.ones((1, 5), jnp.int32)), dict(positions_BxT=jnp.zeros((1, 5), jnp.int32))):
        with pytest.raises(ValueError, match="uncached forward only"):
            model(tokens, cache=qwen3_5.init_cache(CFG, 1, 8), **kw)


def test_gdn_cache_state_is_fp32_with_bf16_compute():
    model = qwen3_5.Qwen3_5(CFG, rngs=nnx.Rngs(0), dtype=jnp.bfloat16)
    cache = qwen3_5.init_cache(CFG, 1, 16, dtype=jnp.bfloat16)
    logits, cache = model(jnp.ones((1, 5), jnp.int32), cache=cache)
    assert logits.dtype == jnp.float32
    assert cache.layers[0].state.dtype == jnp.float32 and cache.layers[1].k.dtype == jnp.bfloat16


def test_linear_only_model_decodes_with_cache():
    cfg = CFG.replace(num_hidden_layers=2, layer_types=(L, L))
    model = qwen3_5.Qwen3_5(cfg, rngs=nnx.Rngs(0))
    tokens = jax.random.randint(jax.random.PRNGKey(3), (2, 12), 0, cfg.vocab_size)
    full = model(tokens)
    cache = qwen3_5.init_cache(cfg, 2, 16)
    assert cache.max_length is None
    logits, cache = model(tokens[:, :10], cache=cache)
    for t in range(10, 12):
        step, cache = model(tokens[:, t:t + 1], cache=cache)
        np.testing.assert_allclose(step[:, 0], full[:, t], atol=1e-4)
    np.testing.assert_allclose(logits, full[:, :10], atol=1e-4)


def test_bf16_cached_mode_asks_dots_for_fp32_and_rounds_once():
    """In the cached mode a bf16 Linear takes its dot's fp32 accumulator and rounds it once (XLA:CPU
    would otherwise convert the weights to fp32 on every call); the value is the bf16 dot's to one
    rounding. The uncached mode, which training differentiates, keeps the plain bf16 dot."""
    from prover_jax.models.common.layers import Linear, f32_dot_outputs

    lin = Linear(48, 64, ("embed", "mlp"), rngs=nnx.Rngs(0), dtype=jnp.bfloat16, param_dtype=jnp.bfloat16)
    x = jax.random.normal(jax.random.PRNGKey(1), (3, 48), jnp.bfloat16)
    plain = lin(x)
    with f32_dot_outputs():
        acc = lin(x)
        inside = str(jax.make_jaxpr(lambda v: lin(v))(x))
    outside = str(jax.make_jaxpr(lambda v: lin(v))(x))
    assert "preferred_element_type=float32" in inside and "preferred_element_type=float32" not in outside
    assert acc.dtype == plain.dtype == jnp.bfloat16
    exact = np.asarray(x, np.float32) @ np.asarray(lin.kernel[...], np.float32)
    for y in (acc, plain):  # both within one bf16 rounding of the exact product
        np.testing.assert_allclose(np.asarray(y, np.float32), exact, rtol=2 ** -7, atol=1e-6)
    # a bf16 model's cached decode stays close to its own uncached forward
    model = qwen3_5.Qwen3_5(CFG, rngs=nnx.Rngs(0), dtype=jnp.bfloat16, param_dtype=jnp.bfloat16)
    tokens = jax.random.randint(jax.random.PRNGKey(2), (2, 20), 0, CFG.vocab_size)
    full = np.asarray(model(tokens))
    cache = qwen3_5.init_cache(CFG, 2, 32, dtype=jnp.bfloat16)
    logits, _ = model(tokens, cache=cache)
    assert float(np.abs(np.asarray(logits) - full).max()) < 0.05


def test_bf16_cache_writes_as_bits_on_cpu_are_the_scatter():
    """On CPU a 16-bit cache is written as its uint16 bit pattern (XLA:CPU would convert the whole cache
    to fp32 and back around a bf16 scatter): the same cache, bit for bit; fp32 caches are untouched."""
    from prover_jax.models.common.attention import write_at as _write_at

    cache = jax.random.normal(jax.random.PRNGKey(0), (3, 16, 2, 8), jnp.bfloat16)
    new = jax.random.normal(jax.random.PRNGKey(1), (3, 2, 2, 8), jnp.bfloat16)
    pos = jnp.asarray([0, 7, 14])
    plain, bits = _write_at(cache, new, pos, bits=False), _write_at(cache, new, pos, bits=True)
    assert bits.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(bits).view(np.uint16), np.asarray(plain).view(np.uint16))
    np.testing.assert_array_equal(np.asarray(plain[1, 7:9], np.float32), np.asarray(new[1], np.float32))
    assert "bitcast_convert_type" in str(jax.make_jaxpr(lambda c: _write_at(c, new, pos, bits=True))(cache))
    f32 = cache.astype(jnp.float32)
    assert "bitcast_convert_type" not in str(jax.make_jaxpr(
        lambda c: _write_at(c, new.astype(jnp.float32), pos, bits=True))(f32))


def test_bf16_tied_logits_on_cpu_contract_the_embedding_in_place():
    """A bf16 tied vocabulary projection on CPU is one dot_general over the embedding's last axis with
    fp32 accumulation (no transposed or fp32 copy of the table): the exact product of the bf16 values
    up to fp32 summation order, with the gradient of the E^T form."""
    cfg = tiny_config((L, A), vocab_size=80, hidden_size=48, intermediate_size=64, head_dim=16,
                      tie_word_embeddings=True)
    model = qwen3_5.Qwen3_5(cfg, rngs=nnx.Rngs(0), dtype=jnp.bfloat16, param_dtype=jnp.bfloat16)
    h = jax.random.normal(jax.random.PRNGKey(3), (2, 5, 48), jnp.bfloat16)
    E = model.embed_tokens[...]
    jaxpr = str(jax.make_jaxpr(model.logits)(h))
    assert "transpose" not in jaxpr and "preferred_element_type=float32" in jaxpr
    out = model.logits(h)
    assert out.dtype == jnp.float32 and out.shape == (2, 5, 80)
    exact = np.asarray(h, np.float32) @ np.asarray(E, np.float32).T
    np.testing.assert_allclose(np.asarray(out), exact, rtol=1e-5, atol=1e-5)
    g_new = jax.grad(lambda e: jnp.sum(jnp.sin(jax.lax.dot_general(
        h, e, (((2,), (1,)), ((), ())), preferred_element_type=jnp.float32))))(E)
    g_ref = jax.grad(lambda e: jnp.sum(jnp.sin(jnp.dot(h, e.T, preferred_element_type=jnp.float32))))(E)
    np.testing.assert_allclose(np.asarray(g_new, np.float32), np.asarray(g_ref, np.float32), rtol=2 ** -7, atol=1e-3)
