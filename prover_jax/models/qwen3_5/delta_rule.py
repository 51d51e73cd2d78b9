"""The gated delta rule (Gated DeltaNet's token mixer) as pure functions, all in fp32.

Per value head, with state S in R^{dk x dv} and inputs q_t, k_t (L2-normalised, q scaled by dk^-1/2),
v_t, decay g_t <= 0 (log space) and write strength beta_t in (0, 1):

    S_t = exp(g_t) S_{t-1} + k_t (beta_t (v_t - exp(g_t) S_{t-1}^T k_t))^T
    o_t = S_t^T q_t

`recurrent` runs that literally (scan over time); `step` is one token of it (decode; rearranged so the
state is read once); `chunked` computes the same function for training/prefill in chunks of C tokens:
inside a chunk the T sequential rank-1 updates are condensed, through the UT transform (I + L) X = B
with L strictly lower triangular, into matmuls; across chunks a scan carries S. A position with beta = 0
and g = 0 leaves S untouched, which is how padding is skipped.

Shapes: q, k [B, T, H, dk]; v [B, T, H, dv]; g, beta [B, T, H]; S [B, H, dk, dv]; out o [B, T, H, dv].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

_HI = lax.Precision.HIGHEST


def l2norm(x: jax.Array, eps: float = 1e-6) -> jax.Array:
    """x * rsqrt(sum(x^2) + eps) over the last axis."""
    return x * lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + eps)


def _zeros_state(q, v):
    return jnp.zeros((q.shape[0], q.shape[2], q.shape[3], v.shape[3]), jnp.float32)


def _literal_step(q, k, v, g, beta, state):
    """One token of the update exactly as written in the module docstring (the reference)."""
    state = state * jnp.exp(g)[..., None, None]
    kv_mem = jnp.einsum("bhkv,bhk->bhv", state, k, precision=_HI)
    delta = (v - kv_mem) * beta[..., None]
    state = state + k[..., :, None] * delta[..., None, :]
    o = jnp.einsum("bhkv,bhk->bhv", state, q, precision=_HI)
    return o, state


def step(q, k, v, g, beta, state):
    """One token: q, k [B, H, dk]; v [B, H, dv]; g, beta [B, H]; state [B, H, dk, dv] -> (o, state).

    The update of the module docstring (equal to `_literal_step` up to float rounding), arranged to touch
    the large state as few times as possible: S^T k and S^T q come from ONE batched product over the old
    state, then the new state is written in one elementwise pass (in place when the caller donates it).
    With e = exp(g),
        delta = beta (v - e S^T k),   S' = e S + k delta^T,   o = S'^T q = e S^T q + (k . q) delta.
    """
    B, H, dk = k.shape
    dv = v.shape[-1]
    e = jnp.exp(g)[..., None]  # [B, H, 1]
    # [k | q] and [delta | o] are joined along the minor axis: XLA:CPU keeps such a concatenation as its
    # own buffer instead of fusing it into consumers, so the [dk, dv] state update below reads k and delta
    # from memory rather than recomputing their producers (conv, silu, l2norm, ...) per state element.
    kq = jnp.concatenate([k, q], axis=-1).reshape(B, H, 2, dk)
    s_kq = jnp.einsum("bhkv,bhnk->bhnv", state, kq, precision=_HI)  # [B, H, 2, dv]: S^T k, S^T q
    delta = (v - e * s_kq[:, :, 0]) * beta[..., None]
    o = e * s_kq[:, :, 1] + jnp.sum(k * q, axis=-1, keepdims=True) * delta
    do = jnp.concatenate([delta, o], axis=-1).reshape(B, H, 2, dv)
    state = state * e[..., None] + kq[:, :, 0, :, None] * do[:, :, 0, None, :]
    return do[:, :, 1], state


def recurrent(q, k, v, g, beta, state=None):
    """Token-by-token reference: returns (o [B, T, H, dv], final state)."""
    q, k, v, g, beta = (x.astype(jnp.float32) for x in (q, k, v, g, beta))
    state = _zeros_state(q, v) if state is None else state.astype(jnp.float32)

    def body(s, xs):
        o, s = _literal_step(*xs, s)
        return s, o

    xs = tuple(jnp.moveaxis(x, 1, 0) for x in (q, k, v, g, beta))
    state, o = lax.scan(body, state, xs)
    return jnp.moveaxis(o, 0, 1), state


def unit_lower_inverse(strict_CxC: jax.Array) -> jax.Array:
    """(I + L)^-1 for strictly lower-triangular L (batched over leading axes), by forward substitution:
    row i of T = e_i - L[i, :] T (rows >= i of T are still zero, and L[i, j>=i] = 0).

    Written with matmuls rather than a LAPACK triangular solve, whose CPU kernel can deadlock when
    several simulated devices run it at once, and which maps poorly onto TPU matrix units.
    """
    C = strict_CxC.shape[-1]
    eye = jnp.eye(C, dtype=strict_CxC.dtype)

    def row(i, t):
        r = eye[i] - jnp.einsum("...j,...jd->...d", strict_CxC[..., i, :], t, precision=_HI)
        return t.at[..., i, :].set(r)

    return lax.fori_loop(0, C, row, jnp.zeros_like(strict_CxC))


def chunked(q, k, v, g, beta, state=None, chunk_size: int = 64):
    """Chunk-parallel form of `recurrent` (same outputs up to float rounding)."""
    q, k, v, g, beta = (x.astype(jnp.float32) for x in (q, k, v, g, beta))
    B, T, H, dk = q.shape
    dv = v.shape[-1]
    C = chunk_size
    state = _zeros_state(q, v) if state is None else state.astype(jnp.float32)
    pad = (-T) % C
    if pad:
        q, k, v = (jnp.pad(x, ((0, 0), (0, pad), (0, 0), (0, 0))) for x in (q, k, v))
        g, beta = (jnp.pad(x, ((0, 0), (0, pad), (0, 0))) for x in (g, beta))
    N = (T + pad) // C

    # [B, T, H, d] -> [N, B, H, C, d]
    def chunks(x):
        x = x.reshape(B, N, C, H, *x.shape[3:])
        return jnp.moveaxis(x, (1, 3), (0, 2))

    q_c, k_c, v_c, g_c, b_c = (chunks(x) for x in (q, k, v, g, beta))
    gc = jnp.cumsum(g_c, axis=-1)  # [N, B, H, C] log decay from chunk start to t (inclusive)
    causal = jnp.tril(jnp.ones((C, C), bool))
    # decay[i, j] = exp(gc_i - gc_j) for j <= i, else 0.
    diff = gc[..., :, None] - gc[..., None, :]
    decay = jnp.exp(jnp.where(causal, diff, -jnp.inf))

    kb = k_c * b_c[..., None]
    vb = v_c * b_c[..., None]
    strict = jnp.einsum("nbhid,nbhjd->nbhij", kb, k_c, precision=_HI) * decay
    strict = jnp.where(jnp.tril(jnp.ones((C, C), bool), -1), strict, 0.0)
    rhs = jnp.concatenate([vb, kb * jnp.exp(gc)[..., None]], axis=-1)
    sol = jnp.einsum("nbhij,nbhjd->nbhid", unit_lower_inverse(strict), rhs, precision=_HI)
    u, w = sol[..., :dv], sol[..., dv:]  # new values; decayed keys reading the old state
    attn = jnp.einsum("nbhid,nbhjd->nbhij", q_c, k_c, precision=_HI) * decay
    q_dec = q_c * jnp.exp(gc)[..., None]
    k_dec = k_c * jnp.exp(gc[..., -1:] - gc)[..., None]
    chunk_decay = jnp.exp(gc[..., -1])[..., None, None]

    def body(s, xs):
        u_i, w_i, q_i, k_i, a_i, d_i = xs
        v_new = u_i - jnp.einsum("bhcd,bhde->bhce", w_i, s, precision=_HI)
        o = (jnp.einsum("bhcd,bhde->bhce", q_i, s, precision=_HI)
             + jnp.einsum("bhij,bhje->bhie", a_i, v_new, precision=_HI))
        s = s * d_i + jnp.einsum("bhcd,bhce->bhde", k_i, v_new, precision=_HI)
        return s, o

    state, o = lax.scan(body, state, (u, w, q_dec, k_dec, attn, chunk_decay))
    o = jnp.moveaxis(o, (0, 2), (1, 3)).reshape(B, N * C, H, dv)[:, :T]
    return o, state
