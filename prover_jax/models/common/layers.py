"""Family-neutral building blocks in Flax NNX: parameter init helpers, `Linear` (and the dot contexts it
reads), the SwiGLU `MLP` and RoPE. Parameters are stored in `param_dtype`, matmuls run in `dtype`; every
parameter carries logical axis names (see prover_jax.sharding). Kernels are stored (in, out), the
transpose of torch's Linear weight.

A config passed here needs hidden_size, intermediate_size (MLP), rotary_dim and rope_theta (rope).
"""

from __future__ import annotations

import contextlib
import contextvars

import jax
import jax.numpy as jnp
from flax import nnx

Array = jax.Array


def param(rngs: nnx.Rngs, init, shape, dtype, axes) -> nnx.Param:
    """An nnx.Param of `shape` / `dtype` drawn by `init` from rngs.params(), with logical `axes`."""
    return nnx.Param(init(rngs.params(), shape, dtype), axes=axes)


def normal(std: float = 0.02):
    """The N(0, std^2) initializer of every kernel and embedding."""
    return jax.nn.initializers.normal(std)


_F32_DOT_OUTPUTS = contextvars.ContextVar("f32_dot_outputs", default=False)


@contextlib.contextmanager
def f32_dot_outputs():
    """While tracing under it, a Linear in a narrower compute dtype asks its dot for the fp32
    accumulator and rounds that once: the same value as a bf16 x bf16 -> bf16 dot, but XLA:CPU runs the
    latter by converting both operands, the weights included, to fp32 on every call (3x slower decode
    at bf16). For inference only (the cached mode): its gradient would carry fp32 cotangents. Enter it
    inside the traced function (as `model.DecoderLM` does), never around a jitted call: jit's cache does
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
    backward: 155 -> 70 ms on the demo update). The CPU forward enters it (`model.DecoderLM`); TPU and
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
    fp32 adapters) promotes it. LoRA (models.lora) adapts the Linears whose attribute name it targets."""

    def __init__(self, d_in, d_out, axes, *, rngs, dtype, param_dtype):
        self.kernel = param(rngs, normal(), (d_in, d_out), param_dtype, axes)
        self.dtype = dtype

    def __call__(self, x: Array) -> Array:
        x, w = x.astype(self.dtype), self.kernel[...].astype(self.dtype)
        if _F32_DOT_OUTPUTS.get() and jnp.dtype(self.dtype) != jnp.float32:
            return dot_rows(x, w, _FLAT_DOTS.get(), preferred_element_type=jnp.float32).astype(self.dtype)
        return dot_rows(x, w, _FLAT_DOTS.get()).astype(self.dtype)


class MLP(nnx.Module):
    """down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg, *, rngs, dtype, param_dtype):
        kw = dict(rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        D, I = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = Linear(D, I, ("embed", "mlp"), **kw)
        self.up_proj = Linear(D, I, ("embed", "mlp"), **kw)
        self.down_proj = Linear(I, D, ("mlp", "embed"), **kw)

    def __call__(self, x):
        return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))


def rope(x_BxTxNxd: Array, positions_BxT: Array, cfg) -> Array:
    """RoPE (rotate_half) over the first rd = cfg.rotary_dim dims of each head (theta cfg.rope_theta);
    the rest pass through (partial RoPE when rd < hd)."""
    rd = cfg.rotary_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (jnp.arange(0, rd, 2, dtype=jnp.float32) / rd))
    freqs = positions_BxT.astype(jnp.float32)[..., None] * inv_freq  # [B, T, rd/2]
    emb = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]
    cos, sin = jnp.cos(emb).astype(x_BxTxNxd.dtype), jnp.sin(emb).astype(x_BxTxNxd.dtype)
    x_rot, x_pass = x_BxTxNxd[..., :rd], x_BxTxNxd[..., rd:]
    half = rd // 2
    rotated = jnp.concatenate([-x_rot[..., half:], x_rot[..., :half]], axis=-1)
    return jnp.concatenate([x_rot * cos + rotated * sin, x_pass], axis=-1)


class RMSNorm(nnx.Module):
    """y = x * rsqrt(mean(x^2) + eps) * w, in fp32, cast back to x's dtype; w init 1. zero_centred
    (Qwen3.5's): the scale is (1 + w), w init 0."""

    def __init__(self, dim, eps, *, param_dtype, axes=("norm",), zero_centred: bool = False):
        init = jnp.zeros if zero_centred else jnp.ones
        self.weight = nnx.Param(init((dim,), param_dtype), axes=axes)
        self.eps = eps
        self.zero_centred = zero_centred

    def __call__(self, x: Array) -> Array:
        xf = x.astype(jnp.float32)
        y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + self.eps)
        w = self.weight[...].astype(jnp.float32)
        return (y * (1.0 + w if self.zero_centred else w)).astype(x.dtype)
