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

from prover_jax.models.common.model import REMAT, DecoderLM
from prover_jax.models.qwen3_5.config import FULL, Qwen3_5Config
from prover_jax.models.qwen3_5.delta_rule import GDN_CHUNK
from prover_jax.models.qwen3_5.layers import MLP, Attention, GatedDeltaNet, GDNCache, KVCache, RMSNorm

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
            from prover_jax.models.common.flash import cudnn_available
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


class Qwen3_5(DecoderLM):
    """Qwen3.5 text model. `dtype` = compute dtype, `param_dtype` = storage dtype; the scaffolding
    (embedding, both call modes, layer loops, logits, the engine's calls) is `common.model.DecoderLM`."""

    cache_fns = (init_cache, cache_axes)
    runtime_class = Runtime

    def __init__(self, cfg: Qwen3_5Config, *, rngs: nnx.Rngs, dtype=jnp.float32,
                 param_dtype=jnp.float32, mesh: Mesh | None = None, runtime: Runtime | None = None):
        kw = dict(rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        super().__init__(cfg, **kw, mesh=mesh, runtime=runtime,
                         layers=lambda: [DecoderLayer(cfg, kind, **kw) for kind in cfg.layer_types],
                         norm=lambda: RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=param_dtype))

    def scan_period(self) -> int:
        """The repeating block of layer kinds (e.g. 3 Gated DeltaNet + 1 full attention layer)."""
        return block_period(self.config.layer_types)
