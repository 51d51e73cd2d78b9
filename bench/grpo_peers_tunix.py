"""Tunix's side of bench/grpo_peers.py: `tunix.rl.grpo.GRPOLearner` on the shared model, prompts and reward.

    /work/peers/tunix312/bin/python bench/grpo_peers_tunix.py --spec=WORKDIR/spec.json --workdir=WORKDIR/tunix

The model is Tunix's own Qwen3 (`tunix.models.qwen3.model.Qwen3`), its ModelConfig read from the shared
folder's config.json and its weights loaded from the folder's safetensors by
`tunix.models.qwen3.params.create_model_from_safe_tensors` (fp32, a 1 x 1 (fsdp, tp) mesh on the CPU
device); the tokenizer is the folder's, as a transformers tokenizer object (Tunix's TokenizerAdapter
takes it). Tunix does not render chat messages for the vanilla engine: each prompt is the same
[system, user] conversation rendered by the tokenizer's chat template with the generation prompt, as text.
RLCluster: actor, rollout (and the reference role) on the same mesh, so the sampler shares the
actor's weights (no weight sync); rollout_engine "vanilla" (tunix.generate.sampler.Sampler);
RolloutConfig: 32 new tokens, temperature 1, top_p 1, no top_k, eos <|im_end|>, prompts left-padded to
the bench's max_prompt_tokens, kv_cache_size = that + the new tokens. RLTrainingConfig: one mini-batch
and one micro-batch per step (the whole 4 x 8 batch; gradient_accumulation 1), actor_optimizer =
optax clip_by_global_norm(1.0) then adamw(1e-5, b1 .9, b2 .999, eps 1e-8, weight decay 0), no
checkpoints, no evaluation. GRPOConfig: num_generations 8, num_iterations 1 (the old log-probs are not
computed), beta 0 (no reference log-probs, no reference model), epsilon 0.2, advantage estimator grpo
(group mean and std), loss_agg_mode token-mean. reward_fns = [grpo_peers_reward.tunix_digit_share].

The learner's `train()` runs the whole loop; the data iterator is a list of batches of 4 prompt texts
(Tunix repeats each 8 times). A step is one global step of that loop, from the moment the learner draws
its batch to the moment it draws the next one (the last: to when it closes the cluster): generation
(the Sampler: tokenize, prefill, decode loop, detokenize), reward, advantages
(`_generate_and_compute_advantage`, timed apart as the rollout), the actor update (`update_actor`:
forward, backward, optimizer step, timed apart as the update) and the learner's per-step metric
bookkeeping. Prints one JSON line on stdout.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from tunix.models.qwen3 import model as qwen3_model  # noqa: E402
from tunix.models.qwen3 import params as qwen3_params  # noqa: E402
from tunix.rl import rl_cluster as rl_cluster_lib  # noqa: E402
from tunix.rl.grpo.grpo_learner import GRPOConfig, GRPOLearner  # noqa: E402
from tunix.rl.rollout import base_rollout  # noqa: E402
from tunix.sft import metrics_logger  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grpo_peers_reward import driver_args, tunix_digit_share  # noqa: E402


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def model_config(folder: str) -> qwen3_model.ModelConfig:
    """Tunix's Qwen3 ModelConfig of the folder's config.json (a dense, default-RoPE Qwen3)."""
    with open(os.path.join(folder, "config.json")) as f:
        d = json.load(f)
    rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
    theta = rope.get("rope_theta", d.get("rope_theta", 10000.0))
    return qwen3_model.ModelConfig(
        num_layers=d["num_hidden_layers"], vocab_size=d["vocab_size"], embed_dim=d["hidden_size"],
        hidden_dim=d["intermediate_size"], num_heads=d["num_attention_heads"], head_dim=d["head_dim"],
        num_kv_heads=d["num_key_value_heads"], rope_theta=int(theta), norm_eps=d["rms_norm_eps"],
        use_tied_embedding=bool(d.get("tie_word_embeddings", False)), dtype=jnp.float32, param_dtype=jnp.float32)


class TimedBatches:
    """The training batches; records when the learner draws each one (a step starts there)."""

    def __init__(self, batches: list[dict]):
        self.batches, self.drawn = iter(batches), []

    def __iter__(self):
        return self

    def __next__(self):
        batch = next(self.batches)
        self.drawn.append(time.perf_counter())
        return batch


def main() -> None:
    spec, workdir = driver_args(__doc__.splitlines()[0])
    os.makedirs(workdir, exist_ok=True)
    P, G, N = spec["prompts_per_step"], spec["generations"], spec["max_new_tokens"]
    total = spec["warmup"] + spec["steps"]

    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    auto = (jax.sharding.AxisType.Auto,) * 2  # Tunix's models index with implicit shardings (not Explicit mode)
    mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=auto, devices=jax.devices()[:1])
    config = model_config(spec["model"])
    model = qwen3_params.create_model_from_safe_tensors(spec["model"], config, mesh, dtype=jnp.float32)

    with open(spec["data"]) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    rng = np.random.default_rng(spec["seed"])
    order = rng.permutation(len(rows))
    texts = [tokenizer.apply_chat_template([{"role": "system", "content": spec["system_prompt"]},
                                            {"role": "user", "content": rows[i]["question"]}],
                                           tokenize=False, add_generation_prompt=True) for i in order]
    # a batch's prompts as a numpy array: the learner repeats every leaf of the batch G times (a list would be
    # a pytree of single strings)
    batches = TimedBatches([{"prompts": np.array([texts[(s * P + j) % len(texts)] for j in range(P)])}
                            for s in range(total)])

    optimizer = optax.chain(optax.clip_by_global_norm(spec["grad_clip"]),
                            optax.adamw(spec["learning_rate"], b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0))
    rollout_config = base_rollout.RolloutConfig(
        max_tokens_to_generate=N, max_prompt_length=spec["max_prompt_tokens"], kv_cache_size=spec["cache_tokens"],
        temperature=spec["temperature"], top_p=1.0, top_k=None, eos_tokens=[eos], data_type=jnp.float32,
        seed=spec["seed"])  # an int: the Sampler makes a fresh key of it per call (a key array is donated, then dead)
    training_config = rl_cluster_lib.RLTrainingConfig(
        actor_optimizer=optimizer, eval_every_n_steps=10**9, max_steps=total, mini_batch_size=P,
        train_micro_batch_size=P,
        metrics_logging_options=metrics_logger.MetricsLoggerOptions(
            log_dir=tempfile.mkdtemp(prefix="metrics_", dir=workdir), flush_every_n_steps=10**6),
        pbar_description=None)
    cluster_config = rl_cluster_lib.ClusterConfig(
        role_to_mesh={rl_cluster_lib.Role.ACTOR: mesh, rl_cluster_lib.Role.REFERENCE: mesh,
                      rl_cluster_lib.Role.ROLLOUT: mesh},
        rollout_engine="vanilla", offload_to_cpu=False, training_config=training_config,
        rollout_config=rollout_config)
    cluster = rl_cluster_lib.RLCluster(actor=model, reference=None, tokenizer=tokenizer, cluster_config=cluster_config)
    algo = GRPOConfig(num_generations=G, num_iterations=1, beta=0.0, epsilon=0.2, loss_agg_mode="token-mean")

    def reward(prompts, completions, **kwargs):  # the shared reward, its batch mean kept for the record
        values = tunix_digit_share(prompts, completions, **kwargs)
        rewards.append(float(np.mean(values)))
        return values

    rewards = []
    learner = GRPOLearner(rl_cluster=cluster, algo_config=algo, reward_fns=[reward])
    assert not learner.should_sync_weights and not learner.can_enable_async_rollout

    rollout_s, update_s, examples, ended = [], [], [], []
    inner_rollout, inner_update, inner_close = (learner._generate_and_compute_advantage, cluster.update_actor,
                                                cluster.close)

    def timed_rollout(training_input, mode=rl_cluster_lib.Mode.TRAIN):
        t0 = time.perf_counter()
        # the learner np.repeat-s the batch, so prompts arrive as numpy strings, which transformers' encode
        # (5.12, in Tunix's Sampler.tokenize) refuses: plain str, as Tunix's own tokenizers accept either
        training_input["prompts"] = [str(x) for x in training_input["prompts"]]
        example = inner_rollout(training_input, mode)
        if mode == rl_cluster_lib.Mode.TRAIN:
            rollout_s.append(time.perf_counter() - t0)
            examples.append(example.completion_mask)  # lengths read after the run
        return example

    def timed_update(*a, **k):
        t0 = time.perf_counter()
        out = inner_update(*a, **k)
        jax.block_until_ready(jax.tree.leaves(nnx_state(cluster.actor_trainer.model)))
        update_s.append(time.perf_counter() - t0)
        log(f"[tunix] step {len(update_s)}: rollout {rollout_s[-1]:.3f} s, update {update_s[-1]:.3f} s")
        return out

    def timed_close():
        ended.append(time.perf_counter())
        return inner_close()

    learner._generate_and_compute_advantage = timed_rollout
    cluster.update_actor = timed_update
    cluster.close = timed_close
    before = np.array(cluster.actor_trainer.model.embedder.input_embedding.value)
    learner.train(batches)
    changed = bool(np.any(np.array(cluster.actor_trainer.model.embedder.input_embedding.value) != before))

    marks = batches.drawn + ended  # step k runs from drawing batch k to drawing batch k + 1 (the last: to close)
    step_s = [b - a for a, b in zip(marks[:-1], marks[1:])]
    w = spec["warmup"]
    if len(step_s) != total or len(update_s) != total:
        raise RuntimeError(f"Tunix ran {len(update_s)} updates over {len(step_s)} batches; expected {total}")
    versions = {k: importlib.metadata.version(k) for k in ("google-tunix", "jax", "jaxlib", "flax", "optax")}
    print(json.dumps({"peer": "tunix", "step_s": step_s[w:], "rollout_s": rollout_s[w:], "update_s": update_s[w:],
                      "completion_tokens": [float(np.asarray(m).sum(-1).mean()) for m in examples[w:]], "reward_mean": rewards[w:], "versions": versions,
                      "weights_changed": changed, "weights": "loaded from the folder's safetensors (tunix.models.qwen3.params)",
                      "notes": "step = batch drawn to next batch drawn; rollout = _generate_and_compute_advantage "
                               "(Sampler generate, reward, advantages); update = update_actor (forward, backward, "
                               "optax step)"}), flush=True)


def nnx_state(model):
    from flax import nnx

    return nnx.state(model)


if __name__ == "__main__":
    main()
