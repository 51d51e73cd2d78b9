"""Single-turn prompt tasks with a reward function (env `prompts`), GSM8K style: one reply per prompt,
rewarded by `env.kwargs.reward_fn`, GRPO over groups of 8 replies.

    prover-train --config=configs/prompts.py:/data/gsm8k_train.jsonl --workdir=W \\
        --config.model.init=hf --config.model.path=/path/to/Qwen3-1.7B
    prover-train --config=configs/prompts.py:/data/gsm8k --config.env.kwargs.eval_split=test ...  # a datasets folder

The argument is the data (`env.kwargs.path`: a JSONL / JSON file of {"question", "answer"} rows, a
`save_to_disk` folder or a `datasets.load_dataset` name). The defaults train the small random demo
architecture with a tokenizer trained on the prompts and answers (SFT on the answers when sft.steps > 0),
which needs no weights; a real checkpoint is `model.init=hf` with its own tokenizer and chat template.
"""

from prover_jax.training.config import default_config


def get_config(path: str = ""):
    c = default_config()
    c.env.name = "prompts"  # single-turn prompt tasks (prover_jax/envs/prompts)
    c.env.kwargs.path = path  # the data: a JSONL / JSON file, a datasets folder or a load_dataset name
    c.env.kwargs.reward_fn = "gsm8k"  # '#### <number>' against the answer's (or exact_match, or module:function)
    c.env.kwargs.eval_fraction = 0.1  # held-out share of the prompts when the data has no eval split / eval_path
    c.model.init = "random"  # the demo architecture from scratch; model.init=hf with model.path for a checkpoint
    c.model.size = "demo"  # the 2-layer demo architecture
    c.mesh.fsdp = 1  # one device
    c.rollout.groups_per_step = 4  # prompts per update ...
    c.rollout.group_size = 8  # ... x 8 replies each
    c.rollout.max_action_tokens = 256  # the longest reply (a worked solution)
    c.rollout.max_target_length = 1024  # prompt and reply
    c.rollout.max_prefill_length = 512  # the longest prompt prefilled at once
    c.optim.learning_rate = 1e-5  # a pretrained model's rate (a from-scratch policy wants ~3e-4)
    c.train.steps = 100  # RL updates
    c.train.micro_batch_size = 8  # four micro-batches per 32-reply step
    c.train.logits = "policy"  # the vocabulary projection at the policy tokens only
    c.credit.method = "grpo"  # one turn: grpo, budget_grpo or a critic (prover / spo_chain / gigpo are refused)
    return c
