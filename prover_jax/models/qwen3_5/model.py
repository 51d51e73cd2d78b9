"""The Qwen3.5 text decoder (dense, hybrid Gated DeltaNet / gated full attention) and its decode cache.

    h = embed[tokens]; for each layer: h += mixer(norm_in(h)); h += mlp(norm_post(h))
    logits = lm_head(norm(h))   (lm_head = embed^T when tied), fp32

Two call modes:
    model(tokens_BxT, mask_BxT=None, positions_BxT=None, segment_ids_BxT=None) -> logits [B, T, V]
    model(tokens_BxT, cache=cache, valid_len_B=None) -> (logits, cache)
The cached mode appends the first valid_len_B[b] tokens of row b (right padding ignored) at position
cache.pos[b]; prefill of T tokens followed by N one-token steps equals one forward over T + N tokens.
Packed rows (uncached): segment_ids_BxT (int32, >= 1 at real tokens, 0 at padding, each maximal run of
equal ids one sequence; see `packing`) makes every sequence of a row see only itself: attention within
its run, the Gated DeltaNet conv and state restarted at its start; positions_BxT defaults to positions
restarting at 0 in each sequence. Each sequence's outputs then equal running it alone. Attention "cudnn"
refuses packed rows (see `flash`): use dense, splash or xla.

How the uncached forward runs (training, scoring) is set by `model.runtime` (a `Runtime`, a constructor
argument or set afterwards, part of the graph, so a jitted step sees it as static; the cached prefill
takes its delta-rule settings too, its attention is always dense): `scan_layers` runs ONE traced copy of the repeating block
(e.g. 3 Gated DeltaNet + 1 full attention layer) under `lax.scan` over the blocks' stacked weights, so
compile time does not grow with depth; `remat` recomputes each block's activations in the backward
pass (none | full | dots: matmul outputs without batch dimensions are kept); `attention` picks the
full-attention kernel (dense einsum | blocked: the dense einsums over causal query blocks, the CPU
default | splash, a Pallas TPU kernel | cudnn / xla: jax.nn.dot_product_attention with that
implementation, cuDNN's fused attention on NVIDIA GPUs or its portable lowering);
`gdn_chunk` / `gdn_matmul_dtype` / `gdn_inverse_block` the delta rule's chunk length, matmul input
dtype and (I + L)^-1 block size. All are the same function up to float rounding.
"""

from __future__ import annotations

import dataclasses

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from prover_jax.models import packing
from prover_jax.models.qwen3_5.config import FULL, Qwen3_5Config
from prover_jax.models.qwen3_5.delta_rule import GDN_CHUNK
from prover_jax.models.qwen3_5.layers import (MLP, Attention, GatedDeltaNet, GDNCache, KVCache, RMSNorm,
                                              _normal, _param, _platform, dot_rows, f32_dot_outputs,
                                              flat_dots)
from prover_jax.sharding import constrain

ACT = ("batch", "length", "act_embed")
REMAT = ("none", "full", "dots")
ATTENTION = ("dense", "splash", "cudnn", "xla", "blocked")


@dataclasses.dataclass(frozen=True)
class Runtime:
    """How the uncached forward is computed (see the module docstring); `resolve` fills "auto"."""

    scan_layers: bool = False
    remat: str = "none"  # none | full | dots
    attention: str = "dense"  # dense | blocked | splash | cudnn | xla (the last two: dot_product_attention)
    gdn_chunk: int = GDN_CHUNK
    gdn_matmul_dtype: str | None = None  # None: fp32 (HIGHEST); "bfloat16": bf16 inputs, fp32 accumulation
    gdn_inverse_block: int | None = None  # None: C-step substitution; b: blockwise (I + L)^-1, b x b blocks

    def __post_init__(self):
        if self.remat not in REMAT:
            raise ValueError(f"remat must be one of {REMAT}, got {self.remat!r}")
        if self.attention not in ATTENTION:
            raise ValueError(f"attention must be one of {ATTENTION}, got {self.attention!r}")


def resolve_runtime(platform: str, *, scan_layers=False, remat="none", attention="auto",
                    gdn_chunk=0, gdn_matmul_dtype="auto", cudnn: bool | None = None, dtype=None,
                    packed: bool = False) -> Runtime:
    """A Runtime for `platform` (cpu | tpu | gpu): "auto" / 0 take the backend's defaults (TPU: splash
    attention, delta-rule chunk 64 with bf16 matmul inputs; GPU: cuDNN attention through
    jax.nn.dot_product_attention, chunk 64, bf16 matmul inputs; CPU: blocked (the dense math over causal
    query blocks), chunk 16, fp32). attention="dpa" is jax.nn.dot_product_attention on any backend:
    "cudnn" on a GPU with cuDNN, else "xla". `cudnn`: whether cuDNN is there (None: ask the running
    backend, only when platform is gpu). cuDNN is taken only where it can run the call: compute
    `dtype` bf16 / fp16 (None: unknown, taken as such) and no `packed` rows; else auto is "dense" and
    dpa "xla"."""
    from prover_jax.models.qwen3_5.delta_rule import backend_defaults
    gdn = backend_defaults(platform)
    gpu = platform.lower() in ("gpu", "cuda", "rocm")
    if attention in ("auto", "dpa"):
        if gpu and cudnn is None:
            from prover_jax.models.qwen3_5.flash import cudnn_available
            cudnn = cudnn_available()
        half = dtype is None or jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
        if gpu and cudnn and half and not packed:
            attention = "cudnn"
        elif attention == "dpa":
            attention = "xla"
        else:
            attention = {"tpu": "splash", "cpu": "blocked"}.get(platform, "dense")
    if gdn_matmul_dtype == "auto":
        gdn_matmul_dtype = gdn["matmul_dtype"]
    return Runtime(scan_layers=bool(scan_layers), remat=remat, attention=attention,
                   gdn_chunk=int(gdn_chunk) or gdn["chunk_size"],
                   gdn_matmul_dtype=jnp.dtype(gdn_matmul_dtype).name if gdn_matmul_dtype else None,
                   gdn_inverse_block=gdn["inverse_block"])


def _remat(fn, remat: str):
    if remat == "none":
        return fn
    policy = (jax.checkpoint_policies.dots_with_no_batch_dims_saveable if remat == "dots"
              else jax.checkpoint_policies.nothing_saveable)
    return jax.checkpoint(fn, policy=policy)


def block_period(layer_types) -> int:
    """Length of the shortest block whose repetition gives `layer_types` (the scan unit)."""
    n = len(layer_types)
    for p in range(1, n + 1):
        if n % p == 0 and tuple(layer_types[:p]) * (n // p) == tuple(layer_types):
            return p
    return n


@flax.struct.dataclass
class Cache:
    """Hybrid decode cache with a slot (batch) axis.

    layers: per layer a KVCache (full attention: k, v [B, S, Hkv, hd]) or a GDNCache (conv [B, K-1, C],
        state [B, Hv, dk, dv] fp32).
    pos: [B] int32, number of tokens already in each row (= position of the next token).
    """

    layers: tuple
    pos: jax.Array

    @property
    def max_length(self) -> int | None:
        """Token capacity of the KV layers; None when every layer is linear (no length bound)."""
        for c in self.layers:
            if isinstance(c, KVCache):
                return c.k.shape[1]
        return None


def cache_axes(cfg: Qwen3_5Config, tensor: int = 1) -> Cache:
    """Logical axis names of every cache array (same structure as `init_cache`). When the KV heads
    do not split over a `tensor` axis of that size, the KV caches split their slots over it instead
    ("cache_slots": data, fsdp and tensor) rather than being copied onto every tensor shard."""
    kv_slots = "cache_batch" if cfg.num_key_value_heads % max(tensor, 1) == 0 else "cache_slots"
    layers = []
    for kind in cfg.layer_types:
        if kind == FULL:
            ax = (kv_slots, "cache_length", "cache_heads", "head_dim")
            layers.append(KVCache(ax, ax))
        else:
            layers.append(GDNCache(("cache_batch", None, "qkv"), ("cache_batch", "cache_heads", None, None)))
    return Cache(layers=tuple(layers), pos=("cache_batch",))


def init_cache(cfg: Qwen3_5Config, batch: int, max_length: int, dtype=jnp.float32) -> Cache:
    """Empty cache for `batch` rows of up to `max_length` tokens; KV/conv in `dtype`, GDN state fp32."""
    layers = []
    for kind in cfg.layer_types:
        if kind == FULL:
            shape = (batch, max_length, cfg.num_key_value_heads, cfg.head_dim)
            layers.append(KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)))
        else:
            layers.append(GDNCache(
                jnp.zeros((batch, cfg.linear_conv_kernel_dim - 1, cfg.conv_dim), dtype),
                jnp.zeros((batch, cfg.linear_num_value_heads, cfg.linear_key_head_dim,
                           cfg.linear_value_head_dim), jnp.float32)))
    return Cache(layers=tuple(layers), pos=jnp.zeros((batch,), jnp.int32))


class DecoderLayer(nnx.Module):
    def __init__(self, cfg: Qwen3_5Config, kind: str, *, rngs, dtype, param_dtype):
        kw = dict(rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        self.kind = kind
        if kind == FULL:
            self.self_attn = Attention(cfg, **kw)
        else:
            self.linear_attn = GatedDeltaNet(cfg, **kw)
        self.mlp = MLP(cfg, **kw)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=param_dtype)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=param_dtype)

    def __call__(self, h, *, positions, valid, key_valid, cache, write_pos, valid_len,
                 runtime: Runtime = Runtime(), mesh=None, segments=None):
        with jax.named_scope("attention" if self.kind == FULL else "gated_deltanet"):
            y, cache = self._mixer(h, positions, valid, key_valid, cache, write_pos, valid_len, runtime, mesh,
                                   segments)
        h = h + y
        with jax.named_scope("mlp"):
            h = h + self.mlp(self.post_attention_layernorm(h))
        return h, cache

    def _mixer(self, h, positions, valid, key_valid, cache, write_pos, valid_len, runtime, mesh, segments):
        x = self.input_layernorm(h)
        if self.kind == FULL:
            y, cache = self.self_attn(x, positions, key_valid, cache, write_pos,
                                      impl=runtime.attention if cache is None else "dense", mesh=mesh,
                                      segment_ids_BxT=segments)
        else:
            y, cache = self.linear_attn(x, valid, cache, valid_len, chunk_size=runtime.gdn_chunk,
                                        matmul_dtype=runtime.gdn_matmul_dtype,
                                        inverse_block=runtime.gdn_inverse_block, segment_ids_BxT=segments)
        return y, cache


class Qwen3_5(nnx.Module):
    """Qwen3.5 text model. `dtype` = compute dtype, `param_dtype` = storage dtype."""

    def __init__(self, cfg: Qwen3_5Config, *, rngs: nnx.Rngs, dtype=jnp.float32,
                 param_dtype=jnp.float32, mesh: Mesh | None = None, runtime: Runtime | None = None):
        kw = dict(rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        self.config = cfg
        self.dtype = dtype
        self.mesh = mesh
        self.runtime = Runtime() if runtime is None else runtime
        self.embed_tokens = _param(rngs, _normal(), (cfg.vocab_size, cfg.hidden_size), param_dtype,
                                   ("vocab", "embed"))
        self.layers = nnx.List([DecoderLayer(cfg, kind, **kw) for kind in cfg.layer_types])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=param_dtype)
        if not cfg.tie_word_embeddings:
            self.lm_head = _param(rngs, _normal(), (cfg.hidden_size, cfg.vocab_size), param_dtype,
                                  ("embed", "vocab"))

    # The sampling engine's model contract (prover_jax.sampling.model_api.DecodeModel): the cache
    # functions below, `hidden` (cached mode) and `logits`.
    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    def init_cache(self, batch: int, max_length: int, dtype=jnp.float32) -> Cache:
        """An empty `Cache` of `batch` rows of up to `max_length` tokens (module-level `init_cache`)."""
        return init_cache(self.config, batch, max_length, dtype)

    def cache_axes(self, tensor: int = 1) -> Cache:
        """Logical axis names of `init_cache`'s arrays (module-level `cache_axes`)."""
        return cache_axes(self.config, tensor)

    @staticmethod
    def cache_lengths(cache: Cache) -> jax.Array:
        """int32 [B]: tokens already in each row of `cache`."""
        return cache.pos

    def hidden(self, tokens_BxT, *, mask_BxT=None, positions_BxT=None, cache: Cache | None = None,
               valid_len_B=None, segment_ids_BxT=None):
        """Final-norm hidden states [B, T, D] (and the new cache in cached mode). segment_ids_BxT:
        packed rows (module doc); id 0 is invalid, as mask_BxT = 0 is. mask_BxT, positions_BxT and
        segment_ids_BxT are uncached only (ValueError with a cache)."""
        B, T = tokens_BxT.shape
        steps = jnp.arange(T, dtype=jnp.int32)[None, :]
        segments = None
        if cache is not None:
            if segment_ids_BxT is not None:
                raise ValueError("segment_ids_BxT (packed rows) is for the uncached forward only")
            if mask_BxT is not None or positions_BxT is not None:
                raise ValueError("mask_BxT / positions_BxT are for the uncached forward only; with a cache, "
                                 "rows are right-padded (valid_len_B) and positions continue from cache.pos")
            valid_len_B = (jnp.full((B,), T, jnp.int32) if valid_len_B is None
                           else jnp.asarray(valid_len_B, jnp.int32))
            positions = cache.pos[:, None] + steps
            valid = steps < valid_len_B[:, None]
            key_valid = (None if cache.max_length is None else
                         jnp.arange(cache.max_length)[None, :] < (cache.pos + valid_len_B)[:, None])
            write_pos = cache.pos
        else:
            valid = jnp.ones((B, T), bool) if mask_BxT is None else mask_BxT.astype(bool)
            positions = jnp.broadcast_to(steps, (B, T)) if positions_BxT is None else positions_BxT
            if segment_ids_BxT is not None:
                seg = jnp.asarray(segment_ids_BxT, jnp.int32)
                valid = valid & (seg > 0)
                segments = packing.sequence_index(seg)
                if positions_BxT is None:
                    positions = packing.sequence_positions(seg)
            key_valid, write_pos = valid, None
        h = self.embed_tokens[...].astype(self.dtype)[tokens_BxT]
        h = constrain(h, ACT, self.mesh)
        if cache is None:
            with flat_dots(_platform(self.mesh) == "cpu"):
                return self.norm(self._uncached_layers(h, positions, valid, segments))
        new_layers = []
        with f32_dot_outputs(), flat_dots(_platform(self.mesh) == "cpu"):  # inference only (f32_dot_outputs)
            for i, layer in enumerate(self.layers):
                h, c = layer(h, positions=positions, valid=valid, key_valid=key_valid, cache=cache.layers[i],
                             write_pos=write_pos, valid_len=valid_len_B, runtime=self.runtime, mesh=self.mesh)
                h = constrain(h, ACT, self.mesh)
                new_layers.append(c)
        return self.norm(h), Cache(layers=tuple(new_layers), pos=cache.pos + valid_len_B)

    def _uncached_layers(self, h, positions, valid, segments=None):
        """All layers without a cache, per `self.runtime`: unrolled, or one block under lax.scan over
        the blocks' stacked weights (matrices stacked in the compute dtype they are used in); each
        block (each layer when unrolled) rematerialised per `runtime.remat`."""
        rt = self.runtime
        kinds = self.config.layer_types
        p = block_period(kinds) if rt.scan_layers else 1
        n_blocks = len(kinds) // p

        def block_fn(graphdefs):
            def run(h, states):
                for gd, st in zip(graphdefs, states):
                    h, _ = nnx.merge(gd, st)(h, positions=positions, valid=valid, key_valid=valid,
                                            cache=None, write_pos=None, valid_len=None, runtime=rt,
                                            mesh=self.mesh, segments=segments)
                    h = constrain(h, ACT, self.mesh)
                return h
            return _remat(run, rt.remat)

        split = [nnx.split(layer) for layer in self.layers]
        if not rt.scan_layers or n_blocks == 1:
            for i in range(0, len(kinds), p):
                h = block_fn([g for g, _ in split[i:i + p]])(h, [s for _, s in split[i:i + p]])
            return h
        graphdefs = [split[j][0] for j in range(p)]
        cast = lambda x: x.astype(self.dtype) if x.ndim >= 2 else x  # noqa: E731
        stacked = [jax.tree.map(lambda *xs: jnp.stack([cast(x) for x in xs]),
                                *[split[b * p + j][1] for b in range(n_blocks)]) for j in range(p)]
        body = block_fn(graphdefs)
        h, _ = jax.lax.scan(lambda h, states: (body(h, states), None), h, stacked)
        return h

    @jax.named_scope("logits")
    def logits(self, h_BxTxD):
        """fp32 logits of hidden states. On CPU a 16-bit tied projection contracts the embedding's own
        last axis (XLA:CPU runs x @ E^T by converting the whole table to fp32 on every call: 1.1 -> 0.2
        ms for bench-small's 16 rows at bf16); fp32 and other backends keep the dot with E^T."""
        cpu, h = _platform(self.mesh) == "cpu", h_BxTxD.astype(self.dtype)
        if self.config.tie_word_embeddings and cpu and jnp.dtype(self.dtype).itemsize == 2:
            E = self.embed_tokens[...].astype(self.dtype)
            out = jax.lax.dot_general(h, E, (((h.ndim - 1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        else:
            w = (self.embed_tokens[...].T if self.config.tie_word_embeddings else self.lm_head[...])
            out = dot_rows(h, w.astype(self.dtype), cpu, preferred_element_type=jnp.float32)  # flat on CPU
        return constrain(out, ("batch", "length", "act_vocab"), self.mesh)

    def __call__(self, tokens_BxT, *, mask_BxT=None, positions_BxT=None, cache: Cache | None = None,
                 valid_len_B=None, segment_ids_BxT=None):
        out = self.hidden(tokens_BxT, mask_BxT=mask_BxT, positions_BxT=positions_BxT, cache=cache,
                          valid_len_B=valid_len_B, segment_ids_BxT=segment_ids_BxT)
        if cache is None:
            return self.logits(out)
        h, cache = out
        return self.logits(h), cache
