"""Per-GPU memory of a config's layout, estimated from the architecture: the check for GPU layouts,
which `prover-aot` cannot compile (its memory figures come from the TPU compiler only).

    from prover_jax.aot.gpu_memory import estimate
    est = estimate(config)          # config.accelerator names the layout, e.g. "h200-1", "h100-8"
    est["fits"], est["total_gib"], est["hbm_gib"]

Every figure is bytes per GPU (reported in GiB), for the programs `prover-aot` compiles on TPU:

train_step (AdamW, `train.remat` = full or dots, one micro-batch in flight; P = parameters, n = the
fsdp x tensor shards of the weights, R = rows per GPU per micro-batch, L = rollout.max_target_length):
  state        P x (param bytes + 8 (Adam m, v fp32) + 4 (fp32 gradient accumulator)) / n; under LoRA
               (P x param bytes + P_lora x 16 (fp32 adapters, Adam, gradients)) / n
  scan copy    P_layers x 2 / n when layers are scanned (the stacked weights in bf16)
  gathered     the embedding / lm_head and two layer blocks all-gathered in bf16 (the block in use
               and the next one), whole on every GPU
  checkpoints  R x L x D x 2 per layer block (the block inputs the remat keeps)
  block        R x L x (per-token working set of the block being recomputed in the backward, values and
               their gradients): per layer 2 x 2 x (4 D + 3 I) bf16 for norms, residuals and the MLP,
               plus the sequence mixers' (the family's `mixer_activation_bytes`: e.g. Qwen3.5's attention
               2 x 2 x (3 H hd + 2 Hkv hd), no T x T scores: cuDNN / splash, and its delta rule's
               in-chunk matrices in fp32 at the runtime's chunk)
  logits       R x logprob_chunk x V x 4 x 3 (fp32 logits, log-softmax and its gradient)
generate (the engine: whole bf16 weights on each GPU of a host, slots split over them, S = slots / GPU):
  weights      P x 2
  cache        the family's `decode_state_bytes` of S slots of L tokens: kv = S x L x (full-attention
               layers) x 2 (k, v) x Hkv x hd x 2 (bf16); Qwen3.5's delta_state = S x (delta-rule layers)
               x (Hv dk dv x 4 + (K - 1) x C_conv x 2)
  logits       S x V x 4
The trainer keeps the engine's weights and caches while it updates (colocated RL), so the check is
train_step + the engine's resident arrays <= `usable` (90%) of the GPU's memory: the rest is the CUDA
context, cuDNN / cuBLAS workspaces and the allocator's fragmentation. JAX takes 75% of a GPU's memory
by default; set XLA_PYTHON_CLIENT_MEM_FRACTION=0.95 for these layouts (README, "Running on GPUs").

Calibration: against the TPU compiler's figures for the shipped pod layouts (bench/aot_layouts.jsonl)
the train_step estimate is within the tolerance asserted in tests/aot/test_gpu_memory.py; it is an
estimate, meant to say which layouts fit with margin, not to replace a run on the GPU.
"""

from __future__ import annotations

from prover_jax.aot.chips import GIB, parse_slice
from prover_jax.models import family_for

USABLE = 0.9  # fraction of the GPU's memory a layout may plan for


def train_step_bytes(cfg, *, shards: int, rows_per_device: float, length: int, logprob_chunk: int,
                     param_bytes: int = 4, scan_layers: bool = True, runtime=None, block_layers: int = 4,
                     lora_params: int = 0) -> dict:
    """Bytes per device of one accumulating train step (terms in the module docstring); runtime: the
    family's runtime the mixers' working set is sized for (None: its runtime resolved for "gpu" without
    cuDNN, e.g. the delta-rule chunk a GPU runs by default). lora_params > 0 (LoRA): the state is the
    frozen base (P x param bytes) and the adapters' fp32 values, Adam moments and gradients
    (lora_params x 16)."""
    fam = family_for(cfg)
    if runtime is None:
        runtime = fam.resolve_runtime("gpu", cudnn=False)
    P = cfg.param_count()
    D, I, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    layers = cfg.num_hidden_layers
    embed = V * D * (1 if cfg.tie_word_embeddings else 2)
    p_layers = P - embed
    tokens = rows_per_device * length
    per_layer = 2 * 2 * (4 * D + 3 * I)
    block = tokens * block_layers * (per_layer + fam.mixer_activation_bytes(cfg, runtime))
    out = {
        "state": (P * (param_bytes + 8 + 4) if not lora_params else P * param_bytes + lora_params * 16) / shards,
        "scan_copy": p_layers * 2 / shards if scan_layers else 0.0,
        "gathered": embed * 2 + 2 * block_layers * (p_layers / layers) * 2,
        "checkpoints": tokens * D * 2 * (layers / block_layers),
        "block": block,
        "logits": rows_per_device * logprob_chunk * V * 4 * 3,
    }
    out["total"] = sum(out.values())
    return out


def engine_bytes(cfg, *, slots_per_device: float, length: int) -> dict:
    """Bytes per device of the engine's resident arrays (whole bf16 weights, the family's decode cache:
    `Family.decode_state_bytes`) and a decode step's logits."""
    out = {"weights": cfg.param_count() * 2,
           **family_for(cfg).decode_state_bytes(cfg, slots=slots_per_device, length=length),
           "logits": slots_per_device * cfg.vocab_size * 4}
    out["total"] = sum(out.values())
    return out


def estimate(config, layout: str | None = None) -> dict:
    """The per-GPU estimate of `config` on `layout` (default config.accelerator): GiB of the train step,
    of the engine, their sum, the GPU's memory, and whether the sum fits in USABLE of it."""
    from prover_jax.aot.programs import model_config
    c = config
    s = parse_slice(layout or c.accelerator)
    cfg = model_config(c)
    n = c.mesh.data * c.mesh.fsdp * c.mesh.tensor
    if n != s.chips:
        raise ValueError(f"mesh {c.mesh.data}x{c.mesh.fsdp}x{c.mesh.tensor} does not fit {s.name}'s {s.chips} GPUs")
    per_host = min(s.chips, s.chip.chips_per_host)
    from prover_jax.models.lora import LoraSpec, lora_param_count
    from prover_jax.training.build import model_runtime
    spec = LoraSpec.from_config(c.model.lora)
    train = train_step_bytes(
        cfg, shards=c.mesh.fsdp * c.mesh.tensor, rows_per_device=c.train.micro_batch_size / (c.mesh.data * c.mesh.fsdp),
        length=c.rollout.max_target_length, logprob_chunk=c.train.logprob_chunk or c.rollout.max_target_length,
        param_bytes=4 if c.model.param_dtype == "float32" else 2, scan_layers=bool(c.model.scan_layers),
        runtime=model_runtime(c, platform="gpu", cudnn=False), lora_params=lora_param_count(cfg, spec) if spec else 0)
    engine = engine_bytes(cfg, slots_per_device=c.rollout.max_concurrent_decodes / per_host,
                          length=c.rollout.max_target_length)
    total = train["total"] + engine["total"]
    hbm = s.chip.hbm_bytes
    gib = lambda d: {k: round(v / GIB, 2) for k, v in d.items()}  # noqa: E731
    return {"layout": s.name, "train_step_gib": gib(train), "engine_gib": gib(engine),
            "total_gib": round(total / GIB, 2), "hbm_gib": round(hbm / GIB, 2),
            "usable_gib": round(USABLE * hbm / GIB, 2), "fits": total <= USABLE * hbm,
            "headroom": round(1 - total / hbm, 3)}
