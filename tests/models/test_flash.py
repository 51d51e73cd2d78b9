"""The splash-attention path (Pallas kernel in interpret mode) and the blocked path equal the dense
reference: outputs and gradients at valid positions, GQA, right-padded rows, T not a multiple of the
block."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prover_jax.models.common import flash
from prover_jax.sharding import make_mesh

B, H, K, HD = 2, 4, 2, 32


def inputs(T, lengths, seed=0, left=(0, 0)):
    """Row b valid on [left[b], lengths[b])."""
    ks = jax.random.split(jax.random.PRNGKey(seed), 4)
    q = jax.random.normal(ks[0], (B, T, H, HD)) * 2.0
    k = jax.random.normal(ks[1], (B, T, K, HD)) * 2.0
    v = jax.random.normal(ks[2], (B, T, K, HD))
    pos = jnp.arange(T)[None, :]
    valid = (pos < jnp.asarray(lengths)[:, None]) & (pos >= jnp.asarray(left)[:, None])
    w = jax.random.normal(ks[3], (B, T, H, HD)) * valid[:, :, None, None]  # weights 0 at padding
    return q, k, v, valid, w


def loss_and_grads(impl, q, k, v, valid, w, **kw):
    def loss(q, k, v):
        return jnp.sum(w * flash.attention(q, k, v, valid, impl=impl, **kw))
    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))(q, k, v)


# right-padded rows; the last case also left-pads a row, where validity (not causality) hides keys.
@pytest.mark.parametrize("T,lengths,left,block", [(40, (40, 29), (0, 0), 128),
                                                  (200, (200, 131), (0, 0), 128),
                                                  (200, (190, 200), (60, 0), 128)])
def test_splash_equals_dense(T, lengths, left, block):
    q, k, v, valid, w = inputs(T, lengths, left=left)
    dense = jax.jit(lambda *a: flash.attention(*a, impl="dense"))(q, k, v, valid)
    splash = jax.jit(lambda *a: flash.attention(*a, impl="splash", interpret=True, block=block))(
        q, k, v, valid)
    assert splash.shape == dense.shape == (B, T, H, HD) and splash.dtype == q.dtype
    assert bool(jnp.isfinite(splash).all())
    m = np.asarray(valid)
    np.testing.assert_allclose(np.asarray(splash)[m], np.asarray(dense)[m], rtol=1e-5, atol=1e-5)

    (l_d, g_d), (l_s, g_s) = (loss_and_grads("dense", q, k, v, valid, w),
                              loss_and_grads("splash", q, k, v, valid, w, interpret=True, block=block))
    # the loss sums B*T*H*HD terms of both signs: its error scales with their magnitudes, not the sum
    terms = float(jnp.sum(jnp.abs(w * dense)))
    np.testing.assert_allclose(l_s, l_d, rtol=0, atol=1e-6 * terms)
    for name, gs, gd in zip("qkv", g_s, g_d):
        scale = float(jnp.max(jnp.abs(gd)))
        assert scale > 0
        np.testing.assert_allclose(gs, gd, rtol=1e-5, atol=1e-5 * scale, err_msg=f"d{name}")


@pytest.mark.parametrize("T,lengths,left,rows", [(40, (40, 29), (0, 0), 16),    # blocks 16, 16, 8
                                                 (200, (200, 131), (0, 0), 128),  # 128, 72
                                                 (200, (190, 200), (60, 0), 64),
                                                 (40, (40, 29), (0, 0), 128)])   # one block: the dense math
def test_blocked_equals_dense(monkeypatch, T, lengths, left, rows):
    """Causal query blocks give the dense einsums' outputs and gradients, whatever the block split."""
    monkeypatch.setattr(flash, "BLOCKED_ROWS", rows)
    q, k, v, valid, w = inputs(T, lengths, left=left, seed=2)
    dense = flash.attention(q, k, v, valid, impl="dense")
    blocked = jax.jit(lambda *a: flash.attention(*a, impl="blocked"))(q, k, v, valid)
    assert blocked.shape == dense.shape and blocked.dtype == q.dtype and bool(jnp.isfinite(blocked).all())
    m = np.asarray(valid)
    np.testing.assert_allclose(np.asarray(blocked)[m], np.asarray(dense)[m], rtol=1e-5, atol=1e-5)
    (l_d, g_d), (l_b, g_b) = (loss_and_grads("dense", q, k, v, valid, w),
                              loss_and_grads("blocked", q, k, v, valid, w))
    np.testing.assert_allclose(l_b, l_d, rtol=0, atol=1e-6 * float(jnp.sum(jnp.abs(w * dense))))
    for name, gb, gd in zip("qkv", g_b, g_d):
        scale = float(jnp.max(jnp.abs(gd)))
        np.testing.assert_allclose(gb, gd, rtol=1e-5, atol=1e-5 * scale, err_msg=f"d{name}")


def test_splash_under_mesh():
    """With a mesh the kernel runs in a shard_map: rows over fsdp, kv heads (and their query heads)
    over tensor."""
    if jax.device_count() < 4:
        pytest.skip("needs 4 (simulated) devices")
    mesh = make_mesh((1, 2, 2), jax.devices()[:4])
    q, k, v, valid, _ = inputs(40, (40, 17), seed=1)
    dense = flash.attention(q, k, v, valid, impl="dense")
    splash = jax.jit(lambda *a: flash.attention(*a, impl="splash", interpret=True, block=128,
                                                mesh=mesh))(q, k, v, valid)
    m = np.asarray(valid)
    np.testing.assert_allclose(np.asarray(splash)[m], np.asarray(dense)[m], rtol=1e-5, atol=1e-5)


def test_supported():
    assert flash.supported("dense", 4096, 256) is None and flash.supported("blocked", 4096, 256) is None
    assert flash.supported("splash", 4096, 256) is None
    assert "multiple of 128" in flash.supported("splash", 4096, 256, block=100)
    assert flash.supported("cudnn", 4096, 256) is None and flash.supported("xla", 4096, 512) is None
    assert "at most 256" in flash.supported("cudnn", 4096, 512)
    assert "multiple of 8" in flash.supported("cudnn", 4096, 100)
    assert "unknown" in flash.supported("bogus", 4096, 256)
    with pytest.raises(ValueError):
        flash.attention(*inputs(8, (8, 8))[:4], impl="splash", block=100)
