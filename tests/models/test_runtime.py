"""Scale features of the uncached forward (model.runtime): layer scan, remat, delta-rule chunk/dtype,
splash attention. Each must give the same logits and gradients as the plain unrolled path."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from prover_jax.aot.flops import equations
from prover_jax.models import qwen3_5
from prover_jax.models.qwen3_5.model import Runtime, block_period, resolve_runtime

LIN, FULL = qwen3_5.LINEAR, qwen3_5.FULL
CFG = qwen3_5.Qwen3_5Config(
    vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=8, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
    linear_key_head_dim=8, linear_value_head_dim=8, layer_types=(LIN, LIN, LIN, FULL) * 2)


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
], ids=["scan", "remat-full", "scan-remat-dots", "chunk64", "chunk64-blockwise", "splash-interpreted"])
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
    assert (cpu.attention, cpu.gdn_chunk, cpu.gdn_matmul_dtype) == ("dense", 16, None)
    assert (tpu.attention, tpu.gdn_chunk, tpu.gdn_matmul_dtype, tpu.gdn_inverse_block) == (
        "splash", 64, "bfloat16", 16)
    assert dataclasses.replace(tpu, remat="dots").remat == "dots"
    with pytest.raises(ValueError, match="remat must be one of"):
        Runtime(remat="some")
    with pytest.raises(ValueError, match="attention must be one of"):
        Runtime(attention="flashy")
