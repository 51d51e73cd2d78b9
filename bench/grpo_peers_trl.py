"""TRL's side of bench/grpo_peers.py: `trl.GRPOTrainer` on the shared model, prompts and reward.

    /work/peers/trl311/bin/python bench/grpo_peers_trl.py --spec=WORKDIR/spec.json --workdir=WORKDIR/trl

The model folder loads as transformers' Qwen3ForCausalLM in fp32 (torch, CPU); the tokenizer and its chat
template from the same folder (`processing_class`). The dataset is a `datasets.Dataset` of conversational
rows {"prompt": [system, user]} (the bench's system prompt, each question), reward_funcs =
[grpo_peers_reward.trl_digit_share]. GRPOConfig: num_generations 8, per_device_train_batch_size 32 with
gradient_accumulation_steps 1, so steps_per_generation = 1 and generation_batch_size = 32: 4 prompts x 8
completions generated per optimizer step and all of them in one micro-batch; num_iterations 1 (no PPO
epochs: the old log-probs are not computed), beta 0 (no reference model), max_completion_length 32,
temperature 1, top_p 1, top_k 0, transformers' generate (use_vllm False), scale_rewards "group",
loss_type "dapo" (token mean, as prover_jax's token-mean), epsilon 0.2, AdamW (adamw_torch) lr 1e-5
constant, weight decay 0, max_grad_norm 1.0, no gradient checkpointing, fp32 (bf16 off), use_cpu,
report_to none, logging_steps 1. torch's intra-op threads: its default (one per core) unless the bench's
--torch_threads sets them.

A step is one optimizer step of the HF Trainer loop, timed by a TrainerCallback from on_step_begin to
on_step_end: `_prepare_inputs` (generation with `model.generate`, decoding, the reward, advantages:
`_generate_and_score_completions`, timed apart as the rollout), the loss forward and backward, the
gradient clip and the AdamW step. The batch fetch before on_step_begin (a list of rows) and the logging
after on_step_end are outside. Prints one JSON line on stdout.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import sys
import time

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grpo_peers_reward import driver_args, trl_digit_share  # noqa: E402


class StepTimer(TrainerCallback):
    def __init__(self):
        self.t0, self.steps, self.logs = None, [], {}

    def on_step_begin(self, args, state, control, **kwargs):
        self.t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append(time.perf_counter() - self.t0)
        print(f"[trl] step {state.global_step}: {self.steps[-1]:.3f} s", file=sys.stderr, flush=True)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "reward" in logs:  # a step's metrics (not the run's summary at the end)
            self.logs[state.global_step] = dict(logs)


def main() -> None:
    spec, workdir = driver_args(__doc__.splitlines()[0])
    torch.manual_seed(spec["seed"])
    if spec.get("torch_threads", 0) > 0:
        torch.set_num_threads(spec["torch_threads"])
    with open(spec["data"]) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    dataset = Dataset.from_list([{"prompt": [{"role": "system", "content": spec["system_prompt"]},
                                             {"role": "user", "content": r["question"]}]} for r in rows])
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32)
    P, G = spec["prompts_per_step"], spec["generations"]
    total = spec["warmup"] + spec["steps"]
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    no_remat = {"activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing": False}
    config = GRPOConfig(
        output_dir=workdir, seed=spec["seed"], use_cpu=True, bf16=False, fp16=False, **no_remat, report_to="none", logging_steps=1, save_strategy="no", disable_tqdm=True,
        max_steps=total, per_device_train_batch_size=P * G, gradient_accumulation_steps=1, num_generations=G,
        max_completion_length=spec["max_new_tokens"], temperature=spec["temperature"], top_p=1.0, top_k=0,
        use_vllm=False, beta=0.0, num_iterations=1, epsilon=0.2, scale_rewards="group", loss_type="dapo",
        learning_rate=spec["learning_rate"], lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        optim="adamw_torch", max_grad_norm=spec["grad_clip"], dataloader_num_workers=0)
    assert not config.gradient_checkpointing and not config.bf16
    assert config.steps_per_generation == 1 and config.generation_batch_size == P * G, (
        config.steps_per_generation, config.generation_batch_size)
    timer = StepTimer()
    trainer = GRPOTrainer(model=model, reward_funcs=[trl_digit_share], args=config, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[timer])
    rollout = []
    inner = trainer._generate_and_score_completions

    def timed_rollout(inputs):
        t0 = time.perf_counter()
        out = inner(inputs)
        rollout.append(time.perf_counter() - t0)
        return out

    trainer._generate_and_score_completions = timed_rollout
    before = model.get_input_embeddings().weight.detach().clone()
    trainer.train()
    changed = bool((model.get_input_embeddings().weight.detach() != before).any())
    w = spec["warmup"]
    step_s, rollout_s = timer.steps[w:], rollout[w:]
    logs = [timer.logs.get(i + 1, {}) for i in range(w, total)]
    versions = {k: importlib.metadata.version(k) for k in ("trl", "transformers", "torch", "accelerate")}
    print(json.dumps({"peer": "trl", "step_s": step_s, "rollout_s": rollout_s,
                      "update_s": [s - r for s, r in zip(step_s, rollout_s)],
                      "completion_tokens": [float(g["completions/mean_length"]) for g in logs if "completions/mean_length" in g],
                      "reward_mean": [float(g["reward"]) for g in logs if "reward" in g], "versions": versions,
                      "torch_threads": torch.get_num_threads(), "weights_changed": changed,
                      "notes": "rollout = _generate_and_score_completions (generate, decode, reward, advantages); "
                               "update = the rest of the optimizer step (loss forward/backward, clip, AdamW)"}),
          flush=True)


if __name__ == "__main__":
    main()
