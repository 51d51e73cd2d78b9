"""The learning-regression probe: does GRPO lift training success on a fixed small task set from a
fixed weak start, and do its two broken variants (advantage sign flipped; sampler never given the
updated weights) not? Prints one JSON line per variant.

    python bench/learning_regression.py [--steps=15] [--lr=4e-4] [--tasks=4] [--sft_steps=200] \
        [--aggregation=token-mean] [--workdir=DIR]

The weak start: the demo policy in the tiny household room of the trainer tests imitates two
demonstrators on the same tasks, the expert and one who takes the task object's lookalike when it meets
it first (`demo_confusion=1`). The tasks are the first --tasks consecutive seeds from 1000 on which the
confused demonstrator fails, so on each the start is torn at one pivotal, irreversible choice.
Training success is measured before and after the updates on --episodes sampled episodes per task with
the same sampling seeds both times (paired: an unchanged policy scores exactly the same).
bench/LEARNING.md has what it measured and why it is not yet a `make test` test.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from helpers.demo_config import small_demo  # noqa: E402
from prover_jax.envs import make  # noqa: E402
from prover_jax.envs.pool import EnvPool  # noqa: E402
from prover_jax.envs.testing import play_demonstrator  # noqa: E402
from prover_jax.rollout.loop import Rollout  # noqa: E402
from prover_jax.sampling import SamplingParams  # noqa: E402
from prover_jax.training import sft  # noqa: E402
from prover_jax.training.config import load_config_file  # noqa: E402
from prover_jax.training.trainer import Trainer  # noqa: E402

VARIANTS = ("grpo", "flipped", "frozen")


def probe_config(a):
    """The tiny room, task objects from configs/demo_levers.py:pairs, a.tasks fixed training tasks on
    which the confused demonstrator fails, GRPO at a.lr on a.tasks groups of 8 episodes."""
    c = small_demo()
    pairs = load_config_file(os.path.join(ROOT, "configs", "demo_levers.py"), "pairs")
    c.env.kwargs.target_types = pairs.env.kwargs.target_types
    confused = make("household", **{**c.env.kwargs, "demo_confusion": 1.0})
    start = 1000
    while any(play_demonstrator(confused, start + i)[0] for i in range(a.tasks)):
        start += 1
    c.env.train_seed_start, c.env.train_tasks, c.env.eval_seeds = start, a.tasks, 2
    c.rollout.groups_per_step, c.rollout.group_size = a.tasks, 8
    c.rollout.max_action_tokens, c.rollout.max_concurrent_decodes, c.rollout.max_target_length = 16, 32, 1024
    c.train.micro_batch_size, c.train.eval_episodes = 8 * a.tasks, 2
    c.sft.steps, c.sft.episodes, c.sft.learning_rate = a.sft_steps, a.tasks, 3e-3
    c.credit.method = "grpo"
    c.loss.aggregation = a.aggregation
    c.optim.learning_rate = a.lr
    c.tokenizer.phrases = not a.words
    return c


def task_seeds(t: Trainer) -> list[int]:
    c = t.config
    return list(range(c.env.train_seed_start, c.env.train_seed_start + c.env.train_tasks))


def torn_demonstrations(t: Trainer, wrong_copies: int = 1) -> list:
    """The expert's episode of each training task and `wrong_copies` of the confused demonstrator's."""
    c, seeds = t.config, task_seeds(t)
    expert = Rollout(None, t.tokenizer, t.rollout_config(SamplingParams()))
    confused = EnvPool(c.env.name, len(seeds), {**c.env.kwargs, "demo_confusion": 1.0})
    try:
        wrong = sft.demonstrations(expert, confused, seeds, c.rollout.max_target_length, successes_only=False)
    finally:
        confused.close()
    right = sft.demonstrations(expert, t.pool, seeds, c.rollout.max_target_length)
    if [d.success for d in right + wrong] != [True] * len(seeds) + [False] * len(seeds):
        raise RuntimeError("the expert must succeed and the confused demonstrator fail on every task")
    return right + wrong * wrong_copies


def training_success(t: Trainer, episodes: int) -> float:
    """The sampler's success on `episodes` episodes of each training task, with fixed sampling seeds
    (episode uids apart from the trainer's)."""
    seeds = [s for s in task_seeds(t) for _ in range(episodes)]
    uids = list(range(10**6, 10**6 + len(seeds)))
    n = t.pool.num_envs
    trajs = [x for i in range(0, len(seeds), n) for x in t.rollout.run(t.pool, seeds[i:i + n], uids=uids[i:i + n])]
    return float(np.mean([x.success for x in trajs]))


def play(t: Trainer, start, tasks, variant: str, steps: int, episodes: int) -> tuple[float, list[float]]:
    """`steps` RL steps from train state `start` and task-iterator state `tasks`: (training success
    after them, each step's batch success)."""
    t.state = jax.tree.map(jnp.copy, start)
    t.tasks.set_state(tasks)
    t.batches_drawn = 0
    t.driver.update_params(t.sync(t.state.params))
    assign, update = t.credit.assign, t.driver.update_params
    if variant == "flipped":
        def flipped(*args, **kwargs):
            out = assign(*args, **kwargs)
            out.advantages = [[-a for a in group] for group in out.advantages]
            return out

        t.credit.assign = flipped
    elif variant == "frozen":  # the sampler keeps its own copy of the start's weights
        t.driver.update_params(jax.tree.map(jnp.copy, t.driver.params))
        t.driver.update_params = lambda params: None
    try:
        curve = [t.rl_step()["success_rate"] for _ in range(steps)]
        return training_success(t, episodes), curve
    finally:
        t.credit.assign, t.driver.update_params = assign, update


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--lr", type=float, default=4e-4)
    p.add_argument("--tasks", type=int, default=4)
    p.add_argument("--sft_steps", type=int, default=200)
    p.add_argument("--episodes", type=int, default=32, help="sampled episodes per task that measure success")
    p.add_argument("--aggregation", default="token-mean")
    p.add_argument("--wrong_copies", type=int, default=1,
                   help="copies of each confused demonstration in SFT (more: a weaker start)")
    p.add_argument("--words", action="store_true", help="word-piece tokens (tokenizer.phrases=False)")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {VARIANTS}")
    p.add_argument("--workdir", default="")
    a = p.parse_args()
    t0 = time.perf_counter()
    workdir = a.workdir or tempfile.mkdtemp(prefix="learning_regression_")
    t = Trainer(probe_config(a), workdir)
    try:
        t.run_sft(demos=torn_demonstrations(t, a.wrong_copies))
        before = training_success(t, a.episodes)
        start, tasks = jax.tree.map(jnp.copy, t.state), t.tasks.get_state()
        for v in a.variants.split(","):
            after, curve = play(t, start, tasks, v, a.steps, a.episodes)
            print(json.dumps({"variant": v, "before": before, "after": after, "gain": after - before,
                              "batch_success": curve, "tasks": task_seeds(t), "lr": a.lr, "steps": a.steps,
                              "elapsed_s": round(time.perf_counter() - t0)}), flush=True)
    finally:
        t.close()


if __name__ == "__main__":
    main()
