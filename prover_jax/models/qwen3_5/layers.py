"""Qwen3.5 building blocks in Flax NNX: zero-centred RMSNorm, SwiGLU MLP, gated full attention,
Gated DeltaNet. Parameters are stored in `param_dtype`, matmuls run in `dtype`; norms, softmax and the
delta-rule state run in fp32. Every parameter carries logical axis names (see prover_jax.sharding).

Kernels are stored (in, out), the transpose of torch's Linear weight.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx
from jax import lax

from prover_jax.models import packing
from prover_jax.models.qwen3_5 import delta_rule, flash
from prover_jax.models.qwen3_5.delta_rule import GDN_CHUNK  # the delta rule's chunk length (see there)
from prover_jax.models.qwen3_5.config import Qwen3_5Config

Array = jax.Array


def _param(rngs: nnx.Rngs, init, shape, dtype, axes):
    return nnx.Param(init(rngs.params(), shape, dtype), axes=axes)


def _normal(std=0.02):
    return jax.nn.initializers.normal(std)


_F32_DOT_OUTPUTS = contextvars.ContextVar("f32_dot_outputs", default=False)


@contextlib.contextmanager
def f32_dot_outputs():
    """While tracing under it, a Linear in a narrower compute dtype asks its dot for the fp32
    accumulator and rounds that once: the same value as a bf16 x bf16 -> bf16 dot, but XLA:CPU runs the
    latter by converting both operands, the weights included, to fp32 on every call (3x slower decode
    at bf16). For inference only (the cached mode): its gradient would carry fp32 cotangents. Enter it
    inside the traced function (as `Qwen3_5.hidden` does), never around a jitted call: jit's cache does
    not see it."""
    token = _F32_DOT_OUTPUTS.set(True)
    try:
        yield
    finally:
        _F32_DOT_OUTPUTS.reset(token)


_FLAT_DOTS = contextvars.ContextVar("flat_dots", default=False)


@contextlib.contextmanager
def flat_dots(on: bool = True):
    """While tracing under it (on), a Linear multiplies the rows of x as one 2-D [rows, in] matrix, which
    lets XLA:CPU form the weight gradient dW = x^T dy without a transposing copy of dy (the MLP's
    backward: 155 -> 70 ms on the demo update). The CPU forward enters it (`Qwen3_5.hidden`); TPU and
    GPU programs keep the [B, T, in] dots (there the reshape moved prover-aot's collective bytes)."""
    token = _FLAT_DOTS.set(bool(on))
    try:
        yield
    finally:
        _FLAT_DOTS.reset(token)


def dot_rows(x: Array, w: Array, flat: bool, **kw) -> Array:
    """x [..., in] @ w [in, out] -> [..., out]; flat: as one 2-D [rows, in] dot (`flat_dots`)."""
    y = jnp.dot(x.reshape(-1, x.shape[-1]) if flat else x, w, **kw)
    return y.reshape(*x.shape[:-1], w.shape[-1])


class Linear(nnx.Module):
    """y = x @ kernel (no bias); kernel [in, out]; y in `dtype`, also when an intercepted dot (LoRA's
    fp32 adapters) promotes it."""

    def __init__(self, d_in, d_out, axes, *, rngs, dtype, param_dtype):
        self.kernel = _param(rngs, _normal(), (d_in, d_out), param_dtype, axes)
        self.dtype = dtype

    def __call__(self, x: Array) -> Array:
        x, w = x.astype(self.dtype), self.kernel[...].astype(self.dtype)
        if _F32_DOT_OUTPUTS.get() and jnp.dtype(self.dtype) != jnp.float32:
            return dot_rows(x, w, _FLAT_DOTS.get(), preferred_element_type=jnp.float32).astype(self.dtype)
        return dot_rows(x, w, _FLAT_DOTS.get()).astype(self.dtype)


class RMSNorm(nnx.Module):
    """Zero-centred RMSNorm: y = x * rsqrt(mean(x^2) + eps) * (1 + w), in fp32, cast back. w init 0."""

    def __init__(self, dim, eps, *, param_dtype, axes=("norm",)):
        self.weight = nnx.Param(jnp.zeros((dim,), param_dtype), axes=axes)
        self.eps = eps

    def __call__(self, x: Array) -> Array:
        xf = x.astype(jnp.float32)
        y = xf * lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + self.eps)
        return (y * (1.0 + self.weight[...].astype(jnp.float32))).astype(x.dtype)


class MLP(nnx.Module):
    """down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: Qwen3_5Config, *, rngs, dtype, param_dtype):
        kw = dict(rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        D, I = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = Linear(D, I, ("embed", "mlp"), **kw)
        self.up_proj = Linear(D, I, ("embed", "mlp"), **kw)
        self.down_proj = Linear(I, D, ("mlp", "embed"), **kw)

    def __call__(self, x):
        return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))


def rope(x_BxTxNxd: Array, positions_BxT: Array, cfg: Qwen3_5Config) -> Array:
    """Partial RoPE: rotate_half over the first rd = hd * partial_rotary_factor dims; rest pass through."""
    rd = cfg.rotary_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (jnp.arange(0, rd, 2, dtype=jnp.float32) / rd))
    freqs = positions_BxT.astype(jnp.float32)[..., None] * inv_freq  # [B, T, rd/2]
    emb = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]
    cos, sin = jnp.cos(emb).astype(x_BxTxNxd.dtype), jnp.sin(emb).astype(x_BxTxNxd.dtype)
    x_rot, x_pass = x_BxTxNxd[..., :rd], x_BxTxNxd[..., rd:]
    half = rd // 2
    rotated = jnp.concatenate([-x_rot[..., half:], x_rot[..., :half]], axis=-1)
    return jnp.concatenate([x_rot * cos + rotated * sin, x_pass], axis=-1)


class KVCache(NamedTuple):
    """Full-attention decode cache (after k_norm + RoPE): k, v [B, S, Hkv, hd] in compute dtype."""

    k: Array
    v: Array


class GDNCache(NamedTuple):
    """Gated DeltaNet decode cache: conv [B, K-1, C] last pre-conv q|k|v columns (compute dtype),
    state [B, Hv, dk, dv] fp32 recurrent state."""

    conv: Array
    state: Array


class Attention(nnx.Module):
    """Gated full attention. q_proj gives per head [query (hd) | gate (hd)];
    out = o_proj(softmax(q k^T / sqrt(hd)) v * sigmoid(gate)), GQA head h -> kv head h // (H / Hkv)."""

    def __init__(self, cfg: Qwen3_5Config, *, rngs, dtype, param_dtype):
        kw = dict(rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        D, H, Hkv, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = Linear(D, 2 * H * hd, ("embed", "q_heads"), **kw)
        self.k_proj = Linear(D, Hkv * hd, ("embed", "kv_heads"), **kw)
        self.v_proj = Linear(D, Hkv * hd, ("embed", "kv_heads"), **kw)
        self.o_proj = Linear(H * hd, D, ("q_heads", "embed"), **kw)
        self.q_norm = RMSNorm(hd, cfg.rms_norm_eps, param_dtype=param_dtype, axes=("head_dim",))
        self.k_norm = RMSNorm(hd, cfg.rms_norm_eps, param_dtype=param_dtype, axes=("head_dim",))
        self.cfg = cfg

    def __call__(self, x_BxTxD, positions_BxT, key_valid_BxS, cache: KVCache | None = None,
                 write_pos_B: Array | None = None, impl: str = "dense", mesh=None,
                 segment_ids_BxT: Array | None = None):
        """Without cache, keys are this call's tokens and key_valid_BxS is [B, T]. With a cache, this
        call's keys are written at write_pos_B.. and key_valid_BxS masks the whole cache [B, S].
        segment_ids_BxT (no cache; int32 >= 0, equal ids <=> same sequence): packed rows, a query also
        needs its key's id (`flash` contract; impl="cudnn" refuses them).
        impl="splash" (no cache; positions 0..T-1) runs the Pallas kernel of `flash` instead of the
        dense einsum: no [B, H, T, T] scores in memory (interpreted off TPU: slow, for tests);
        impl="cudnn" | "xla" (no cache; positions 0..T-1; right padding) runs jax.nn.dot_product_attention
        with that implementation (`flash`). The output gate applies after any of them."""
        if segment_ids_BxT is not None and cache is not None:
            raise ValueError("segment_ids_BxT (packed rows) is for the uncached forward only")
        cfg = self.cfg
        B, T, _ = x_BxTxD.shape
        H, Hkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        qg = self.q_proj(x_BxTxD).reshape(B, T, H, 2 * hd)
        q, gate = qg[..., :hd], qg[..., hd:].reshape(B, T, H * hd)
        q = rope(self.q_norm(q), positions_BxT, cfg)
        k = rope(self.k_norm(self.k_proj(x_BxTxD).reshape(B, T, Hkv, hd)), positions_BxT, cfg)
        v = self.v_proj(x_BxTxD).reshape(B, T, Hkv, hd)
        if cache is not None:
            bits = _platform(mesh) == "cpu"
            k_all = _write_at(cache.k, k.astype(cache.k.dtype), write_pos_B, bits)
            v_all = _write_at(cache.v, v.astype(cache.v.dtype), write_pos_B, bits)
            cache = KVCache(k_all, v_all)
        else:
            k_all, v_all = k, v
            key_pos = positions_BxT
        if impl in ("splash", "xla", "cudnn", "blocked") and cache is None:
            out = flash.attention(q, k_all, v_all, key_valid_BxS, segment_ids_BxT=segment_ids_BxT, impl=impl,
                                  mesh=mesh if impl == "splash" else None,
                                  interpret=_platform(mesh) != "tpu").reshape(B, T, H * hd)
            return self.o_proj(out * jax.nn.sigmoid(gate)), cache
        if cache is None:
            out = _attend(q, k_all, v_all, _mask(key_pos, positions_BxT, key_valid_BxS, segment_ids_BxT), mesh,
                          cached=False)
        else:  # keys past the furthest query are masked for every row: attend over the filled window only
            S = k_all.shape[1]
            windows = _windows(S) if _platform(mesh) == "cpu" else [S]
            needed = jnp.max(write_pos_B) + T
            idx = jnp.minimum(jnp.searchsorted(jnp.asarray(windows), needed), len(windows) - 1)

            def window(W):
                def attend(q, k_all, v_all, pos, valid):
                    return _attend(q, k_all[:, :W], v_all[:, :W], _mask(jnp.arange(W)[None, :], pos,
                                                                         valid[:, :W], None), mesh, cached=True)
                return attend

            out = lax.switch(idx, [window(W) for W in windows], q, k_all, v_all, positions_BxT, key_valid_BxS)
        out = out * jax.nn.sigmoid(gate)
        return self.o_proj(out), cache


# On CPU, cached attention runs over the first W cache positions, W the smallest window holding every
# query's keys: powers of two from _MIN_WINDOW up to half the cache, else the whole cache (a branch each,
# chosen on the device); XLA:CPU copies a window out first, which past half the cache costs more than
# the whole cache in place (demo, 32 x 1536: 3.3-4.4 against 2.4-3.5 ms a step). TPU and GPU attend the
# whole cache: XLA's cost analysis sums every branch's bytes, so the AOT roofline would not hold.
_MIN_WINDOW = 128


def _windows(S: int) -> list[int]:
    out, W = [], _MIN_WINDOW
    while 2 * W <= S:
        out.append(W)
        W *= 2
    return out + [S]


def _mask(key_pos, positions_BxT, key_valid_BxS, segment_ids_BxT):
    """[B, T, S]: causal in absolute positions, valid keys only, and (packed rows) the same sequence."""
    mask = (key_pos[:, None, :] <= positions_BxT[:, :, None]) & key_valid_BxS[:, None, :]
    if segment_ids_BxT is not None:
        mask = mask & (segment_ids_BxT[:, :, None] == segment_ids_BxT[:, None, :])
    return mask


def _attend(q_BxTxHxd: Array, k_BxSxKxd: Array, v_BxSxKxd: Array, mask_BxTxS: Array, mesh,
            cached: bool) -> Array:
    """softmax(q k^T / sqrt(hd), masked) v with GQA -> [B, T, H * hd]: `flash.masked_attention`, heads
    first on CPU (a decode step on CPU: the one-query layout)."""
    B, T, H, hd = q_BxTxHxd.shape
    Hkv = k_BxSxKxd.shape[2]
    if cached and T == 1 and Hkv <= _ONE_QUERY_MAX_KV_HEADS and _platform(mesh) == "cpu":
        with jax.named_scope("cache_attention"):
            return _one_query_attention(q_BxTxHxd[:, 0], k_BxSxKxd, v_BxSxKxd, mask_BxTxS[:, 0])[:, None]
    out = flash.masked_attention(q_BxTxHxd, k_BxSxKxd, v_BxSxKxd, mask_BxTxS,
                                 heads_first=_platform(mesh) == "cpu")
    return out.reshape(B, T, H * hd)


def _write_at(cache_BxSx___: Array, new_BxTx___: Array, pos_B: Array, bits: bool) -> Array:
    """cache[b, pos_B[b]:pos_B[b] + T] = new[b] (a scatter, in place when the cache is donated). With
    `bits` (CPU), a 16-bit float cache is scattered as its uint16 bit pattern: XLA:CPU runs a bf16
    scatter by converting the whole cache to fp32 and back, on every decode step. Not on TPU, where
    the bit casts are copies of the whole cache."""
    write = jax.vmap(lambda c, n, p: lax.dynamic_update_slice_in_dim(c, n, p, axis=0))
    if not bits or jnp.dtype(cache_BxSx___.dtype).itemsize != 2:
        return write(cache_BxSx___, new_BxTx___, pos_B)
    as_bits = lambda a: lax.bitcast_convert_type(a, jnp.uint16)  # noqa: E731
    return lax.bitcast_convert_type(write(as_bits(cache_BxSx___), as_bits(new_BxTx___), pos_B), cache_BxSx___.dtype)


def _platform(mesh) -> str:
    return mesh.devices.flat[0].platform if mesh is not None else jax.default_backend()


# The one-query path multiplies the attention flops by Hkv (zero blocks); past this it may stop paying.
# CPU only: on TPU its [B, S, Hkv * hd] view of the cache changes the tiled layout, i.e. copies the whole
# cache per layer and step (prover-aot 4B v5p-16 decode: 8.6 of 35 GB per step), where the GQA einsums
# batched over (row, kv head) read it in place.
_ONE_QUERY_MAX_KV_HEADS = 8


def _one_query_attention(q_BxHxd: Array, k_BxSxKxd: Array, v_BxSxKxd: Array, mask_BxS: Array) -> Array:
    """Decode attention (one query per row) over a whole [B, S, Hkv, hd] cache -> [B, H * hd].

    Same function as the GQA einsums in `Attention`, laid out so XLA reads the cache where it lies: a dot
    batched over (row, kv head) would first transpose both cache arrays, on every step. Instead each
    query head is zero-padded to all Hkv kv heads (block-diagonal), so both products contract the
    contiguous Hkv * hd axis with only the row as batch, and the cache is the streamed operand; the
    padding adds exact zeros, and each head keeps its own kv head's block of the output.
    """
    B, H, hd = q_BxHxd.shape
    _, S, Hkv, _ = k_BxSxKxd.shape
    dt = q_BxHxd.dtype
    own = jnp.arange(H)[:, None] // (H // Hkv) == jnp.arange(Hkv)[None, :]  # [H, Hkv]
    q_bd = jnp.where(own[None, :, :, None], q_BxHxd[:, :, None, :], 0).reshape(B, H, Hkv * hd)
    k = k_BxSxKxd.reshape(B, S, Hkv * hd).astype(dt)
    v = v_BxSxKxd.reshape(B, S, Hkv * hd).astype(dt)
    logits = jnp.einsum("bsc,bhc->bsh", k, q_bd, preferred_element_type=jnp.float32) * hd ** -0.5
    logits = jnp.where(mask_BxS[:, None, :], jnp.swapaxes(logits, 1, 2), jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(logits, axis=-1).astype(dt)  # [B, H, S]
    out = jnp.einsum("bhs,bsc->bhc", probs, v, preferred_element_type=jnp.float32).astype(dt).reshape(B, H, Hkv, hd)
    return jnp.where(own[None, :, :, None], out, 0).sum(axis=2).reshape(B, H * hd)


class GatedRMSNorm(nnx.Module):
    """y = w * rmsnorm(o) * silu(z) per head over dv; ONE weight (dv,), plain w (init 1)."""

    def __init__(self, dim, eps, *, param_dtype):
        self.weight = nnx.Param(jnp.ones((dim,), param_dtype), axes=("head_dim",))
        self.eps = eps

    def __call__(self, o, z):
        of = o.astype(jnp.float32)
        y = (of * lax.rsqrt(jnp.mean(of * of, axis=-1, keepdims=True) + self.eps)).astype(o.dtype)
        y = self.weight[...].astype(jnp.float32) * y * jax.nn.silu(z.astype(jnp.float32))
        return y.astype(o.dtype)


class GatedDeltaNet(nnx.Module):
    """Gated DeltaNet mixer:
    qkv = conv_silu(in_proj_qkv x); z = in_proj_z x; beta = sigmoid(in_proj_b x);
    g = -exp(A_log) softplus(in_proj_a x + dt_bias); o = delta_rule(l2n(q)/sqrt(dk), l2n(k), v, g, beta);
    out = out_proj(GatedRMSNorm(o, z)). Value head j reads key head j // (Hv / Hk)."""

    def __init__(self, cfg: Qwen3_5Config, *, rngs, dtype, param_dtype):
        kw = dict(rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        D, Hv, C, K = cfg.hidden_size, cfg.linear_num_value_heads, cfg.conv_dim, cfg.linear_conv_kernel_dim
        self.in_proj_qkv = Linear(D, C, ("embed", "qkv"), **kw)
        self.in_proj_z = Linear(D, cfg.linear_value_dim, ("embed", "lin_heads"), **kw)
        self.in_proj_b = Linear(D, Hv, ("embed", "lin_heads"), **kw)
        self.in_proj_a = Linear(D, Hv, ("embed", "lin_heads"), **kw)
        self.conv_weight = _param(rngs, _normal(0.2), (C, K), param_dtype, ("qkv", "conv"))
        self.dt_bias = nnx.Param(jnp.ones((Hv,), param_dtype), axes=("lin_heads",))
        a = jax.random.uniform(rngs.params(), (Hv,), jnp.float32, 0.01, 16.0)
        self.A_log = nnx.Param(jnp.log(a).astype(param_dtype), axes=("lin_heads",))
        self.norm = GatedRMSNorm(cfg.linear_value_head_dim, cfg.rms_norm_eps, param_dtype=param_dtype)
        self.out_proj = Linear(cfg.linear_value_dim, D, ("lin_heads", "embed"), **kw)
        self.cfg = cfg
        self.dtype = dtype

    def __call__(self, x_BxTxD, valid_BxT, cache: GDNCache | None = None, valid_len_B=None,
                 chunk_size: int = GDN_CHUNK, matmul_dtype: str | None = None,
                 inverse_block: int | None = None, segment_ids_BxT: Array | None = None):
        """valid_BxT: which positions are real tokens. Padding leaves the state untouched (beta = g = 0)
        and, without a cache, is zeroed at the input as in the reference implementation.
        segment_ids_BxT (no cache; int32, equal ids <=> same sequence, e.g. `packing.sequence_index`):
        the conv reads zeros in place of inputs from another sequence (conv tap s of token t needs
        id_{t-s} = id_t), and the delta-rule state restarts from zero where the id changes."""
        if segment_ids_BxT is not None and cache is not None:
            raise ValueError("segment_ids_BxT (packed rows) is for the uncached forward only")
        cfg = self.cfg
        B, T, _ = x_BxTxD.shape
        Hk, Hv, dk, dv = (cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_key_head_dim,
                          cfg.linear_value_head_dim)
        K = cfg.linear_conv_kernel_dim
        x = x_BxTxD * valid_BxT[..., None].astype(x_BxTxD.dtype)
        qkv = self.in_proj_qkv(x)  # [B, T, C]
        prev = (jnp.zeros((B, K - 1, qkv.shape[-1]), qkv.dtype) if cache is None
                else cache.conv.astype(qkv.dtype))
        padded = jnp.concatenate([prev, qkv], axis=1)  # [B, K-1+T, C]
        w = self.conv_weight[...].astype(self.dtype)  # [C, K]
        seg = segment_ids_BxT
        ids = None if seg is None else jnp.pad(seg, ((0, 0), (K - 1, 0)), constant_values=-1)

        def tap(k):  # the inputs at t - (K - 1 - k), zero where from another sequence
            cols = padded[:, k:k + T]
            return cols if ids is None else jnp.where((ids[:, k:k + T] == seg)[..., None], cols, 0)

        conv = sum(tap(k) * w[:, k] for k in range(K))
        conv = jax.nn.silu(conv)
        kd = cfg.linear_key_dim
        # q and k heads side by side: one l2norm over [B, T, 2 Hk, dk] instead of two.
        qk = delta_rule.l2norm(conv[..., :2 * kd].reshape(B, T, 2 * Hk, dk).astype(jnp.float32))
        q, k = qk[:, :, :Hk], qk[:, :, Hk:]
        v = conv[..., 2 * kd:].reshape(B, T, Hv, dv)
        z = self.in_proj_z(x).reshape(B, T, Hv, dv)
        beta = jax.nn.sigmoid(self.in_proj_b(x).astype(jnp.float32))
        a = self.in_proj_a(x).astype(jnp.float32)
        g = -jnp.exp(self.A_log[...].astype(jnp.float32)) * jax.nn.softplus(
            a + self.dt_bias[...].astype(jnp.float32))
        keep = valid_BxT[..., None]
        beta, g = jnp.where(keep, beta, 0.0), jnp.where(keep, g, 0.0)
        rep = Hv // Hk
        q, k = jnp.repeat(q, rep, axis=2), jnp.repeat(k, rep, axis=2)
        q = q * dk ** -0.5
        v = v.astype(jnp.float32)
        state = None if cache is None else cache.state
        if cache is not None and T == 1:
            with jax.named_scope("delta_rule_step"):
                o, state = delta_rule.step(q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], state)
            o = o[:, None]
        else:
            reset = None if segment_ids_BxT is None else packing.sequence_starts(segment_ids_BxT)
            o, state = delta_rule.chunked(q, k, v, g, beta, state, chunk_size=chunk_size,
                                          matmul_dtype=matmul_dtype and jnp.dtype(matmul_dtype),
                                          inverse_block=inverse_block, reset_BxT=reset)
        new_cache = None
        if cache is not None:
            # last K-1 valid pre-conv columns: padded rows [len, len + K - 1).
            if T == 1:  # the window moves by one column iff the row's token is valid
                window = jnp.where(valid_len_B[:, None, None] > 0, padded[:, 1:], padded[:, :K - 1])
            else:
                take = jax.vmap(lambda p, n: lax.dynamic_slice_in_dim(p, n, K - 1, axis=0))
                window = take(padded, valid_len_B)
            new_cache = GDNCache(window.astype(cache.conv.dtype), state)
        o = self.norm(o.astype(self.dtype), z)
        return self.out_proj(o.reshape(B, T, Hv * dv)), new_cache
