"""Packed rows (segment ids): each packed sequence equals running it alone, in the delta rule (resets),
the attention paths and the whole model (outputs and parameter gradients); nothing leaks between
sequences; no segment ids is the plain forward."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from prover_jax.models import packing, qwen3_5
from prover_jax.models.common import flash
from prover_jax.models.qwen3_5 import delta_rule
from prover_jax.models.qwen3_5.model import Runtime

from helpers.tiny import tiny_config

LIN, FULL = qwen3_5.LINEAR, qwen3_5.FULL


def rel_close(got, ref, rtol, floor=1e-30, err_msg=""):
    """|got - ref| <= rtol * max(max|ref|, floor) elementwise (float32 sums: error scales with the
    largest term)."""
    atol = rtol * max(float(np.abs(ref).max()), floor)
    np.testing.assert_allclose(got, ref, rtol=0, atol=atol, err_msg=err_msg)


# ---- the delta rule with resets ------------------------------------------------------------------

def dr_inputs(T, B=2, H=3, dk=8, dv=4, seed=0, decay=0.1):
    """decay scales g: 0.1, slow (the state matters); 100, fast (in-chunk sums of g far outside the
    float32 exp range, where masked decays must not turn into inf * 0 in the gradient)."""
    ks = jax.random.split(jax.random.PRNGKey(seed), 6)
    q = delta_rule.l2norm(jax.random.normal(ks[0], (B, T, H, dk))) * dk ** -0.5
    k = delta_rule.l2norm(jax.random.normal(ks[1], (B, T, H, dk)))
    v = jax.random.normal(ks[2], (B, T, H, dv))
    g = -decay * jax.nn.softplus(jax.random.normal(ks[3], (B, T, H)))
    beta = jax.nn.sigmoid(jax.random.normal(ks[4], (B, T, H)))
    s0 = jax.random.normal(ks[5], (B, H, dk, dv))
    return q, k, v, g, beta, s0


T_DR = 100
# row 0: starts inside chunks, at chunk starts (16, 48, 64), two adjacent (64, 65) and at the last token;
# row 1: no reset at 0 (it continues the initial state), then 48 (a chunk start for 16), 80.
STARTS = ([0, 5, 16, 20, 37, 48, 64, 65, 99], [48, 80])


def resets():
    r = np.zeros((2, T_DR), bool)
    for b, starts in enumerate(STARTS):
        r[b, starts] = True
    return jnp.asarray(r)


@pytest.mark.parametrize("chunk,block,decay", [(16, None, 0.1), (64, None, 0.1), (64, 16, 0.1),
                                               (16, None, 100.0), (64, 16, 100.0)])
def test_chunked_with_resets_equals_recurrent(chunk, block, decay):
    q, k, v, g, beta, s0 = args = dr_inputs(T_DR, decay=decay)
    reset = resets()
    f = jax.jit(delta_rule.chunked, static_argnames=("chunk_size", "inverse_block"))
    for state in (None, s0):
        o_r, s_r = delta_rule.recurrent(q, k, v, g, beta, state, reset_BxT=reset)
        o_c, s_c = f(q, k, v, g, beta, state, chunk_size=chunk, inverse_block=block, reset_BxT=reset)
        np.testing.assert_allclose(o_c, o_r, atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(s_c, s_r, atol=1e-5, rtol=1e-5)
    # each sequence alone, from a zero state (row 0) or the initial state (row 1's first run)
    bounds = [(0, STARTS[0] + [T_DR]), (1, [0] + STARTS[1] + [T_DR])]
    for b, edges in bounds:
        for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
            init = s0[b:b + 1] if (b == 1 and i == 0) else None
            o_a, s_a = delta_rule.recurrent(*(x[b:b + 1, lo:hi] for x in args[:5]), init)
            np.testing.assert_allclose(o_c[b, lo:hi], o_a[0], atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(s_c[b], s_a[0], atol=1e-5, rtol=1e-5)

    ka, kb = jax.random.split(jax.random.PRNGKey(7))
    wo, ws = jax.random.normal(ka, v.shape), jax.random.normal(kb, s0.shape)

    def grads(fn, **kw):
        def loss(args):
            o, s = fn(*args, reset_BxT=reset, **kw)
            return jnp.sum(o * wo) + jnp.sum(s * ws)
        return jax.jit(jax.grad(loss))(args)

    g_r = grads(delta_rule.recurrent)
    g_c = grads(delta_rule.chunked, chunk_size=chunk, inverse_block=block)
    for name, a, b in zip(("q", "k", "v", "g", "beta", "s0"), g_r, g_c):
        assert bool(jnp.all(jnp.isfinite(b))), name
        # d/dg under fast decay: differences of large in-chunk sums of g, float32 noise ~1e-4 of the
        # largest entry with or without resets (chunked vs recurrent, no resets: 6e-5 at C=16, 3e-4 at 64)
        rtol = 3e-4 if (name == "g" and decay > 1) else 1e-5
        np.testing.assert_allclose(b, a, rtol=rtol, atol=rtol * float(jnp.abs(a).max()), err_msg=name)


def test_packing_helpers():
    seg = jnp.asarray([[1, 1, 2, 2, 2, 0, 0, 1], [3, 3, 3, 3, 0, 5, 5, 0]], jnp.int32)
    np.testing.assert_array_equal(packing.sequence_starts(seg),
                                  [[1, 0, 1, 0, 0, 1, 0, 1], [1, 0, 0, 0, 1, 1, 0, 1]])
    np.testing.assert_array_equal(packing.sequence_index(seg),
                                  [[1, 1, 2, 2, 2, 3, 3, 4], [1, 1, 1, 1, 2, 3, 3, 4]])
    np.testing.assert_array_equal(packing.sequence_positions(seg),
                                  [[0, 1, 0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 0, 0, 1, 0]])


# ---- attention with segment ids ------------------------------------------------------------------

def test_attention_segments_equal_each_sequence_alone(monkeypatch):
    """dense, blocked, splash (interpreted) and xla with segment ids against dense on each sequence alone:
    outputs at valid positions and input gradients. Row 1 has padding between its sequences."""
    B, T, H, K, hd = 2, 40, 4, 2, 32
    rng = np.random.RandomState(0)
    q, k, v = (jnp.asarray(rng.randn(B, T, n, hd) * 2, jnp.float32) for n in (H, K, K))
    seg = np.zeros((B, T), np.int32)
    seg[0, :7], seg[0, 7:30], seg[0, 30:36] = 1, 2, 1  # ids reused: runs are told apart by the caller
    seg[1, :16], seg[1, 20:40] = 4, 2
    runs = packing.sequence_index(seg)
    valid = jnp.asarray(seg > 0)
    w = jnp.asarray(rng.randn(B, T, H, hd), jnp.float32) * valid[:, :, None, None]

    def reference(q, k, v):
        out = jnp.zeros_like(q)
        for b, spans in ((0, [(0, 7), (7, 30), (30, 36)]), (1, [(0, 16), (20, 40)])):
            for lo, hi in spans:
                alone = flash.attention(q[b:b + 1, lo:hi], k[b:b + 1, lo:hi], v[b:b + 1, lo:hi],
                                        jnp.ones((1, hi - lo), bool), impl="dense")
                out = out.at[b, lo:hi].set(alone[0])
        return out

    def value_and_grads(fn):
        return jax.jit(jax.value_and_grad(lambda *a: jnp.sum(w * fn(*a)), argnums=(0, 1, 2)))(q, k, v)

    ref_out, (_, ref_g) = jax.jit(reference)(q, k, v), value_and_grads(reference)
    m = np.asarray(valid)
    monkeypatch.setattr(flash, "BLOCKED_ROWS", 16)  # blocks of 16, 16, 8 queries: sequences cross them
    for impl, kw in (("dense", {}), ("blocked", {}), ("splash", dict(interpret=True, block=128)), ("xla", {})):
        fn = lambda q, k, v: flash.attention(q, k, v, valid, segment_ids_BxT=runs, impl=impl, **kw)  # noqa
        out = jax.jit(fn)(q, k, v)
        assert bool(jnp.isfinite(out).all()), impl
        np.testing.assert_allclose(np.asarray(out)[m], np.asarray(ref_out)[m], atol=1e-5, rtol=1e-5,
                                   err_msg=impl)
        _, got_g = value_and_grads(fn)
        for name, a, b in zip("qkv", ref_g, got_g):
            rel_close(b, a, 1e-5, err_msg=f"{impl} d{name}")
    with pytest.raises(ValueError, match="cudnn"):
        flash.attention(q, k, v, valid, segment_ids_BxT=runs, impl="cudnn")


# ---- the model -----------------------------------------------------------------------------------

CFG = tiny_config((LIN, FULL, LIN, LIN, FULL), head_dim=16)
T_PACK = 96
# (row, start, length) of each sequence: boundaries inside 16-chunks (5, 28, 68) and on them (16, 64),
# a sequence ending at a 64-chunk end, padding between sequences (64..68) and at the ends.
LAYOUT = [(0, 0, 5), (0, 5, 23), (0, 28, 40), (1, 0, 16), (1, 16, 48), (1, 68, 20)]
T_ALONE = max(n for _, _, n in LAYOUT)


def make_model(seed=0):
    model = qwen3_5.Qwen3_5(CFG, rngs=nnx.Rngs(seed))
    for i, (path, var) in enumerate(nnx.to_flat_state(nnx.state(model))):  # norms, gates off init
        if path[-1] in ("weight", "dt_bias"):
            noise = jax.random.normal(jax.random.PRNGKey(seed + i), var.get_value().shape)
            var.set_value(var.get_value() + 0.3 * noise)
    return model


def packed_batch(seed=1):
    """tokens, segment ids, positions [2, T_PACK] of the packed rows; the same sequences one per row
    (right padding): tokens, mask [len(LAYOUT), T_ALONE]."""
    rng = np.random.RandomState(seed)
    tokens, seg, pos = (np.zeros((2, T_PACK), np.int32) for _ in range(3))
    alone, mask = np.zeros((len(LAYOUT), T_ALONE), np.int32), np.zeros((len(LAYOUT), T_ALONE), bool)
    for i, (b, s, n) in enumerate(LAYOUT):
        seq = rng.randint(0, CFG.vocab_size, n)
        tokens[b, s:s + n], seg[b, s:s + n], pos[b, s:s + n] = seq, i + 1, np.arange(n)
        alone[i, :n], mask[i, :n] = seq, True
    return tokens, seg, pos, alone, mask


def next_token_logp(logits, tokens, pairs):
    """Sum of log p(tokens[b, t + 1] | ..t) over the (b, t) in `pairs`."""
    b, t = pairs
    logp = jax.nn.log_softmax(logits, axis=-1)
    return jnp.sum(logp[b, t, tokens[b, t + 1]])


def run(model, runtime, tokens, pairs, **kw):
    """(logits, grads of the summed next-token log-prob wrt the parameters)."""
    model.runtime = runtime
    graphdef, params = nnx.split(model)

    def f(params):
        logits = nnx.merge(graphdef, params)(jnp.asarray(tokens), **kw)
        return next_token_logp(logits, jnp.asarray(tokens), pairs), logits

    (_, logits), grads = jax.jit(jax.value_and_grad(f, has_aux=True))(params)
    return np.asarray(logits), jax.tree.map(np.asarray, grads)


def pairs_packed():
    return tuple(np.array(x) for x in zip(*[(b, s + t) for b, s, n in LAYOUT for t in range(n - 1)]))


def pairs_alone():
    return tuple(np.array(x) for x in zip(*[(i, t) for i, (_, _, n) in enumerate(LAYOUT)
                                           for t in range(n - 1)]))


@pytest.fixture(scope="module")
def alone_reference():
    _, _, _, alone, mask = packed_batch()
    return run(make_model(), Runtime(), alone, pairs_alone(), mask_BxT=jnp.asarray(mask))


@pytest.mark.parametrize("runtime", [
    Runtime(),
    Runtime(gdn_chunk=64, gdn_inverse_block=16),
    Runtime(attention="xla", scan_layers=True, remat="full"),
    Runtime(attention="splash", gdn_chunk=64),
    Runtime(attention="blocked"),
], ids=["dense-chunk16", "chunk64-blockwise", "xla-scan-remat", "splash-interpreted-chunk64", "blocked"])
def test_packed_rows_equal_sequences_alone(alone_reference, runtime):
    tokens, seg, pos, _, _ = packed_batch()
    logits, grads = run(make_model(), runtime, tokens, pairs_packed(),
                        segment_ids_BxT=jnp.asarray(seg), positions_BxT=jnp.asarray(pos))
    ref_logits, ref_grads = alone_reference
    for i, (b, s, n) in enumerate(LAYOUT):
        got = jax.nn.log_softmax(logits[b, s:s + n])
        want = jax.nn.log_softmax(ref_logits[i, :n])
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0, err_msg=f"sequence {i}")
    leaves_ref, leaves_got = jax.tree.leaves(ref_grads), jax.tree.leaves(grads)
    assert len(leaves_ref) == len(leaves_got)
    flat_ref, flat_got = (np.concatenate([x.ravel() for x in leaves]) for leaves in (leaves_ref, leaves_got))
    assert np.linalg.norm(flat_got - flat_ref) <= 1e-5 * np.linalg.norm(flat_ref)
    # A_log / dt_bias / in_proj_a gradients are small (~1e-4) cancelling sums: float32 rounding moves
    # them by ~5e-7 whatever the layout (as much between delta-rule chunk 16 and 64 on the same rows;
    # in float64 packed and alone agree to 1e-13), hence the 0.25 floor of the scale.
    for a, b in zip(leaves_ref, leaves_got):
        rel_close(b, a, 1e-5, floor=0.25)


def test_default_positions_restart_per_sequence():
    tokens, seg, pos, _, _ = packed_batch()
    model = make_model()
    f = jax.jit(lambda t, s, p: model(t, segment_ids_BxT=s, positions_BxT=p))
    explicit = f(jnp.asarray(tokens), jnp.asarray(seg), jnp.asarray(pos))
    default = jax.jit(lambda t, s: model(t, segment_ids_BxT=s))(jnp.asarray(tokens), jnp.asarray(seg))
    np.testing.assert_array_equal(default, explicit)


def test_no_leak_from_the_previous_sequence():
    """Changing every token of sequence A leaves sequence B (right after it in the row) unchanged;
    without segment ids (one long sequence) B does change, so the check can see a leak."""
    model = make_model()
    rng = np.random.RandomState(3)
    nA, nB, T = 21, 30, 64
    seg = np.zeros((1, T), np.int32)
    seg[0, :nA], seg[0, nA:nA + nB] = 1, 2
    pos = np.asarray(packing.sequence_positions(seg))
    b_part = rng.randint(0, CFG.vocab_size, nB)
    rows = []
    for _ in range(2):
        row = np.zeros((1, T), np.int32)
        row[0, :nA], row[0, nA:nA + nB] = rng.randint(0, CFG.vocab_size, nA), b_part
        rows.append(jnp.asarray(row))
    f = jax.jit(lambda t, s, p: model(t, segment_ids_BxT=s, positions_BxT=p))
    one, two = (np.asarray(f(r, jnp.asarray(seg), jnp.asarray(pos)))[0, nA:nA + nB] for r in rows)
    np.testing.assert_allclose(one, two, atol=1e-6, rtol=0)
    single = jnp.asarray((seg > 0).astype(np.int32))  # A and B as one sequence
    one, two = (np.asarray(f(r, single, jnp.asarray(pos)))[0, nA:nA + nB] for r in rows)
    assert np.abs(one[:3] - two[:3]).max() > 1e-3 and np.abs(one[-3:] - two[-3:]).max() > 1e-3


def test_without_segment_ids_is_the_plain_forward():
    """segment_ids_BxT=None is the plain forward; one segment per row (0 at its right padding) gives
    the same logits at valid positions."""
    model = make_model()
    tokens = jnp.asarray(np.random.RandomState(4).randint(0, CFG.vocab_size, (2, 50)), jnp.int32)
    valid = jnp.asarray(np.arange(50)[None] < np.array([50, 37])[:, None])
    plain = np.asarray(jax.jit(lambda t, m: model(t, mask_BxT=m))(tokens, valid))
    none = np.asarray(jax.jit(lambda t, m: model(t, mask_BxT=m, segment_ids_BxT=None))(tokens, valid))
    np.testing.assert_array_equal(none, plain)
    one = np.asarray(jax.jit(lambda t, s: model(t, segment_ids_BxT=s))(tokens, valid.astype(jnp.int32)))
    m = np.asarray(valid)
    np.testing.assert_allclose(one[m], plain[m], atol=1e-6, rtol=0)


def test_packed_rows_refused_where_unsupported():
    tokens, seg, _, _, _ = packed_batch()
    model = make_model()
    model.runtime = Runtime(attention="cudnn")
    with pytest.raises(ValueError, match="cudnn"):
        model(jnp.asarray(tokens), segment_ids_BxT=jnp.asarray(seg))
    model.runtime = Runtime()
    cache = qwen3_5.init_cache(CFG, 2, 128)
    with pytest.raises(ValueError, match="uncached"):
        model(jnp.asarray(tokens), cache=cache, segment_ids_BxT=jnp.asarray(seg))
