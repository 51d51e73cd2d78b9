"""Qwen3 (dense) against transformers' Qwen3ForCausalLM (torch CPU, fp32) on tiny random checkpoints: the
logits of plain, left-padded and packed rows; decoding through the cache (prefill, ragged extension,
one-token steps, the sampling engine) equals the full forward; the runtime's scan / remat / kernels
give the same logits and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from prover_jax.models import qwen3
from prover_jax.models.qwen3_5.model import Runtime

from helpers import hf as F
from helpers.qwen3_hf import TINY3, make_checkpoint

TOL = 2e-4
V = TINY3["vocab_size"]

# name -> (tied, rope_theta, overrides, sequence length)
CASES = {
    "tied_gqa2_T70": (True, 10000.0, {}, 70),
    "untied_gqa4_theta1e6_T45": (False, 1e6, dict(num_attention_heads=8, num_key_value_heads=2, head_dim=8), 45),
    "tied_mha_bias_theta5e5_T33": (True, 5e5, dict(num_key_value_heads=4, attention_bias=True), 33),
    "untied_gqa4_bias_hd32_T130": (False, 2.5e4, dict(num_attention_heads=4, num_key_value_heads=1, head_dim=32,
                                                      num_hidden_layers=2, attention_bias=True), 130),
}


def tokens(B, T, seed):
    return np.random.RandomState(seed).randint(0, V, (B, T)).astype(np.int32)


@pytest.mark.parametrize("name", sorted(CASES))
def test_logits_match_transformers(name, tmp_path):
    tied, theta, over, T = CASES[name]
    hf = make_checkpoint(tmp_path, tied=tied, rope_theta=theta, **over)
    model = qwen3.load_hf(str(tmp_path))
    assert model.config.rope_theta == theta and model.config.tie_word_embeddings is tied
    assert hasattr(model, "lm_head") is not tied
    assert model.config.param_count() == hf.num_parameters()
    toks = tokens(2, T, 1)
    ours = np.asarray(model(jnp.asarray(toks)))
    ref = F.hf_logits(hf, toks)
    diff = float(np.abs(ours - ref).max())
    print(f"parity {name}: max |dlogit| = {diff:.2e}")
    assert ours.dtype == np.float32 and ours.shape == ref.shape
    assert diff <= TOL


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(our model, transformers' model) of one untied GQA checkpoint with biases, theta 1e6."""
    path = tmp_path_factory.mktemp("qwen3")
    hf = make_checkpoint(path, tied=False, rope_theta=1e6, num_attention_heads=8, num_key_value_heads=2,
                         head_dim=8, attention_bias=True)
    return qwen3.load_hf(str(path)), hf


def test_left_padded_batch_matches_transformers(checkpoint):
    model, hf = checkpoint
    rng = np.random.RandomState(2)
    lengths = [50, 21, 6]
    T = max(lengths)
    toks, mask = np.zeros((3, T), np.int32), np.zeros((3, T), np.int32)
    for i, n in enumerate(lengths):
        toks[i, T - n:] = rng.randint(2, V, n)
        mask[i, T - n:] = 1
    positions = np.clip(np.cumsum(mask, axis=1) - 1, 0, None).astype(np.int32)
    ours = np.asarray(model(jnp.asarray(toks), mask_BxT=jnp.asarray(mask), positions_BxT=jnp.asarray(positions)))
    ref = F.hf_logits(hf, toks, mask=mask, positions=positions)
    assert float(np.abs(ours - ref)[mask.astype(bool)].max()) <= TOL


@pytest.mark.parametrize("attention", ["dense", "blocked", "xla"])
def test_packed_row_equals_the_sequences_run_apart(checkpoint, attention):
    """Two sequences and padding in one row (segment ids 1, 2, 0): each sequence's logits are
    transformers' of that sequence alone; a second row holds one sequence."""
    model, hf = checkpoint
    a, b = tokens(1, 37, 3)[0], tokens(1, 50, 4)[0]
    T = 96
    row0 = np.concatenate([a, b, np.zeros(T - 87, np.int32)])
    seg0 = np.concatenate([np.ones(37), 2 * np.ones(50), np.zeros(T - 87)]).astype(np.int32)
    row1 = np.concatenate([b, np.zeros(T - 50, np.int32)])
    seg1 = (np.arange(T) < 50).astype(np.int32)
    model.runtime = Runtime(attention=attention)
    try:
        rows, seg = jnp.asarray(np.stack([row0, row1])), jnp.asarray(np.stack([seg0, seg1]))
        out = np.asarray(model(rows, segment_ids_BxT=seg))
    finally:
        model.runtime = Runtime()
    ref_a, ref_b = F.hf_logits(hf, a[None])[0], F.hf_logits(hf, b[None])[0]
    for got, ref in ((out[0, :37], ref_a), (out[0, 37:87], ref_b), (out[1, :50], ref_b)):
        assert float(np.abs(got - ref).max()) <= TOL


def random_model(cfg, seed=0, **kw):
    """A Qwen3 of `cfg` with norm weights (and biases) moved off their init values."""
    model = qwen3.Qwen3(cfg, rngs=nnx.Rngs(seed), **kw)
    for i, (path, var) in enumerate(nnx.to_flat_state(nnx.state(model))):
        if path[-1] in ("weight", "bias"):
            noise = jax.random.normal(jax.random.PRNGKey(i), var.get_value().shape)
            var.set_value((var.get_value() + 0.3 * noise).astype(var.get_value().dtype))
    return model


CFG = qwen3.Qwen3Config(vocab_size=80, hidden_size=48, intermediate_size=64, num_hidden_layers=3,
                        num_attention_heads=6, num_key_value_heads=2, head_dim=16, rope_theta=5e5,
                        attention_bias=True)


def test_prefill_then_steps_equals_full_forward():
    """Prefill 120 tokens into a 300-position cache, then one-token jitted steps across the CPU attention
    window edge (128 of windows [128, 300]): every logit equals the full forward's."""
    model = random_model(CFG)
    toks = jax.random.randint(jax.random.PRNGKey(1), (3, 140), 0, CFG.vocab_size)
    full = model(toks)
    cache = qwen3.init_cache(CFG, 3, 300)
    logits, cache = model(toks[:, :120], cache=cache)
    np.testing.assert_allclose(logits, full[:, :120], atol=1e-4)
    step = nnx.jit(lambda m, t, c: m(t, cache=c))
    for t in range(120, 140):
        logits, cache = step(model, toks[:, t:t + 1], cache)
        np.testing.assert_allclose(logits[:, 0], full[:, t], atol=1e-4)
    np.testing.assert_array_equal(cache.pos, [140] * 3)


def test_ragged_prefill_and_extension():
    """Right-padded rows of different true lengths, then a multi-token extension of every row."""
    model = random_model(CFG, seed=1)
    toks = jax.random.randint(jax.random.PRNGKey(2), (3, 48), 0, CFG.vocab_size)
    lens = jnp.array([20, 45, 3], jnp.int32)
    cache = qwen3.init_cache(CFG, 3, 128)
    _, cache = model(toks, cache=cache, valid_len_B=lens)
    ext = jax.random.randint(jax.random.PRNGKey(9), (3, 12), 0, CFG.vocab_size)
    logits, cache = model(ext, cache=cache)
    for b in range(3):
        n = int(lens[b])
        ref = model(jnp.concatenate([toks[b, :n], ext[b]])[None])[0, n:]
        np.testing.assert_allclose(logits[b], ref, atol=1e-4)
    np.testing.assert_array_equal(cache.pos, lens + 12)
    with pytest.raises(ValueError, match="uncached forward only"):
        model(ext, cache=cache, mask_BxT=jnp.ones((3, 12), jnp.int32))


def test_bf16_cache_and_fp32_logits():
    model = random_model(CFG, dtype=jnp.bfloat16)
    cache = qwen3.init_cache(CFG, 1, 16, dtype=jnp.bfloat16)
    logits, cache = model(jnp.ones((1, 5), jnp.int32), cache=cache)
    assert logits.dtype == jnp.float32 and cache.layers[0].k.dtype == jnp.bfloat16
    full = np.asarray(model(jnp.ones((1, 5), jnp.int32)))
    assert float(np.abs(np.asarray(logits) - full).max()) < 0.1


def test_engine_greedy_equals_the_full_forward():
    """The sampling engine, unchanged, drives a Qwen3: prefill + insert + generate give the full forward's
    greedy tokens and log-probs."""
    from prover_jax.sampling import Engine, SamplingParams

    model = random_model(CFG.replace(attention_bias=False, tie_word_embeddings=True), seed=3)
    model.embed_tokens.set_value(model.embed_tokens.get_value() * 30.0)  # spread logits: no near ties
    engine = Engine(model, max_concurrent_decodes=2, max_prefill_length=16, max_target_length=40)
    params = engine.load_params()
    state = engine.init_decode_state()
    prompts = {0: tokens(1, 7, 5)[0] % CFG.vocab_size, 1: tokens(1, 12, 6)[0] % CFG.vocab_size}
    out = {}
    for slot, p in prompts.items():
        prefix, first = engine.prefill(params=params, padded_tokens=np.pad(p, (0, 16 - len(p))),
                                       true_length=len(p), sampler=SamplingParams())
        state = engine.insert(prefix, state, slot)
        out[slot] = ([int(first.tokens[0])], [float(first.logprobs[0])])
    for _ in range(8):
        state, res = engine.generate(params, state)
        for slot in out:
            out[slot][0].append(int(res.tokens[slot]))
            out[slot][1].append(float(res.logprobs[slot]))
    for slot, p in prompts.items():
        gen = np.asarray(out[slot][0])
        logits = model(jnp.asarray(np.concatenate([p, gen[:-1]]))[None])[0, len(p) - 1:]
        np.testing.assert_array_equal(gen, np.asarray(jnp.argmax(logits, -1)))
        ref_lp = jax.nn.log_softmax(logits, -1)[np.arange(len(gen)), gen]
        np.testing.assert_allclose(out[slot][1], ref_lp, atol=1e-4)


@pytest.mark.parametrize("runtime", [Runtime(scan_layers=True), Runtime(remat="full", attention="blocked"),
                                     Runtime(scan_layers=True, remat="dots", attention="xla")])
def test_runtime_paths_give_the_same_logits_and_gradients(runtime):
    model = random_model(CFG)
    graphdef, params = nnx.split(model)
    toks = jnp.asarray(tokens(2, 40, 7) % CFG.vocab_size)
    valid = jnp.asarray(np.arange(40)[None] < np.array([40, 31])[:, None])
    w = jnp.asarray(np.random.RandomState(1).randn(CFG.vocab_size), jnp.float32)

    def run(rt):
        def f(params):
            m = nnx.merge(graphdef, params)
            m.runtime = rt
            logits = m(toks, mask_BxT=valid)
            return jnp.sum(jnp.where(valid[..., None], logits * w, 0.0)), logits
        (_, logits), grads = jax.jit(jax.value_and_grad(f, has_aux=True))(params)
        return np.asarray(logits)[np.asarray(valid)], jax.tree.leaves(grads)

    (ref_logits, ref_grads), (logits, grads) = run(Runtime()), run(runtime)
    np.testing.assert_allclose(logits, ref_logits, rtol=2e-5, atol=2e-5)
    for a, b in zip(ref_grads, grads):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-5 * max(1.0, float(np.abs(a).max())))


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")
@pytest.mark.parametrize("shape", [(2, 2, 2), (1, 2, 4)])
def test_sharded_forward_and_decode_equal_one_device(checkpoint, tmp_path, shape):
    """Params placed by the rules table on a (data, fsdp, tensor) mesh of 8 CPU devices (biases and kv
    heads over tensor where they divide; the cache by `cache_axes`): the forward and a cached prefill +
    step give the single-device logits."""
    from prover_jax import sharding

    model, _ = checkpoint
    qwen3.save_hf(model, str(tmp_path))
    mesh = sharding.make_mesh(shape)
    sharded = qwen3.load_hf(str(tmp_path), mesh=mesh)
    shardings = qwen3.param_shardings(sharded, mesh)
    assert shardings["layers.0.self_attn.q_proj.bias"].spec == jax.sharding.PartitionSpec("tensor")
    assert shardings["layers.0.self_attn.k_proj.kernel"].spec[0] == "fsdp"
    toks = jnp.asarray(tokens(8, 24, 8))
    data = sharding.named_sharding(("batch", "length"), mesh, toks.shape)
    out = nnx.jit(lambda m, t: m(t), in_shardings=(None, data))(sharded, jax.device_put(toks, data))
    np.testing.assert_allclose(np.asarray(out), np.asarray(model(toks)), atol=1e-5)
    cache = qwen3.init_cache(model.config, 8, 32)
    cache = jax.device_put(cache, sharding.tree_shardings(sharded.cache_axes(shape[2]), cache, mesh))
    step = nnx.jit(lambda m, t, c: m(t, cache=c))
    _, cache = step(sharded, toks[:, :20], cache)
    logits, cache = step(sharded, toks[:, 20:21], cache)
    np.testing.assert_allclose(np.asarray(logits[:, 0]), np.asarray(out[:, 20]), atol=1e-5)
