"""prover_jax's side of bench/grpo_peers.py: `Trainer.rl_step()` on the shared model, prompts and reward.

    python bench/grpo_peers_prover.py --spec=WORKDIR/spec.json --workdir=WORKDIR/prover_jax

The trainer is the library default config (`training.config.default_config()`) set to the bench's
work: env `prompts` on the JSONL with reward_fn `bench.grpo_peers_reward:digit_share` (the repository
root on PYTHONPATH) and the bench's system prompt; model.init=hf from the shared folder (its tokenizer
and chat template: rollout.chat_template=auto); no SFT; credit grpo with group-std scaling; 4 groups x 8
rollouts, <= 32 action tokens, temperature 1; AdamW lr 1e-5, no weight decay, clip 1.0; one update on
the whole batch (micro_batch_size = the batch, 1 PPO epoch, 1 mini-batch); no KL. The engine's slots
hold the whole batch and its cache the longest prompt plus the new tokens (the bench's cache_tokens,
as Tunix's kv_cache_size); the update's batch length is padded to a multiple of 32 (the default 128 is a
compile-bucket choice that would pad this batch of ~70 tokens to 128).

A step is one `rl_step()` call, timed around it with perf_counter: playing the batch (prefill, decode,
reward in the env, GRPO advantages: the row's time/rollout_s), assembling the batch, the jitted update
(forward, backward, AdamW) and copying the new weights to the engine (time/update_s). Prints one JSON
line on stdout.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from prover_jax.training.config import default_config  # noqa: E402
from prover_jax.training.trainer import Trainer  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grpo_peers_reward import driver_args  # noqa: E402

REWARD = "bench.grpo_peers_reward:digit_share"


def config(spec: dict):
    c = default_config()
    c.seed = spec["seed"]
    c.env.name = "prompts"
    c.env.kwargs = {"path": spec["data"], "reward_fn": REWARD, "system_prompt": spec["system_prompt"]}
    c.model.init = "hf"
    c.model.path = spec["model"]
    c.model.param_dtype = c.model.dtype = "float32"
    c.sft.steps = 0
    c.credit.method = "grpo"
    c.credit.std_scope = "group"  # (R - mean) / (std + 1e-6) per group, as TRL's scale_rewards="group" and Tunix
    r = c.rollout
    r.groups_per_step, r.group_size = spec["prompts_per_step"], spec["generations"]
    r.max_action_tokens = spec["max_new_tokens"]
    r.temperature, r.top_p, r.top_k = spec["temperature"], 1.0, 0
    r.chat_template = "auto"
    r.max_concurrent_decodes = spec["prompts_per_step"] * spec["generations"]
    r.max_target_length = spec["cache_tokens"]
    r.max_prefill_length = spec["max_prompt_tokens"]
    c.loss.kl_coef = 0.0
    c.loss.aggregation = "token-mean"
    c.optim.name = "adamw"
    c.optim.learning_rate = spec["learning_rate"]
    c.optim.weight_decay = 0.0
    c.optim.grad_clip = spec["grad_clip"]
    t = c.train
    t.steps = 1_000_000
    t.micro_batch_size = spec["prompts_per_step"] * spec["generations"]
    t.ppo_epochs = t.mini_batches = 1
    t.length_multiple = 32
    t.loggers = ()
    t.checkpoint_every = 1_000_000
    return c


def main() -> None:
    spec, workdir = driver_args(__doc__.splitlines()[0])
    trainer = Trainer(config(spec), workdir)
    step_s, rollout_s, update_s, tokens, rewards, applied, compiles = [], [], [], [], [], [], []
    try:
        for i in range(spec["warmup"] + spec["steps"]):
            t0 = time.perf_counter()
            row = trainer.rl_step()
            dt = time.perf_counter() - t0
            timed = i >= spec["warmup"]
            print(f"[prover_jax] step {i + 1} {'timed' if timed else 'warmup'}: {dt:.3f} s (rollout "
                  f"{row['time/rollout_s']:.3f}, update {row['time/update_s']:.3f}, compiles {row['compiles']})",
                  file=sys.stderr, flush=True)
            if timed:
                step_s.append(dt)
                rollout_s.append(row["time/rollout_s"])
                update_s.append(row["time/update_s"])
                tokens.append(row["policy_tokens"] / row["episodes"])
                rewards.append(row["score"])
                applied.append(bool(row["applied"]))
                compiles.append(int(row["compiles"]))
    finally:
        trainer.close()
    versions = {k: importlib.metadata.version(k) for k in ("jax", "jaxlib", "flax", "optax")}
    print(json.dumps({"peer": "prover_jax", "step_s": step_s, "rollout_s": rollout_s, "update_s": update_s,
                      "completion_tokens": tokens, "reward_mean": rewards, "versions": versions,
                      "weights_changed": bool(applied) and all(applied), "timed_step_compiles": compiles,
                      "notes": "rollout = play + reward + advantages (time/rollout_s); update = batch assembly + "
                               "jitted update + weight copy to the engine (time/update_s)",
                      "median_s": statistics.median(step_s) if step_s else None}), flush=True)


if __name__ == "__main__":
    main()
