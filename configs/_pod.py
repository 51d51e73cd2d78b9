"""What the Qwen3.5 pod configs share: the paper's RL setup and one layout per (model, TPU slice).

Each `configs/qwen3_5_<size>_<env>.py` loads this file by path (absl loads config files by path,
so `configs` is not a package) and calls `pod_config(size, pod)`, then sets its environment.

Layouts are chosen with `python -m prover_jax.training.memory`. The trainer has no remat and no
flash attention, so the backward residuals of ONE 4096-token sequence (~75 GiB for 2B, ~175 GiB for
4B) dominate HBM: each micro-batch row goes to one data x fsdp group, and the tensor axis splits its
heads / mlp / vocab until it fits the chip with >= 30% headroom (the estimate errs high).
"""

from __future__ import annotations

import os

from prover_jax.training.config import default_config

# (model size, accelerator type) -> layout. Devices: v6e-N = N chips; v5p-N = N/2 chips.
#   mesh: (data, fsdp, tensor); micro: train.micro_batch_size (= data * fsdp: one row per group);
#   slots: engine slots (rollout.max_concurrent_decodes); length: rollout.max_target_length.
LAYOUTS = {
    ("2B", "v6e-8"): dict(mesh=(1, 1, 8), micro=1, slots=64, length=4096),
    ("2B", "v5p-8"): dict(mesh=(1, 2, 2), micro=2, slots=128, length=4096),
    ("4B", "v6e-16"): dict(mesh=(1, 2, 8), micro=2, slots=64, length=2048),  # 4096 needs remat
    ("4B", "v5p-16"): dict(mesh=(1, 2, 4), micro=2, slots=128, length=4096),
}
DEFAULT_POD = {"2B": "v6e-8", "4B": "v5p-16"}


def pods(size: str) -> tuple[str, ...]:
    """Accelerator types with a layout for `size` (the config-string arguments a config accepts)."""
    return tuple(p for s, p in LAYOUTS if s == size)


def pod_config(size: str, pod: str | None, env_name: str, turns: int, hf_path_env: str = "QWEN_PATH"):
    """default_config() with the paper's setup for Qwen3.5-`size` on slice `pod` (None: the default)."""
    pod = pod or DEFAULT_POD[size]
    if (size, pod) not in LAYOUTS:
        raise ValueError(f"no layout for Qwen3.5-{size} on {pod!r}; choose one of {pods(size)}")
    lay = LAYOUTS[size, pod]
    c = default_config()
    c.accelerator = pod  # TPU slice this layout is for (read by training.memory; not yet in default_config)
    c.env.name = env_name  # environment family
    c.env.kwargs.max_turns = turns  # the family's episode limit (paper: ALFWorld 50, WebShop 15, SearchQA 30)
    c.rollout.max_turns = turns  # the rollout loop's limit, the same
    c.model.init = "hf"  # start from the released Qwen3.5 checkpoint
    c.model.path = os.environ.get(hf_path_env, "")  # local HF folder on every worker ($QWEN_PATH)
    c.model.size = size  # architecture for the memory check when model.path is not readable here
    c.model.param_dtype = "float32"  # fp32 master weights (the optimizer updates these)
    c.model.dtype = "bfloat16"  # compute dtype on TPU
    c.mesh.data, c.mesh.fsdp, c.mesh.tensor = lay["mesh"]  # one row per device, heads over tensor
    c.rollout.groups_per_step = 16  # paper: 16 tasks per update ...
    c.rollout.group_size = 8  # ... x 8 rollouts each
    c.rollout.max_concurrent_decodes = lay["slots"]  # engine slots (divisible by data * fsdp)
    c.rollout.max_target_length = lay["length"]  # tokens per episode; longer ones end as context_limit
    c.train.steps = 100  # paper: 100 updates
    c.train.micro_batch_size = lay["micro"]  # sequences per accumulation step
    c.credit.method = "prover"  # ProVer segment credit on top of GRPO
    c.judge.name = "openai"  # the judge proposing pivotal segments ($OPENAI_API_KEY on every worker)
    return c


def _alfworld(c):
    c.env.processes = True  # one engine per process: ALFWorld's planner keeps global state
    c.env.kwargs.data_dir = os.environ.get("ALFWORLD_DATA", "")  # ALFWorld data ('' = the shipped tasks)
    c.env.kwargs.split = "train"  # games under <data_dir>/json_2.1.1/train


def _webshop(c):
    c.env.kwargs.data_dir = os.environ.get("WEBSHOP_DATA", "")  # folder of WebShop's catalogue files


def _searchqa(c):
    c.env.kwargs.qa_path = os.environ.get("SEARCHQA_QA", "")  # questions + gold answers
    url = os.environ.get("SEARCHQA_RETRIEVER_URL", "")
    if url:
        c.env.kwargs.retriever_url = url  # remote retrieval server (instead of a local corpus)
    else:
        c.env.kwargs.corpus_path = os.environ.get("SEARCHQA_CORPUS", "")  # passages for local BM25
    c.env.kwargs.topk = 3  # passages returned per search


# benchmark -> (env family, turn limit from the paper, data settings)
BENCHMARKS = {"alfworld": ("alfworld", 50, _alfworld), "webshop": ("webshop", 15, _webshop),
              "searchqa": ("searchqa_data", 30, _searchqa)}


def make(size: str, benchmark: str, pod: str | None = None):
    """The config of Qwen3.5-`size` on `benchmark` (alfworld | webshop | searchqa) on slice `pod`."""
    family, turns, data = BENCHMARKS[benchmark]
    c = pod_config(size, pod, family, turns=turns)
    data(c)
    return c
