"""The gated delta rule (Gated DeltaNet's token mixer) as pure functions, in fp32 (optionally bf16
matmul inputs with fp32 accumulation in `chunked`).

Per value head, with state S in R^{dk x dv} and inputs q_t, k_t (L2-normalised, q scaled by dk^-1/2),
v_t, decay g_t <= 0 (log space) and write strength beta_t in (0, 1):

    S_t = exp(g_t) S_{t-1} + k_t (beta_t (v_t - exp(g_t) S_{t-1}^T k_t))^T
    o_t = S_t^T q_t

`recurrent` runs that literally (scan over time); `step` is one token of it (decode; rearranged so the
state is read once); `chunked` computes the same function for training/prefill in chunks of C tokens:
inside a chunk the T sequential rank-1 updates are condensed, through the UT transform (I + L) X = B
with L strictly lower triangular, into matmuls; across chunks a scan carries S. A position with beta = 0
and g = 0 leaves S untouched, which is how padding is skipped. `backend_defaults` gives the chunk size,
matmul dtype and inverse of `chunked` per backend.

Packed sequences (`recurrent`, `chunked`): reset [B, T] bool is True at the first token of each sequence,
where the state restarts from zero before the update: S_{t-1} := 0. That is the recurrence with decay
a_t = exp(g_t) [not reset_t], whose products are kept exact (no large negative log-decay) in `chunked`.

Shapes: q, k [B, T, H, dk]; v [B, T, H, dv]; g, beta [B, T, H]; S [B, H, dk, dv]; out o [B, T, H, dv].
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

_HI = lax.Precision.HIGHEST

# Chunk length of `chunked` on CPU, and the model's default (`Runtime.gdn_chunk`, `GatedDeltaNet`). 16
# measured fastest on CPU (vs 64: prefill of 512 tokens 1.8x, a training forward + backward 4x),
# because the in-chunk inverse there is a C-step substitution.
GDN_CHUNK = 16
# Chunk length on TPU / GPU, on purpose not GDN_CHUNK: there the in-chunk inverse is blockwise
# (GDN_INVERSE_BLOCK) and the matmuls take bf16 inputs, so a longer chunk gives fewer, larger matmuls
# and fewer steps of the scan over chunks. It is also the chunk of transformers' reference
# (chunk_gated_delta_rule), hence `chunked`'s default.
GDN_ACCEL_CHUNK = 64
# Diagonal block of the blockwise (I + L)^-1 on TPU / GPU (`blockwise_unit_lower_inverse`): its own
# knob, equal to GDN_CHUNK in value only.
GDN_INVERSE_BLOCK = 16


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


def recurrent(q, k, v, g, beta, state=None, reset_BxT=None):
    """Token-by-token reference: returns (o [B, T, H, dv], final state). reset_BxT (bool, optional):
    S_{t-1} := 0 before the update at t where True (the first token of a packed sequence)."""
    q, k, v, g, beta = (x.astype(jnp.float32) for x in (q, k, v, g, beta))
    state = _zeros_state(q, v) if state is None else state.astype(jnp.float32)

    def body(s, xs):
        if reset_BxT is not None:
            *xs, r = xs
            s = jnp.where(r[:, None, None, None], 0.0, s)
        o, s = _literal_step(*xs, s)
        return s, o

    xs = tuple(jnp.moveaxis(x, 1, 0) for x in (q, k, v, g, beta))
    if reset_BxT is not None:
        xs = xs + (jnp.moveaxis(jnp.asarray(reset_BxT, bool), 1, 0),)
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


def _diag_blocks(x: jax.Array, n: int) -> jax.Array:
    """The C/n diagonal n x n blocks of x [..., C, C], as [..., C/n, n, n], by static slices: no gather,
    and no masked sum over the block axis (whose gradient crashes XLA:CPU's YNNPACK reduce fusion)."""
    return jnp.stack([x[..., i:i + n, i:i + n] for i in range(0, x.shape[-1], n)], axis=-3)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def blockwise_unit_lower_inverse(strict_CxC: jax.Array, block: int = GDN_INVERSE_BLOCK) -> jax.Array:
    """(I + L)^-1 for strictly lower-triangular L (batched over leading axes), equal to
    `unit_lower_inverse` up to rounding, with a b-step (b = block) sequential part instead of a C-step one.

    The C/b diagonal b x b blocks are inverted at once by `unit_lower_inverse`; then log2(C/b) doubling
    steps merge neighbouring blocks with matmuls only, using, for unit lower-triangular A, D,
        [[A, 0], [X, D]]^-1 = [[A^-1, 0], [-D^-1 X A^-1, D^-1]].
    C is zero-padded up to b * 2^k (the leading C x C block of the inverse is unaffected).
    Derivative (matmuls only, nothing saved per substitution step): d(I + L)^-1 = -T tril(dL, -1) T.
    Pass `block` positionally.
    """
    C = strict_CxC.shape[-1]
    if C <= block:
        return unit_lower_inverse(strict_CxC)
    n = block
    while n < C:
        n *= 2
    lead = [(0, 0)] * (strict_CxC.ndim - 2)
    lo = jnp.pad(strict_CxC, lead + [(0, n - C)] * 2)
    inv = unit_lower_inverse(_diag_blocks(lo, block))  # [..., n/b, b, b]
    s = block
    while s < n:
        a, d = inv[..., 0::2, :, :], inv[..., 1::2, :, :]
        x = _diag_blocks(lo, 2 * s)[..., s:, :s]  # lower-left s x s block of each 2s x 2s diagonal block
        low = -jnp.einsum("...ij,...jk,...kl->...il", d, x, a, precision=_HI)
        inv = jnp.concatenate([jnp.concatenate([a, jnp.zeros_like(a)], -1),
                               jnp.concatenate([low, d], -1)], -2)
        s *= 2
    return inv[..., 0, :C, :C]


@blockwise_unit_lower_inverse.defjvp
def _blockwise_unit_lower_inverse_jvp(block, primals, tangents):
    (strict,), (d_strict,) = primals, tangents
    t = blockwise_unit_lower_inverse(strict, block)
    d_strict = jnp.tril(d_strict, -1)
    return t, -jnp.einsum("...ij,...jk,...kl->...il", t, d_strict, t, precision=_HI)


def _matmul(spec: str, a: jax.Array, b: jax.Array, dtype) -> jax.Array:
    """einsum in fp32 at HIGHEST precision (dtype None), or on dtype-cast inputs with fp32 accumulation."""
    if dtype is None:
        return jnp.einsum(spec, a, b, precision=_HI)
    return jnp.einsum(spec, a.astype(dtype), b.astype(dtype), preferred_element_type=jnp.float32)


def backend_defaults(platform: str) -> dict:
    """`chunked` keyword arguments for a backend ("cpu", "tpu", "gpu"/"cuda"/"rocm").

    cpu: chunk GDN_CHUNK (16), fp32 HIGHEST matmuls, plain substitution. tpu, gpu: chunk GDN_ACCEL_CHUNK
    (64), bf16 matmul inputs with fp32 accumulation (state, decays and (I + L)^-1 in fp32), blockwise
    inverse with GDN_INVERSE_BLOCK x GDN_INVERSE_BLOCK (16 x 16) diagonal blocks.
    """
    platform = platform.lower()
    if platform == "cpu":
        return dict(chunk_size=GDN_CHUNK, matmul_dtype=None, inverse_block=None)
    if platform in ("tpu", "gpu", "cuda", "rocm"):
        return dict(chunk_size=GDN_ACCEL_CHUNK, matmul_dtype=jnp.bfloat16,
                    inverse_block=GDN_INVERSE_BLOCK)
    raise ValueError(f"unknown platform {platform!r}")


def chunked(q, k, v, g, beta, state=None, chunk_size: int = GDN_ACCEL_CHUNK, matmul_dtype=None,
            inverse_block: int | None = None, reset_BxT=None):
    """Chunk-parallel form of `recurrent` (same outputs up to float rounding), resets included.

    matmul_dtype None: every matmul in fp32 at HIGHEST precision. matmul_dtype=jnp.bfloat16: every
    matmul's inputs (including the carried state, as read) are cast to bf16 and accumulated in fp32,
    except inside (I + L)^-1, which is computed in fp32 HIGHEST (cast to bf16 only when applied); the
    carried state S, the decays and all elementwise work stay fp32. The bf16 mode's output is within
    about 1e-2 relative (L2) of the fp32 one at dk = dv = 128.
    inverse_block None: (I + L)^-1 by `unit_lower_inverse` (C-step substitution, differentiated through
    the loop); an int b: by `blockwise_unit_lower_inverse(., b)` (b-step substitution, matmul derivative).

    reset_BxT: with s_i the number of resets at chunk positions <= i and gc_i the sum of g_j over
    j <= i with s_j = s_i (the in-chunk cumsum restarted at each reset: no cancellation against earlier
    sequences' decays), the decay products of a_t = exp(g_t) [not reset_t] are
        prod_{j<l<=i} a_l = exp(gc_i - gc_j) [s_i = s_j],   prod_{l<=i} a_l = exp(gc_i) [s_i = 0] (f_i),
        prod_{j<l<C} a_l = exp(gc_{C-1} - gc_j) [s_j = s_{C-1}] (e_j):
    the in-chunk decay gets the same-sequence mask, the carried-state reads (w's right-hand side, q_dec)
    and the chunk decay get f, k_dec gets e; masked entries are exact zeros.
    """
    q, k, v, g, beta = (x.astype(jnp.float32) for x in (q, k, v, g, beta))
    B, T, H, dk = q.shape
    dv = v.shape[-1]
    C = chunk_size
    mm = lambda spec, a, b: _matmul(spec, a, b, matmul_dtype)
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
    first = last = None  # f, e of the docstring; None: all ones
    if reset_BxT is not None:
        r = jnp.pad(jnp.asarray(reset_BxT, jnp.int32), ((0, 0), (0, pad)))
        seq = jnp.cumsum(jnp.moveaxis(r.reshape(B, N, C), 1, 0), axis=-1)[:, :, None]  # [N, B, 1, C]
        first, last = seq == 0, seq == seq[..., -1:]
        causal = causal & (seq[..., :, None] == seq[..., None, :])
        gc = jnp.sum(jnp.where(causal, g_c[..., None, :], 0.0), axis=-1)  # restarted at each reset
    # exp(x) where m, else 0; masked before the exp: exp(gc_{C-1} - gc_j) of an earlier sequence can be inf
    exp_where = lambda m, x: jnp.exp(x if m is None else jnp.where(m, x, -jnp.inf))  # noqa: E731
    # decay[i, j] = exp(gc_i - gc_j) for j <= i (same sequence), else 0.
    diff = gc[..., :, None] - gc[..., None, :]
    decay = jnp.exp(jnp.where(causal, diff, -jnp.inf))

    kb = k_c * b_c[..., None]
    vb = v_c * b_c[..., None]
    strict = mm("nbhid,nbhjd->nbhij", kb, k_c) * decay
    strict = jnp.where(jnp.tril(jnp.ones((C, C), bool), -1), strict, 0.0)
    rhs = jnp.concatenate([vb, kb * exp_where(first, gc)[..., None]], axis=-1)
    inv = (unit_lower_inverse(strict) if inverse_block is None
           else blockwise_unit_lower_inverse(strict, inverse_block))
    sol = mm("nbhij,nbhjd->nbhid", inv, rhs)
    u, w = sol[..., :dv], sol[..., dv:]  # new values; decayed keys reading the old state
    attn = mm("nbhid,nbhjd->nbhij", q_c, k_c) * decay
    q_dec = q_c * exp_where(first, gc)[..., None]
    k_dec = k_c * exp_where(last, gc[..., -1:] - gc)[..., None]
    chunk_decay = exp_where(None if first is None else first[..., -1], gc[..., -1])[..., None, None]

    def body(s, xs):
        u_i, w_i, q_i, k_i, a_i, d_i = xs
        v_new = u_i - mm("bhcd,bhde->bhce", w_i, s)
        o = mm("bhcd,bhde->bhce", q_i, s) + mm("bhij,bhje->bhie", a_i, v_new)
        s = s * d_i + mm("bhcd,bhce->bhde", k_i, v_new)
        return s, o

    state, o = lax.scan(body, state, (u, w, q_dec, k_dec, attn, chunk_decay))
    o = jnp.moveaxis(o, (0, 2), (1, 3)).reshape(B, N * C, H, dv)[:, :T]
    return o, state
