"""Scale features of the uncached forward (model.runtime): layer scan, remat, delta-rule chunk/dtype,
splash attention, jax.nn.dot_product_attention (the GPU path, its xla implementation on CPU). Each must
give the same logits and gradients as the plain unrolled path."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from prover_jax.aot.flops import equations
from prover_jax.models import qwen3_5
from prover_jax.models.qwen3_5.model import Runtime, block_period, resolve_runtime

from helpers.tiny import tiny_config

LIN, FULL = qwen3_5.LINEAR, qwen3_5.FULL
CFG = tiny_config((LIN, LIN, LIN, FULL) * 2, head_dim=16)


def _inputs(B=2, T=40):
    rng = np.random.RandomState(0)
    tokens = jnp.asarray(rng.randint(0, CFG.vocab_size, (B, T)), jnp.int32)
    valid = jnp.asarray(np.arange(T)[None] < np.array([T, T - 9])[:, None])
    return tokens, valid


def _logits_and_grads(runtime: Runtime):
    model = qwen3_5.Qwen3_5(CFG, rngs=nnx.Rngs(0))
    model.runtime = runtime
    graphdef, params = nnx.split(model)
    tokens, valid = _inputs()
    w = jnp.asarray(np.random.RandomState(1).randn(CFG.vocab_size), jnp.float32)

    def f(params):
        logits = nnx.merge(graphdef, params)(tokens, mask_BxT=valid)
        return jnp.sum(jnp.where(valid[..., None], logits * w, 0.0)), logits

    (_, logits), grads = jax.jit(jax.value_and_grad(f, has_aux=True))(params)
    return np.asarray(logits), jax.tree.map(np.asarray, grads)


@pytest.fixture(scope="module")
def reference():
    return _logits_and_grads(Runtime())


def _assert_same(ref, got, rtol=2e-5, atol=2e-5):
    """Logits at valid positions (padding's are unspecified) and all gradients."""
    valid = np.asarray(_inputs()[1])
    np.testing.assert_allclose(got[0][valid], ref[0][valid], rtol=rtol, atol=atol)
    flat_ref, flat_got = jax.tree.leaves(ref[1]), jax.tree.leaves(got[1])
    assert len(flat_ref) == len(flat_got)
    for a, b in zip(flat_ref, flat_got):
        np.testing.assert_allclose(b, a, rtol=rtol, atol=atol * max(1.0, float(np.abs(a).max())))


@pytest.mark.parametrize("runtime", [
    Runtime(scan_layers=True),
    Runtime(remat="full"),
    Runtime(scan_layers=True, remat="dots"),
    Runtime(gdn_chunk=64),
    Runtime(gdn_chunk=64, gdn_inverse_block=16),
    Runtime(attention="splash", scan_layers=True),
    Runtime(attention="xla"),
    Runtime(attention="xla", scan_layers=True, remat="full", gdn_chunk=64),
], ids=["scan", "remat-full", "scan-remat-dots", "chunk64", "chunk64-blockwise", "splash-interpreted",
        "dot-product-xla", "dot-product-xla-scan-remat"])
def test_runtime_matches_unrolled(reference, runtime):
    _assert_same(reference, _logits_and_grads(runtime))


def test_bf16_delta_rule_stays_close(reference):
    logits, grads = _logits_and_grads(Runtime(gdn_chunk=64, gdn_matmul_dtype="bfloat16", gdn_inverse_block=16))
    err = np.abs(logits - reference[0]).max() / np.abs(reference[0]).max()
    assert err < 2e-2, err
    assert all(np.isfinite(g).all() for g in jax.tree.leaves(grads))


def test_scan_traces_one_block():
    """Compile time flat in depth: the scanned forward has the equations of one block, not 8 layers."""
    def n_eqns(runtime):
        model = qwen3_5.Qwen3_5(CFG, rngs=nnx.Rngs(0))
        model.runtime = runtime
        graphdef, params = nnx.split(model)
        tokens, valid = _inputs()
        jaxpr = jax.make_jaxpr(lambda p: nnx.merge(graphdef, p)(tokens, mask_BxT=valid))(params)
        return sum(1 for _ in equations(jaxpr))

    unrolled, scanned = n_eqns(Runtime()), n_eqns(Runtime(scan_layers=True))
    assert scanned < 0.7 * unrolled, (scanned, unrolled)


def test_block_period_and_runtime_resolution():
    assert block_period((LIN, LIN, LIN, FULL) * 6) == 4
    assert block_period((LIN, FULL, LIN)) == 3
    assert block_period((FULL,) * 5) == 1
    cpu, tpu = resolve_runtime("cpu"), resolve_runtime("tpu")
    assert (cpu.attention, cpu.gdn_chunk, cpu.gdn_matmul_dtype) == ("blocked", 16, None)
    assert (tpu.attention, tpu.gdn_chunk, tpu.gdn_matmul_dtype, tpu.gdn_inverse_block) == (
        "splash", 64, "bfloat16", 16)
    assert dataclasses.replace(tpu, remat="dots").remat == "dots"
    # GPU: cuDNN attention through jax.nn.dot_product_attention, chunk 64, bf16 matmul inputs
    gpu = resolve_runtime("gpu", cudnn=True)
    assert (gpu.attention, gpu.gdn_chunk, gpu.gdn_matmul_dtype, gpu.gdn_inverse_block) == (
        "cudnn", 64, "bfloat16", 16)
    assert resolve_runtime("gpu", cudnn=False).attention == "dense"  # no cuDNN: the reference einsums
    assert resolve_runtime("gpu", attention="dpa", cudnn=False).attention == "xla"
    assert resolve_runtime("cpu", attention="dpa").attention == "xla"
    assert resolve_runtime("tpu", attention="dpa").attention == "xla"
    assert resolve_runtime("gpu", attention="dense", cudnn=True).attention == "dense"  # forced stays
    # cuDNN takes bf16 / fp16 and no packed rows: otherwise auto is dense and dpa xla
    assert resolve_runtime("gpu", cudnn=True, dtype="bfloat16").attention == "cudnn"
    for kw in (dict(dtype="float32"), dict(dtype="bfloat16", packed=True)):
        assert resolve_runtime("gpu", cudnn=True, **kw).attention == "dense", kw
        assert resolve_runtime("gpu", attention="dpa", cudnn=True, **kw).attention == "xla", kw
    assert resolve_runtime("gpu", gdn_chunk=16, gdn_matmul_dtype=None).gdn_matmul_dtype is None
    if jax.default_backend() == "cpu":  # a forced "gpu" platform asks the running backend: no cuDNN here
        assert resolve_runtime("gpu").attention == "dense"
        assert resolve_runtime("gpu", attention="dpa").attention == "xla"
    with pytest.raises(ValueError, match="remat must be one of"):
        Runtime(remat="some")
    with pytest.raises(ValueError, match="attention must be one of"):
        Runtime(attention="flashy")


def test_dot_product_attention_matches_dense_with_padding():
    """The jax.nn.dot_product_attention call alone (xla implementation) against the dense einsums: GQA,
    causal, right padding (a fully padded row too), head dim 16, output and input gradients, fp32."""
    from prover_jax.models.common import flash
    rng = np.random.RandomState(2)
    B, T, H, K, hd = 3, 24, 4, 2, 16
    q, k, v = (jnp.asarray(rng.randn(B, T, n, hd), jnp.float32) for n in (H, K, K))
    valid = jnp.asarray(np.arange(T)[None] < np.array([T, 7, 0])[:, None])
    w = jnp.asarray(rng.randn(B, T, H, hd), jnp.float32) * valid[:, :, None, None]

    def f(impl):
        def loss(q, k, v):
            return jnp.sum(flash.attention(q, k, v, valid, impl=impl) * w)
        return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))(q, k, v)

    (ref, ref_g), (got, got_g) = f("dense"), f("xla")
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    for a, b in zip(ref_g, got_g):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)
    assert np.isfinite(np.asarray(got)) and all(np.isfinite(np.asarray(g)).all() for g in got_g)
    assert flash.supported("cudnn", T, 256) is None and "head dim" in flash.supported("cudnn", T, 320)
    assert not flash.cudnn_available() or jax.default_backend() == "gpu"


def test_the_cached_prefill_runs_the_models_runtime():
    """model.runtime is a constructor argument, and the cached prefill takes its delta-rule settings:
    under bf16 delta-rule matmuls (chunk 64, blockwise inverse) the prefill's logits equal the uncached
    forward under the same runtime, and differ from the fp32 default by the bf16 rounding."""
    bf16 = Runtime(gdn_chunk=64, gdn_matmul_dtype="bfloat16", gdn_inverse_block=16)
    model = qwen3_5.Qwen3_5(CFG, rngs=nnx.Rngs(0), runtime=bf16)
    assert model.runtime == bf16
    tokens, _ = _inputs(T=40)
    uncached = model(tokens)
    prefill, _ = model(tokens, cache=qwen3_5.init_cache(CFG, tokens.shape[0], 64))
    np.testing.assert_allclose(np.asarray(prefill), np.asarray(uncached), atol=2e-5, rtol=2e-5)
    model.runtime = Runtime()
    fp32 = model(tokens)
    assert float(jnp.abs(fp32 - uncached).max()) > 100 * float(jnp.abs(prefill - uncached).max() + 1e-9)
