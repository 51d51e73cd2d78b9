"""Qwen3.5 on a TPU slice (or NVIDIA GPUs) with the paper's RL setup (GRPO + ProVer), one file for
every (size, benchmark, slice):

    prover-train --config=configs/qwen3_5.py:2B,alfworld,v6e-8 --workdir=gs://BUCKET/run
    prover-aot   --config=configs/qwen3_5.py:4B,webshop,v5p-16       # compiled memory and time
    prover-train --config=configs/qwen3_5.py:4B,searchqa,h200-8 --workdir=runs/4b   # one 8-GPU node
    prover-train --config=configs/qwen3_5.py:2B,alfworld,v6e-8,9B --workdir=...   # + a served 9B judge

Argument: SIZE[,BENCHMARK[,SLICE[,JUDGE]]]; BENCHMARK alfworld (default) | webshop | searchqa; SLICE one
of the size's LAYOUTS (default: the first); JUDGE a Qwen3.5 size (9B, as in the paper) served beside
training on every host's chips (prover_jax.serving.beside) from the checkpoint at $JUDGE_PATH, instead
of an external OpenAI-compatible endpoint. Layouts were chosen with `prover-aot` (figures in
bench/RESULTS.md): FSDP over every chip, the layer block under lax.scan, each block rematerialised,
splash attention, log-probs over the whole row (TPU) or in chunks of 1024 positions (GPU), FSDP weights
gathered whole (prover_jax.tpu_env's libtpu flags), micro-batches of one 4096-token row per chip.
The TPU layouts pack episodes into 4096-token rows (train.max_tokens_per_row = rollout.max_target_length,
`pack`), each step padded to a quarter, half, three quarters or all of its 16 x 8 episodes'
micro-batches (train.packed_buckets): prover-aot finds the largest bucket fits on each slice, and on
2B v6e-8 and 4B v5p-16, compiled for every bucket, estimates 0.75x the seconds per real token of one
episode per row (bench/RESULTS.md, "Packed pod layouts").
GPU layouts (GPU_LAYOUTS: h100-1, h200-1, h100-8, h200-8) were sized with the estimate of
prover_jax.aot.gpu_memory instead, with cuDNN attention (which refuses packed rows: one episode a row)
and more rows per GPU.
Data paths come from environment variables on every worker (configs/README.md).
"""

from __future__ import annotations

import os

from prover_jax.training.config import default_config

# (size, slice) -> layout. v6e-N = N chips; v5p-N = N/2 chips (N counts TensorCores).
#   mesh (data, fsdp, tensor); micro = train.micro_batch_size; slots = engine slots per host;
#   length = rollout.max_target_length; remat = train.remat; chunk = train.logprob_chunk (default
#   1024; 0: the vocab projection unchunked, for chips with room for one row's [4096, 248k] fp32 logits);
#   pack = packed rows (`_pack`), where prover-aot's compile of the largest bucket fits.
LAYOUTS = {
    ("2B", "v6e-8"): dict(mesh=(1, 8, 1), micro=8, slots=64, length=4096, remat="full", chunk=0, pack=True),
    ("2B", "v5p-8"): dict(mesh=(1, 4, 1), micro=8, slots=128, length=4096, remat="full", chunk=0, pack=True),
    ("4B", "v5p-16"): dict(mesh=(1, 8, 1), micro=8, slots=128, length=4096, remat="full", chunk=0, pack=True),
    ("4B", "v6e-16"): dict(mesh=(1, 16, 1), micro=16, slots=64, length=4096, remat="full", chunk=0, pack=True),
    ("9B", "v5p-32"): dict(mesh=(1, 16, 1), micro=16, slots=128, length=4096, remat="full", chunk=0, pack=True),
}
# NVIDIA GPU layouts: hNNN-N = N GPUs (H100 SXM 80 GB / H200 SXM 141 GB), 8 to a node. FSDP over the
# GPUs (no tensor parallelism: the weights, Adam state and activations fit without it), attention
# through cuDNN (model.attention=auto), the rest as on TPU. Sized with the per-GPU estimate of
# prover_jax.aot.gpu_memory (prover-aot's compiled check is TPU-only); 4B has no h100-1 layout: its
# fp32 weights, Adam state and gradients alone take 63 GiB of the H100's 74.5 GiB.
GPU_LAYOUTS = {
    ("2B", "h100-1"): dict(mesh=(1, 1, 1), micro=2, slots=128, length=4096, remat="full"),
    ("2B", "h200-1"): dict(mesh=(1, 1, 1), micro=4, slots=128, length=4096, remat="full"),
    ("2B", "h100-8"): dict(mesh=(1, 8, 1), micro=16, slots=128, length=4096, remat="full"),
    ("2B", "h200-8"): dict(mesh=(1, 8, 1), micro=32, slots=128, length=4096, remat="full"),
    ("4B", "h200-1"): dict(mesh=(1, 1, 1), micro=1, slots=64, length=4096, remat="full"),
    ("4B", "h100-8"): dict(mesh=(1, 8, 1), micro=16, slots=128, length=4096, remat="full"),
    ("4B", "h200-8"): dict(mesh=(1, 8, 1), micro=32, slots=128, length=4096, remat="full"),
}
LAYOUTS.update(GPU_LAYOUTS)
# LoRA layouts (slice name + "-lora"): rank-16 adapters on every projection (models/lora.py), the base
# frozen in bf16, so a model fits slices where full fine-tuning's fp32 weights and Adam state do not.
LORA_LAYOUTS = {
    # tensor 2: the engine's whole bf16 9B weights (17 GiB a chip at tensor 1) split over two chips
    ("9B", "v6e-8-lora"): dict(mesh=(1, 4, 2), micro=8, slots=64, length=4096, remat="full", lora=16,
                                chunk=0, pack=True),
    ("4B", "h200-1-lora"): dict(mesh=(1, 1, 1), micro=2, slots=64, length=4096, remat="full", lora=16),
}


def _pack(c):
    """Packed rows of one episode-length cap each, the step's micro-batch count padded to a quarter, half,
    three quarters or all of its episodes one per row: 4 compiled programs, 11.7% padding micro-batches
    on the scripted ALFWorld steps of bench/packing_fill.py (the powers of two: 5 programs, 19.7%)."""
    c.train.max_tokens_per_row = c.rollout.max_target_length  # a row holds the longest episode
    most = c.rollout.groups_per_step * c.rollout.group_size // c.train.micro_batch_size
    c.train.packed_buckets = tuple(most * k // 4 for k in (1, 2, 3))  # and `most`, always a bucket


def slices(size: str) -> tuple[str, ...]:
    """The slices with a layout for `size`, the default first."""
    return tuple(p for s, p in LAYOUTS if s == size)


def _alfworld(c):
    c.env.processes = True  # one engine per process: ALFWorld's planner keeps global state
    c.env.kwargs.data_dir = os.environ.get("ALFWORLD_DATA", "")  # ALFWorld data ('' = the shipped tasks)
    c.env.kwargs.split = "train"  # games under <data_dir>/json_2.1.1/train
    # held-out evaluation: valid_seen, or valid_unseen (out of distribution) with the real data
    c.env.kwargs.eval_split = os.environ.get("ALFWORLD_EVAL_SPLIT", "valid_seen")


def _webshop(c):
    c.env.kwargs.data_dir = os.environ.get("WEBSHOP_DATA", "")  # folder of WebShop's catalogue files


def _searchqa(c):
    c.env.kwargs.qa_path = os.environ.get("SEARCHQA_QA", "")  # questions + gold answers
    # held-out questions ('' = a hashed tenth of qa_path, never trained on)
    c.env.kwargs.eval_qa_path = os.environ.get("SEARCHQA_EVAL_QA", "")
    url = os.environ.get("SEARCHQA_RETRIEVER_URL", "")
    if url:
        c.env.kwargs.retriever_url = url  # remote retrieval server (instead of a local corpus)
    else:
        c.env.kwargs.corpus_path = os.environ.get("SEARCHQA_CORPUS", "")  # passages for local BM25
    c.env.kwargs.topk = 3  # passages returned per search


# benchmark -> (env family, turn limit from the paper, data settings)
BENCHMARKS = {"alfworld": ("alfworld", 50, _alfworld), "webshop": ("webshop", 15, _webshop),
              "searchqa": ("searchqa_data", 30, _searchqa)}


def serve_judge(c, size: str) -> None:
    """The judge served beside training: Qwen3.5-`size` on all of each host's chips (tensor parallel),
    16 slots of 16k tokens (a judge call: brief, tools, the trajectories' previews, tool rounds)."""
    if size not in JUDGE_SIZES:
        raise ValueError(f"judge size {size!r}: expected one of {JUDGE_SIZES}")
    c.judge.name = "openai"  # the openai judge, pointed at the local server when the run starts
    c.judge.serve.model = os.environ.get("JUDGE_PATH", "")  # the judge's HF folder on every worker
    c.judge.serve.size = size  # its architecture for prover-aot when JUDGE_PATH is not readable here
    c.judge.serve.tensor = 0  # weights split over all of a host's chips
    c.judge.serve.max_concurrent_decodes = 16  # judge calls of a step run at once, per host
    c.judge.serve.max_target_length = 16384  # tokens of one judge conversation
    c.judge.openai.tool_choice = "required"  # every reply is a tool call, constrained to the tool's schema


JUDGE_SIZES = ("4B", "9B")


def make(size: str, benchmark: str = "alfworld", pod: str | None = None, judge: str | None = None):
    """default_config() with the paper's setup for Qwen3.5-`size` on `benchmark` on slice `pod`, the
    judge served beside training when `judge` (a size) is given."""
    if not slices(size):
        raise ValueError(f"no layout for Qwen3.5-{size}; sizes: {sorted({s for s, _ in LAYOUTS})}")
    if benchmark not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {benchmark!r}; expected one of {sorted(BENCHMARKS)}")
    pod = pod or slices(size)[0]
    lay = LAYOUTS.get((size, pod)) or LORA_LAYOUTS.get((size, pod))
    if lay is None:
        raise ValueError(f"no layout for Qwen3.5-{size} on {pod!r}; choose one of "
                         f"{slices(size) + tuple(p for s, p in LORA_LAYOUTS if s == size)}")
    family, turns, data = BENCHMARKS[benchmark]
    c = default_config()
    c.accelerator = pod.removesuffix("-lora")  # TPU slice (prover-aot's default topology) or GPU layout
    c.env.name = family  # environment family
    c.env.kwargs.max_turns = turns  # the family's episode limit (paper: ALFWorld 50, WebShop 15, SearchQA 30)
    c.rollout.max_turns = turns  # the rollout loop's limit, the same
    c.model.init = "hf"  # start from the released Qwen3.5 checkpoint
    c.model.path = os.environ.get("QWEN_PATH", "")  # local HF folder on every worker ($QWEN_PATH)
    c.model.size = size  # architecture for prover-aot when model.path is not readable here
    c.model.param_dtype = "float32"  # fp32 master weights (the optimizer updates these)
    c.model.dtype = "bfloat16"  # compute dtype (TPU and GPU)
    c.model.scan_layers = True  # one traced layer block under lax.scan: compile time flat in depth
    c.mesh.data, c.mesh.fsdp, c.mesh.tensor = lay["mesh"]  # FSDP over every chip
    c.rollout.groups_per_step = 16  # paper: 16 tasks per update ...
    c.rollout.group_size = 8  # ... x 8 rollouts each
    c.rollout.max_concurrent_decodes = lay["slots"]  # engine slots per host
    c.rollout.max_target_length = lay["length"]  # tokens per episode; longer ones end as context_limit
    c.train.steps = 100  # paper: 100 updates
    c.optim.learning_rate = 1e-5  # a pretrained LLM's rate, not the library default (a from-scratch policy's)
    c.train.micro_batch_size = lay["micro"]  # sequences per accumulation step (one per chip)
    c.train.remat = lay["remat"]  # recompute each layer block's activations in the backward pass
    # vocab projection (248k) over this many positions at a time; 0: at once. Unchunked, the backward
    # forms the tied embedding's gradient once per row instead of once per chunk (2B v6e-8: 3.81 -> 3.13 TB
    # of HBM traffic per step, bench/RESULTS.md)
    c.train.logprob_chunk = lay.get("chunk", 1024)
    c.loss.entropy_metric = False  # no entropy pass over the 248k vocabulary (not a loss term here)
    c.train.length_multiple = 1024  # a handful of compiled batch lengths per run (1k .. 4k)
    c.train.precompile = True  # compile the update for each of them before the first step
    if lay.get("pack"):
        _pack(c)
    c.credit.method = "prover"  # ProVer segment credit on top of GRPO
    c.judge.name = "openai"  # the judge proposing pivotal segments ($OPENAI_API_KEY on every worker)
    if lay.get("lora"):
        c.model.lora.rank = lay["lora"]  # adapters of this rank on every projection
        c.model.lora.alpha = 2.0 * lay["lora"]  # scale alpha / rank = 2
        c.model.param_dtype = "bfloat16"  # the frozen base needs no fp32 master copy
        c.optim.learning_rate = 1e-4  # adapters take a larger rate than full fine-tuning
    data(c)
    if judge:
        serve_judge(c, judge)
    return c


def get_config(arg: str | None = None):
    parts = [p.strip() for p in (arg or "2B").split(",")]
    if len(parts) > 4:
        raise ValueError(f"config argument {arg!r}: expected SIZE[,BENCHMARK[,SLICE[,JUDGE]]]")
    return make(*parts)
