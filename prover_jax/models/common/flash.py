"""Causal self-attention over whole right-padded rows (training, no cache), interchangeable paths.

Contract of `attention(q [B, T, H, hd], k [B, T, K, hd], v [B, T, K, hd], valid [B, T],
segment_ids_BxT=None)`: query i of a row sees key j iff j <= i and valid[b, j] (and, for packed rows,
segment_ids[b, i] == segment_ids[b, j]: int32 ids >= 0, equal ids <=> same sequence); query head h reads
kv head h // (H // K); logits are q.k * hd**-0.5 with the softmax in fp32; the output [B, T, H, hd] has
q's dtype. Outputs at invalid query positions are finite but otherwise unspecified. Rows are
right-padded in training, but any validity pattern is served. Validity and packing combine into
ids = where(valid, segment_ids (None: 0), -1): query i sees key j iff j <= i and ids_i == ids_j at
valid queries, and padding, an id of its own, sees itself, so no softmax row is empty.

- impl="dense": the reference einsums; materialises [B, H, T, T] fp32 logits.
- impl="blocked": the same einsums over causal blocks of BLOCKED_ROWS queries: block i scores only the
  keys [0, (i + 1) b), ~(n + 1) / 2n of the dense logits for n blocks (the CPU default: the work and the
  memory traffic of the masked upper triangle are skipped; plain XLA, any backend).
- impl="splash": the Pallas TPU splash-attention kernel (flash-style blocks, its own custom VJP), never
  holding more than a [block, block] tile of logits. The ids above are the kernel's segment ids; T is
  padded up to a multiple of the block (id -1); GQA is the kernel's (H query heads over K kv heads);
  batch is a vmap.
  `interpret=True` runs the kernel in the Pallas interpreter (any backend; slow, for tests).
- impl="cudnn" | "xla": `jax.nn.dot_product_attention` with that implementation (cudnn: cuDNN's fused
  flash attention on NVIDIA GPUs, bf16/fp16 only, head dim <= 256 from Hopper on, else <= 128; xla: its
  portable einsum lowering, any backend, the CPU stand-in for the cudnn call). Both get the same
  arguments: causal (`is_causal`), GQA by the call's own grouping (head h reads kv head h // (H // K)),
  and validity as per-row key lengths (`key_value_seq_lengths` = valid.sum(-1), at least 1), so these
  two need right padding (valid a prefix of each row, as training rows are); other patterns: dense or
  splash. Packed rows cannot be said with lengths: "xla" then takes a boolean [B, 1, T, T] mask
  (ids equal; materialised, as its logits are anyway) instead of lengths; "cudnn" raises ValueError
  (jax.nn.dot_product_attention turns a mask into a dense [B, 1, T, T] bias for cuDNN, which gives up
  the fused kernel's memory bound): use dense, splash or xla for packed rows.
  A Mosaic kernel is not partitioned by XLA: under a sharded jit pass the `mesh`, and the kernel runs
  in a shard_map with rows over the logical "batch" axes and heads over "kv_heads" where they divide.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import splash_attention as sa
from jax.sharding import Mesh, PartitionSpec as P

from prover_jax.sharding import logical_to_spec

Array = jax.Array

LANES = 128  # the splash kernel's blocks must be multiples of the TPU lane width
# impl="blocked": query rows per block. On the 2-core CPU demo update (16 rows x 768): 64 and 128 take
# ~0.77x the dense step, 256 0.82x.
BLOCKED_ROWS = 128


def supported(impl: str, T: int, hd: int, block: int = 512) -> str | None:
    """None if `attention(..., impl=impl, block=block)` serves sequence length T and head dim hd,
    else the reason it does not. Splash takes any T (padded up to the block) and any hd (the head
    axis is one whole block); its q / kv blocks must be multiples of the 128-lane width."""
    if impl in ("dense", "xla", "blocked"):
        return None
    if impl == "cudnn":
        if hd % 8 or hd > 256:
            return f"cudnn attention needs a head dim that is a multiple of 8 and at most 256, not {hd}"
        return None
    if impl != "splash":
        return f"unknown attention impl {impl!r}"
    if block <= 0 or block % LANES:
        return f"splash block {block} is not a positive multiple of {LANES}"
    return None


def attention(q_BxTxHxd: Array, k_BxTxKxd: Array, v_BxTxKxd: Array, valid_BxT: Array, *,
              segment_ids_BxT: Array | None = None, impl: str = "dense", interpret: bool = False,
              block: int = 512, mesh: Mesh | None = None) -> Array:
    """Causal GQA attention -> [B, T, H, hd] in q's dtype (contract in the module doc). Splash scales
    q by hd**-0.5 in q's dtype before the kernel (exact for a power-of-two hd)."""
    B, T, H, hd = q_BxTxHxd.shape
    K = k_BxTxKxd.shape[2]
    if H % K:
        raise ValueError(f"{H} query heads do not group over {K} kv heads")
    k, v = k_BxTxKxd.astype(q_BxTxHxd.dtype), v_BxTxKxd.astype(q_BxTxHxd.dtype)
    if impl == "dense":
        return _dense(q_BxTxHxd, k, v, valid_BxT, segment_ids_BxT)
    if impl == "blocked":
        return _blocked(q_BxTxHxd, k, v, valid_BxT, segment_ids_BxT, BLOCKED_ROWS)
    reason = supported(impl, T, hd, block)
    if reason:
        raise ValueError(reason)
    if impl == "cudnn" and segment_ids_BxT is not None:
        raise ValueError("attention impl 'cudnn' cannot express packed rows (segment ids) through "
                         "per-row key lengths; use attention 'dense', 'splash' or 'xla'")
    if impl in ("xla", "cudnn"):
        return _dot_product(q_BxTxHxd, k, v, valid_BxT, segment_ids_BxT, implementation=impl)
    ids = _ids(valid_BxT, segment_ids_BxT)
    run = lambda q, k, v, ids: _splash(q, k, v, ids, block=block, interpret=interpret)  # noqa: E731
    if mesh is not None:
        # an axis dividing K divides H = K * (H // K), so each shard keeps whole GQA groups
        spec = logical_to_spec(("batch", "length", "kv_heads", None), mesh, (B, T, K, hd))
        run = jax.shard_map(run, mesh=mesh, in_specs=(spec, spec, spec, P(*spec[:2])), out_specs=spec,
                            check_vma=False)
    return run(q_BxTxHxd, k, v, ids)


def _ids(valid, segment_ids):
    """int32 [B, T]: the sequence id of each token, -1 at invalid ones (see the module doc)."""
    seq = 0 if segment_ids is None else segment_ids
    return jnp.where(valid, seq, -1).astype(jnp.int32)


def _dense(q, k, v, valid, segment_ids=None):
    T = q.shape[1]
    pos = jnp.arange(T)
    if segment_ids is None:
        mask = (pos[None, :] <= pos[:, None])[None] & valid[:, None, :]  # [B, T(query), T(key)]
    else:
        ids = _ids(valid, segment_ids)
        mask = (pos[None, :] <= pos[:, None])[None] & (ids[:, :, None] == ids[:, None, :])
    return masked_attention(q, k, v, mask, heads_first=False)


def masked_attention(q_BxTxHxd: Array, k_BxSxKxd: Array, v_BxSxKxd: Array, mask_BxTxS: Array,
                     heads_first: bool = True) -> Array:
    """softmax(q k^T / sqrt(hd) where mask, else -inf) v -> [B, T, H, hd] in q's dtype, logits and
    softmax in fp32; query head h reads kv head h // (H // K); a query that sees no key gets the mean
    of v (finite). heads_first: queries laid out [B, K, G * T, hd], one batched product per kv head
    (~1.5x faster on XLA:CPU); else the [B, K, G, T, S] einsums (the TPU / GPU programs)."""
    B, T, H, hd = q_BxTxHxd.shape
    K = k_BxSxKxd.shape[2]
    G = H // K
    k, v = k_BxSxKxd.astype(q_BxTxHxd.dtype), v_BxSxKxd.astype(q_BxTxHxd.dtype)
    if not heads_first:
        qh = q_BxTxHxd.reshape(B, T, K, G, hd)
        logits = jnp.einsum("btkgd,bskd->bkgts", qh, k).astype(jnp.float32) * hd ** -0.5
        logits = jnp.where(mask_BxTxS[:, None, None], logits, jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(logits, axis=-1).astype(q_BxTxHxd.dtype)
        return jnp.einsum("bkgts,bskd->btkgd", probs, v).reshape(B, T, H, hd)
    q = q_BxTxHxd.reshape(B, T, K, G, hd).transpose(0, 2, 3, 1, 4).reshape(B, K, G * T, hd)
    logits = jnp.einsum("bkqd,bskd->bkqs", q, k).astype(jnp.float32) * hd ** -0.5
    mask = jnp.tile(mask_BxTxS, (1, G, 1))[:, None]  # [B, 1, G * T, S]: query row g * T + t
    logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(logits, axis=-1).astype(q.dtype)
    out = jnp.einsum("bkqs,bskd->bkqd", probs, v)
    return out.reshape(B, K, G, T, hd).transpose(0, 3, 1, 2, 4).reshape(B, T, H, hd)


def _blocked(q, k, v, valid, segment_ids, block):
    """The dense math over causal row blocks: query block i ([i b, (i + 1) b)) scores keys [0, (i + 1) b)
    only, so ~(n + 1) / 2n of the dense [T, T] logits are computed (n = T / b blocks)."""
    T = q.shape[1]
    ids = _ids(valid, segment_ids)
    outs = []
    for start in range(0, T, block):
        stop = min(start + block, T)
        pos_q, pos_k = jnp.arange(start, stop), jnp.arange(stop)
        mask = (pos_k[None, :] <= pos_q[:, None])[None] & (ids[:, start:stop, None] == ids[:, None, :stop])
        outs.append(masked_attention(q[:, start:stop], k[:, :stop], v[:, :stop], mask))
    return jnp.concatenate(outs, axis=1)


def _dot_product(q, k, v, valid, segment_ids=None, *, implementation):
    """jax.nn.dot_product_attention, causal, keys past each row's valid length masked (right padding).
    A row with no valid token gets length 1 (its outputs are unspecified, but finite). With segment ids
    ("xla" only): a boolean mask of equal ids instead of lengths."""
    if segment_ids is not None:
        ids = _ids(valid, segment_ids)
        mask = (ids[:, :, None] == ids[:, None, :])[:, None]  # [B, 1, T, S]
        return jax.nn.dot_product_attention(q, k, v, mask=mask, is_causal=True,
                                            scale=q.shape[-1] ** -0.5, implementation=implementation)
    lengths = jnp.maximum(jnp.sum(valid.astype(jnp.int32), axis=-1), 1).astype(jnp.int32)
    return jax.nn.dot_product_attention(q, k, v, is_causal=True, key_value_seq_lengths=lengths,
                                        scale=q.shape[-1] ** -0.5, implementation=implementation)


def cudnn_available() -> bool:
    """True when the default backend is an NVIDIA GPU with cuDNN loaded (what impl="cudnn" needs)."""
    try:
        if jax.default_backend() != "gpu" or jax.devices()[0].platform != "gpu":
            return False
        from jax._src.lib import cuda_versions
        return cuda_versions is not None and bool(cuda_versions.cudnn_get_version())
    except Exception:  # noqa: BLE001 - any failure to ask means: not available
        return False


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def _splash(q, k, v, ids, *, block, interpret):
    B, T, H, hd = q.shape
    b = min(block, _round_up(T, LANES))
    Tp = _round_up(T, b)

    def heads_major(x):  # [B, T, N, hd] -> [B, N, Tp, hd], zero tail
        return jnp.pad(x, ((0, 0), (0, Tp - T), (0, 0), (0, 0))).transpose(0, 2, 1, 3)

    seg = jnp.pad(ids, ((0, 0), (0, Tp - T)), constant_values=-1)
    sizes = sa.BlockSizes(block_q=b, block_kv=b, block_kv_compute=b, block_q_dkv=b, block_kv_dkv=b,
                          block_kv_dkv_compute=b, block_q_dq=b, block_kv_dq=b)
    kernel = sa.make_splash_mha(sa.MultiHeadMask([sa.CausalMask((Tp, Tp))] * H), block_sizes=sizes,
                                head_shards=1, q_seq_shards=1, interpret=interpret)
    q = q * jnp.asarray(hd ** -0.5, q.dtype)
    out = jax.vmap(kernel)(heads_major(q), heads_major(k), heads_major(v), sa.SegmentIds(seg, seg))
    return out.transpose(0, 2, 1, 3)[:, :T]
