"""Softmax attention shared by the families: the `Attention` module (GQA with per-head q / k norms and
RoPE, optionally output-gated), and its glue: the mask, the dense GQA attention (heads first on CPU, a
one-query layout for CPU decode), the KV cache and its writes, the cached attention over the filled window,
and the uncached kernels of `flash` behind one call.

    out = attend_uncached(q, k, v, positions, key_valid, segment_ids, impl, mesh)   # [B, T, H * hd]
    cache = write_kv(cache, k, v, write_pos, mesh)
    out = attend_cache(q, cache, positions, key_valid, write_pos, mesh)             # [B, T, H * hd]

q [B, T, H, hd], k / v [B, T, Hkv, hd] (after any norm and RoPE); query head h reads kv head
h // (H / Hkv); logits q.k / sqrt(hd), softmax in fp32.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx
from jax import lax

from prover_jax.models.common import flash
from prover_jax.models.common.layers import Linear, rope

Array = jax.Array


class KVCache(NamedTuple):
    """Full-attention decode cache (after k_norm + RoPE): k, v [B, S, Hkv, hd] in the cache dtype."""

    k: Array
    v: Array


def platform(mesh) -> str:
    """The platform the program runs on: `mesh`'s devices', else the default backend's."""
    return mesh.devices.flat[0].platform if mesh is not None else jax.default_backend()


# On CPU, cached attention runs over the first W cache positions, W the smallest window holding every
# query's keys: powers of two from MIN_WINDOW up to half the cache, else the whole cache (a branch each,
# chosen on the device); XLA:CPU copies a window out first, which past half the cache costs more than
# the whole cache in place (demo, 32 x 1536: 3.3-4.4 against 2.4-3.5 ms a step). TPU and GPU attend the
# whole cache: XLA's cost analysis sums every branch's bytes, so the AOT roofline would not hold.
MIN_WINDOW = 128


def windows(S: int) -> list[int]:
    """The window lengths a CPU cache of S positions is attended in (see MIN_WINDOW)."""
    out, W = [], MIN_WINDOW
    while 2 * W <= S:
        out.append(W)
        W *= 2
    return out + [S]


def mask(key_pos, positions_BxT, key_valid_BxS, segment_ids_BxT) -> Array:
    """[B, T, S]: causal in absolute positions, valid keys only, and (packed rows) the same sequence."""
    out = (key_pos[:, None, :] <= positions_BxT[:, :, None]) & key_valid_BxS[:, None, :]
    if segment_ids_BxT is not None:
        out = out & (segment_ids_BxT[:, :, None] == segment_ids_BxT[:, None, :])
    return out


# The one-query path multiplies the attention flops by Hkv (zero blocks); past this it may stop paying.
# CPU only: on TPU its [B, S, Hkv * hd] view of the cache changes the tiled layout, i.e. copies the whole
# cache per layer and step (prover-aot 4B v5p-16 decode: 8.6 of 35 GB per step), where the GQA einsums
# batched over (row, kv head) read it in place.
ONE_QUERY_MAX_KV_HEADS = 8


def attend(q_BxTxHxd: Array, k_BxSxKxd: Array, v_BxSxKxd: Array, mask_BxTxS: Array, mesh,
           cached: bool) -> Array:
    """softmax(q k^T / sqrt(hd), masked) v with GQA -> [B, T, H * hd]: `flash.masked_attention`, heads
    first on CPU (a decode step on CPU: the one-query layout)."""
    B, T, H, hd = q_BxTxHxd.shape
    Hkv = k_BxSxKxd.shape[2]
    if cached and T == 1 and Hkv <= ONE_QUERY_MAX_KV_HEADS and platform(mesh) == "cpu":
        with jax.named_scope("cache_attention"):
            return one_query_attention(q_BxTxHxd[:, 0], k_BxSxKxd, v_BxSxKxd, mask_BxTxS[:, 0])[:, None]
    out = flash.masked_attention(q_BxTxHxd, k_BxSxKxd, v_BxSxKxd, mask_BxTxS,
                                 heads_first=platform(mesh) == "cpu")
    return out.reshape(B, T, H * hd)


def one_query_attention(q_BxHxd: Array, k_BxSxKxd: Array, v_BxSxKxd: Array, mask_BxS: Array) -> Array:
    """Decode attention (one query per row) over a whole [B, S, Hkv, hd] cache -> [B, H * hd].

    Same function as the GQA einsums, laid out so XLA reads the cache where it lies: a dot batched over
    (row, kv head) would first transpose both cache arrays, on every step. Instead each query head is
    zero-padded to all Hkv kv heads (block-diagonal), so both products contract the contiguous Hkv * hd
    axis with only the row as batch, and the cache is the streamed operand; the padding adds exact
    zeros, and each head keeps its own kv head's block of the output.
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


def write_at(cache_BxSx___: Array, new_BxTx___: Array, pos_B: Array, bits: bool) -> Array:
    """cache[b, pos_B[b]:pos_B[b] + T] = new[b] (a scatter, in place when the cache is donated). With
    `bits` (CPU), a 16-bit float cache is scattered as its uint16 bit pattern: XLA:CPU runs a bf16
    scatter by converting the whole cache to fp32 and back, on every decode step. Not on TPU, where
    the bit casts are copies of the whole cache."""
    write = jax.vmap(lambda c, n, p: lax.dynamic_update_slice_in_dim(c, n, p, axis=0))
    if not bits or jnp.dtype(cache_BxSx___.dtype).itemsize != 2:
        return write(cache_BxSx___, new_BxTx___, pos_B)
    as_bits = lambda a: lax.bitcast_convert_type(a, jnp.uint16)  # noqa: E731
    return lax.bitcast_convert_type(write(as_bits(cache_BxSx___), as_bits(new_BxTx___), pos_B), cache_BxSx___.dtype)


def write_kv(cache: KVCache, k_BxTxKxd: Array, v_BxTxKxd: Array, write_pos_B: Array, mesh) -> KVCache:
    """`cache` with this call's k / v (cast to the cache dtype) written at write_pos_B.. of each row
    (`write_at`, as bits on CPU)."""
    bits = platform(mesh) == "cpu"
    return KVCache(write_at(cache.k, k_BxTxKxd.astype(cache.k.dtype), write_pos_B, bits),
                   write_at(cache.v, v_BxTxKxd.astype(cache.v.dtype), write_pos_B, bits))


def attend_cache(q_BxTxHxd: Array, cache: KVCache, positions_BxT: Array, key_valid_BxS: Array,
                 write_pos_B: Array, mesh) -> Array:
    """Attention of this call's queries (at positions_BxT, written at write_pos_B..) over the cache,
    key_valid_BxS masking its [B, S] positions -> [B, T, H * hd]. Keys past the furthest query are masked
    for every row, so only the filled window is attended: on CPU the smallest of `windows(S)` holding
    every row's keys (chosen on the device), elsewhere the whole cache."""
    S, T = cache.k.shape[1], q_BxTxHxd.shape[1]
    wins = windows(S) if platform(mesh) == "cpu" else [S]
    idx = jnp.minimum(jnp.searchsorted(jnp.asarray(wins), jnp.max(write_pos_B) + T), len(wins) - 1)

    def window(W):
        def run(q, k_all, v_all, pos, valid):
            return attend(q, k_all[:, :W], v_all[:, :W], mask(jnp.arange(W)[None, :], pos, valid[:, :W], None),
                          mesh, cached=True)
        return run

    return lax.switch(idx, [window(W) for W in wins], q_BxTxHxd, cache.k, cache.v, positions_BxT, key_valid_BxS)


def attend_uncached(q_BxTxHxd: Array, k_BxTxKxd: Array, v_BxTxKxd: Array, positions_BxT: Array,
                    key_valid_BxT: Array, segment_ids_BxT: Array | None, impl: str, mesh) -> Array:
    """Causal attention of a call's tokens over themselves -> [B, T, H * hd]. impl "dense": the masked
    einsums (causal in positions_BxT); otherwise `flash.attention` with that kernel (blocked | splash |
    cudnn | xla; positions 0..T-1; splash interpreted off TPU). segment_ids_BxT (int32 >= 0, equal ids
    <=> same sequence): packed rows, each query sees only its own sequence."""
    B, T, H, hd = q_BxTxHxd.shape
    if impl == "dense":
        return attend(q_BxTxHxd, k_BxTxKxd, v_BxTxKxd,
                      mask(positions_BxT, positions_BxT, key_valid_BxT, segment_ids_BxT), mesh, cached=False)
    return flash.attention(q_BxTxHxd, k_BxTxKxd, v_BxTxKxd, key_valid_BxT, segment_ids_BxT=segment_ids_BxT,
                           impl=impl, mesh=mesh if impl == "splash" else None,
                           interpret=platform(mesh) != "tpu").reshape(B, T, H * hd)


class Attention(nnx.Module):
    """q = rope(q_norm(q_proj x)), k = rope(k_norm(k_proj x)) per head, v = v_proj x;
    out = o_proj(softmax(q k^T / sqrt(hd)) v [* sigmoid(gate)]), GQA head h -> kv head h // (H / Hkv).
    gated: q_proj gives per head [query (hd) | gate (hd)] and the output is gated (Qwen3.5). `linear`:
    the projections' class (a `Linear`), `norm`: the q / k norm's (dim, eps, *, param_dtype, axes). The
    config needs hidden_size, num_attention_heads, num_key_value_heads, head_dim, rms_norm_eps and what
    `rope` reads."""

    def __init__(self, cfg, *, rngs, dtype, param_dtype, norm, gated: bool = False, linear=Linear):
        kw = dict(rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        D, H, Hkv, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = linear(D, (2 if gated else 1) * H * hd, ("embed", "q_heads"), **kw)
        self.k_proj = linear(D, Hkv * hd, ("embed", "kv_heads"), **kw)
        self.v_proj = linear(D, Hkv * hd, ("embed", "kv_heads"), **kw)
        self.o_proj = linear(H * hd, D, ("q_heads", "embed"), **kw)
        self.q_norm = norm(hd, cfg.rms_norm_eps, param_dtype=param_dtype, axes=("head_dim",))
        self.k_norm = norm(hd, cfg.rms_norm_eps, param_dtype=param_dtype, axes=("head_dim",))
        self.cfg = cfg
        self.gated = gated

    def __call__(self, x_BxTxD, positions_BxT, key_valid_BxS, cache: KVCache | None = None,
                 write_pos_B: Array | None = None, impl: str = "dense", mesh=None,
                 segment_ids_BxT: Array | None = None):
        """-> (out [B, T, D], cache). Without cache, keys are this call's tokens and key_valid_BxS is
        [B, T]; segment_ids_BxT (int32 >= 0, equal ids <=> same sequence) restricts packed rows to their
        own sequence; impl picks the kernel (`attend_uncached`: dense | blocked | splash | cudnn | xla;
        splash / cudnn / xla need positions 0..T-1, cudnn / xla right padding, cudnn no packed rows). With
        a cache (always dense), this call's k / v are written at write_pos_B.. and key_valid_BxS masks the
        whole cache [B, S] (`write_kv`, `attend_cache`). The output gate applies after any of them."""
        if segment_ids_BxT is not None and cache is not None:
            raise ValueError("segment_ids_BxT (packed rows) is for the uncached forward only")
        cfg = self.cfg
        B, T, _ = x_BxTxD.shape
        H, Hkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        q = self.q_proj(x_BxTxD).reshape(B, T, H, (2 if self.gated else 1) * hd)
        gate = q[..., hd:].reshape(B, T, H * hd) if self.gated else None
        q = rope(self.q_norm(q[..., :hd] if self.gated else q), positions_BxT, cfg)
        k = rope(self.k_norm(self.k_proj(x_BxTxD).reshape(B, T, Hkv, hd)), positions_BxT, cfg)
        v = self.v_proj(x_BxTxD).reshape(B, T, Hkv, hd)
        if cache is None:
            out = attend_uncached(q, k, v, positions_BxT, key_valid_BxS, segment_ids_BxT, impl, mesh)
        else:
            cache = write_kv(cache, k, v, write_pos_B, mesh)
            out = attend_cache(q, cache, positions_BxT, key_valid_BxS, write_pos_B, mesh)
        return self.o_proj(out if gate is None else out * jax.nn.sigmoid(gate)), cache
