"""Per-device memory estimate of a training run, from its config alone (no devices touched).

    report = estimate(config)                      # accelerator from config.accelerator ("v6e-8")
    report = estimate(config, num_devices=jax.device_count(), device_kind=jax.devices()[0].device_kind)
    print(format_table(report))

    python -m prover_jax.training.memory --config=configs/qwen3_5_2b_alfworld.py:v6e-8

Every term is bytes per device. Parameter-shaped terms are sharded exactly as the trainer shards
them: each parameter's logical axes go through `sharding.logical_to_spec` (the ONE rules table) on a
mesh of the config's shape, and the shard size is computed arithmetically from the PartitionSpec, so
no `jax.sharding.Mesh` (hence no device, no backend) is needed and the trainer may call `estimate`
before `jax.distributed.initialize()`.

    params      = sum_p |shard(p)| * bytes(param_dtype)
    optimizer   = sum_p |shard(p)| * 2 * 4                    adam/adamw: fp32 mu and nu; sgd: 0
    grads       = sum_p |shard(p)| * 4 * (2 if accumulating)  fp32; with gradient accumulation the
                                                              running sum and one micro-batch's
                                                              gradient are live together
    cache       = the engine's decode state: max_concurrent_decodes slots x max_target_length;
                  full-attention layers k, v [S, L, Hkv, hd] (compute dtype), Gated DeltaNet layers
                  conv [S, K-1, C] (compute dtype) + state [S, Hv, dk, dv] (fp32); slots shard over
                  cache_batch, heads over cache_heads
    reference   = params again when loss.kl_coef > 0 (frozen initial policy, same dtype and sharding)
    activations = `activation_bytes` below: one micro-batch of rows padded to max_target_length (the
                  worst case: the trainer pads to the batch's longest trajectory), remat off unless
                  train.remat is set, + the logits of train.logprob_chunk positions per row (all when
                  unset or 0)

Rough by design: the activation formula is calibrated on XLA:CPU and errs high for TPU, and XLA adds
temporaries of its own, so leave headroom (`fits` only compares the sum with the device's HBM).
"""

from __future__ import annotations

import functools
import math
import os
import re

import ml_collections

from prover_jax.models.qwen3_5.config import CONFIGS, FULL, Qwen3_5Config
from prover_jax.models.qwen3_5.model import cache_axes
from prover_jax.sharding.rules import MESH_AXES, logical_to_spec

GIB = 2 ** 30
# HBM per jax device (one chip; a v5p/v4 chip's two TensorCores form one device).
HBM_GIB = {"v5p": 95, "v6e": 32, "v5e": 16, "v4": 32}
# Residuals XLA keeps beyond the minimal set of `activation_bytes` (casts, unfused temporaries).
SLACK = 1.5
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


class _MeshShape:
    """What `logical_to_spec` reads from a Mesh (its axis sizes), without devices."""

    def __init__(self, sizes: dict[str, int]):
        self.shape = dict(sizes)


def parse_accelerator(name: str) -> tuple[str | None, int | None]:
    """(kind, devices) of an accelerator type ('v6e-8', 'v5p-16', 'v5litepod-16', 'v4-8') or a jax
    `device_kind` ('TPU v6 lite', 'TPU v5', 'TPU v5 lite', 'TPU v5p'); devices is None without a count.

    v5p-N and v4-N count TensorCores, two per chip (= per jax device); v6e-N and v5e-N count chips.
    """
    s = name.strip().lower().replace("tpu", "").strip()
    m = re.fullmatch(r"(v\w+?)(?:pod)?-(\d+)", s)
    count = int(m.group(2)) if m else None
    s = m.group(1) if m else s
    aliases = {"v6e": "v6e", "v6 lite": "v6e", "v5e": "v5e", "v5 lite": "v5e", "v5lite": "v5e",
               "v5litepod": "v5e", "v5p": "v5p", "v5": "v5p", "v4": "v4"}
    kind = aliases.get(s)
    if kind in ("v5p", "v4") and count is not None:
        count //= 2
    return kind, count


def model_config(config: ml_collections.ConfigDict) -> tuple[Qwen3_5Config, str]:
    """The policy's architecture: config.json of model.path when readable, else CONFIGS[model.size]."""
    m = config.model
    if m.init != "random" and m.path and os.path.isfile(os.path.join(m.path, "config.json")):
        return Qwen3_5Config.from_pretrained(m.path), m.path
    if m.size not in CONFIGS:
        raise ValueError(f"model.size {m.size!r} is not in CONFIGS {sorted(CONFIGS)} and model.path "
                         f"{m.path!r} has no config.json: cannot size the model")
    return CONFIGS[m.size], m.size


@functools.lru_cache(maxsize=8)
def _param_layout(cfg: Qwen3_5Config) -> tuple[tuple[tuple[int, ...], tuple], ...]:
    """(shape, logical axes) of every parameter, from the abstract model (nothing allocated)."""
    from prover_jax.models.qwen3_5.params import _flat_state, abstract_model

    return tuple((tuple(v.get_value().shape), tuple(v.get_metadata()["axes"]))
                 for v in _flat_state(abstract_model(cfg)).values())


def shard_size(shape, axes, mesh: dict[str, int]) -> int:
    """Elements of one device's shard of an array with logical `axes` on a mesh of axis sizes."""
    spec = tuple(logical_to_spec(axes, _MeshShape(mesh), shape))
    spec += (None,) * (len(shape) - len(spec))
    n = 1
    for dim, entry in zip(shape, spec):
        names = () if entry is None else ((entry,) if isinstance(entry, str) else tuple(entry))
        n *= dim // math.prod(mesh[a] for a in names)
    return n


def param_elements(cfg: Qwen3_5Config, mesh: dict[str, int]) -> int:
    """Parameter elements held by one device."""
    return sum(shard_size(shape, axes, mesh) for shape, axes in _param_layout(cfg))


def cache_bytes(cfg: Qwen3_5Config, slots: int, length: int, compute_bytes: int,
                mesh: dict[str, int]) -> int:
    """One device's share of the engine's decode cache (layout of `model.init_cache`)."""
    Hv, dk, dv = cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
    axes = cache_axes(cfg)
    total = shard_size((slots,), axes.pos, mesh) * 4
    for kind, ax in zip(cfg.layer_types, axes.layers):
        if kind == FULL:
            kv = (slots, length, cfg.num_key_value_heads, cfg.head_dim)
            total += 2 * shard_size(kv, ax.k, mesh) * compute_bytes
        else:
            conv = (slots, cfg.linear_conv_kernel_dim - 1, cfg.conv_dim)
            total += shard_size(conv, ax.conv, mesh) * compute_bytes
            total += shard_size((slots, Hv, dk, dv), ax.state, mesh) * 4
    return total


def activation_bytes(cfg: Qwen3_5Config, rows: int, length: int, tensor: int, compute_bytes: int,
                     logits_chunk: int | None = None, remat: bool = False, gdn_chunk: int = 64) -> int:
    """Residuals kept for the backward pass of one micro-batch (plain attention, no flash kernel), per
    device: rows sequences of L = `length` tokens.

    c = compute bytes, f = 4 (fp32); head / mlp / vocab widths are divided by the tensor axis t.
    Per token and layer, the minimal residual set
        every layer:  D (2f + 4c) + 3 I c / t             two fp32 RMSNorms, residual, SwiGLU
        full attn:    [(2H + 2Hkv) hd c + (H + Hkv) hd (f + c) + 2 H hd c] / t
                                                          projections, q/k norm + RoPE, gated output
        DeltaNet:     [3 C c + 2 Hv dv c                  qkv proj, conv, silu; z, gated norm
                      + 6 Hv (dk + dv) f                  fp32 q, k, v and chunked-rule operands
                      + 6 Hv Cg f + Hv dk dv f / Cg       per-chunk Cg x Cg matrices, scan states
                      + Hv Cg^2 f] / t                    the unit-lower inverse's fori_loop keeps its
                                                          Cg x Cg carry at each of its Cg steps
    is scaled by SLACK, plus, per full-attention layer, 3f bytes per score (H L / t per token: fp32
    logits and softmax, probs in compute dtype). Calibrated on the compiled backward pass (XLA:CPU
    buffer assignment) of 2B- and 4B-shaped layers at L = 1024..4096: within 12% per layer type.
    XLA:TPU fuses more, so this errs high. Add the embedding output (D c per token) and the logits of
    `logits_chunk` positions of every row at a time (`loss.token_logprobs`; None: all L):
    rows x chunk x V / t x 3f (fp32 logits, log-softmax, their gradient).
    With `remat` (each decoder layer rematerialised) only the layer inputs (D c per token and layer)
    are kept, plus one layer's residuals while its backward runs (the largest layer type's).
    """
    c, f, t = compute_bytes, 4, tensor
    D, I, L = cfg.hidden_size, cfg.intermediate_size, length
    H, Hkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    Hv, dk, dv = cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
    Cg, C = gdn_chunk, cfg.conv_dim
    common = D * (2 * f + 4 * c) + 3 * I * c / t
    full = ((2 * H + 2 * Hkv) * hd * c + (H + Hkv) * hd * (f + c) + 2 * H * hd * c) / t
    gdn = (3 * C * c + 2 * Hv * dv * c + 6 * Hv * (dk + dv) * f + 6 * Hv * Cg * f
           + Hv * dk * dv * f / Cg + Hv * Cg * Cg * f) / t
    scores = H * L * 3 * f / t
    layer = {FULL: SLACK * (common + full) + scores, "linear": SLACK * (common + gdn)}
    kinds = [FULL if k == FULL else "linear" for k in cfg.layer_types]
    if remat:
        per_token = D * c * (1 + len(kinds)) + max(layer[k] for k in kinds)
    else:
        per_token = D * c + sum(layer[k] for k in kinds)
    logits = rows * min(logits_chunk or L, L) * cfg.vocab_size / t * 3 * f
    return int(rows * L * per_token + logits)


def _mesh_sizes(mesh_cfg, num_devices: int | None) -> dict[str, int]:
    sizes = {a: int(mesh_cfg.get(a, 1)) for a in MESH_AXES}
    free = [a for a, n in sizes.items() if n == -1]
    if len(free) > 1:
        raise ValueError(f"mesh {sizes}: at most one axis may be -1")
    fixed = math.prod(n for n in sizes.values() if n != -1)
    if free:
        if num_devices is None:
            raise ValueError(f"mesh {sizes} has a -1 axis: pass num_devices or set config.accelerator")
        if num_devices % fixed:
            raise ValueError(f"{num_devices} devices do not split into mesh {sizes}")
        sizes[free[0]] = num_devices // fixed
    elif num_devices is not None and fixed != num_devices:
        raise ValueError(f"mesh {sizes} needs {fixed} devices, {num_devices} given")
    return sizes


def estimate(config: ml_collections.ConfigDict, num_devices: int | None = None,
             device_kind: str | None = None) -> dict:
    """Per-device bytes of every term (see the module docstring), the HBM and whether it fits.

    The accelerator comes from `device_kind` (a jax device_kind or an accelerator type like
    'v6e-8'), else `config.accelerator`; `num_devices` defaults to the accelerator's device count,
    else to the mesh's product.
    """
    accel = device_kind or config.get("accelerator", "") or ""
    kind, accel_devices = parse_accelerator(accel) if accel else (None, None)
    num_devices = num_devices or accel_devices
    mesh = _mesh_sizes(config.mesh, num_devices)
    num_devices = math.prod(mesh.values())
    cfg, model_name = model_config(config)
    try:
        pbytes = _DTYPE_BYTES[config.model.param_dtype]
        cbytes = _DTYPE_BYTES[config.model.dtype]
    except KeyError as e:
        raise ValueError(f"unsupported dtype {e.args[0]!r}; expected one of {sorted(_DTYPE_BYTES)}") \
            from None
    optim = config.optim.name
    if optim not in ("adam", "adamw", "sgd"):
        raise ValueError(f"unknown optim.name {optim!r}")

    n = param_elements(cfg, mesh)
    r, t = config.rollout, config.train
    mb = int(t.micro_batch_size)
    rows = shard_size((mb,), ("batch",), mesh)
    sequences = int(r.groups_per_step) * int(r.group_size)
    accumulating = sequences > mb
    report = {
        "model": model_name, "param_count": cfg.param_count(), "accelerator": accel or "unknown",
        "device_kind": kind, "num_devices": num_devices, "mesh": mesh,
        "micro_batch_rows_per_device": rows,
        "params": n * pbytes,
        "optimizer": 0 if optim == "sgd" else n * 2 * 4,
        "grads": n * 4 * (2 if accumulating else 1),
        "cache": cache_bytes(cfg, int(r.max_concurrent_decodes), int(r.max_target_length), cbytes, mesh),
        "reference": n * pbytes if float(config.loss.kl_coef) > 0 else 0,
        "activations": activation_bytes(cfg, rows, int(r.max_target_length), mesh["tensor"], cbytes,
                                        t.get("logprob_chunk") or None,
                                        bool(t.get("remat", False))),
    }
    report["total"] = sum(report[k] for k in TERMS)
    report["hbm"] = HBM_GIB[kind] * GIB if kind in HBM_GIB else None
    report["fits"] = None if report["hbm"] is None else report["total"] <= report["hbm"]
    return report


TERMS = ("params", "optimizer", "grads", "cache", "reference", "activations")


def format_table(report: dict) -> str:
    """The report as a small text table (GiB per device)."""
    mesh = " x ".join(f"{a}={n}" for a, n in report["mesh"].items())
    lines = [f"model {report['model']} ({report['param_count'] / 1e9:.2f}B params) on "
             f"{report['accelerator']}: {report['num_devices']} devices, mesh {mesh}, "
             f"{report['micro_batch_rows_per_device']} micro-batch row(s) per device",
             f"{'term':<12}{'GiB/device':>12}"]
    for k in TERMS + ("total",):
        lines.append(f"{k:<12}{report[k] / GIB:>12.2f}")
    if report["hbm"] is None:
        lines.append(f"{'hbm':<12}{'unknown':>12}")
    else:
        lines.append(f"{'hbm':<12}{report['hbm'] / GIB:>12.2f}")
        used = report["total"] / report["hbm"]
        lines.append(f"{'verdict':<12}{'fits' if report['fits'] else 'OVER':>12} ({used:.0%} of HBM)")
    return "\n".join(lines)


def run() -> None:
    """CLI: python -m prover_jax.training.memory --config=configs/X.py[:arg] [--num_devices N]."""
    from absl import app, flags
    from ml_collections import config_flags

    config = config_flags.DEFINE_config_file("config", None, "training config file (path[:arg])",
                                             lock_config=False)
    devices = flags.DEFINE_integer("num_devices", None, "devices (default: from the accelerator)")
    kind = flags.DEFINE_string("device_kind", None, "accelerator type or jax device_kind "
                               "(default: config.accelerator)")
    flags.mark_flag_as_required("config")

    def main(argv):
        if len(argv) > 1:
            raise app.UsageError(f"unexpected arguments {argv[1:]}")
        print(format_table(estimate(config.value, devices.value, kind.value)))

    app.run(main)


if __name__ == "__main__":
    run()
