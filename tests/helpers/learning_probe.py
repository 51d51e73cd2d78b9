"""The learning-regression probe: GRPO from a fixed weak start on a fixed small task set, and its broken
variants (advantage sign flipped; sampler never given the updated weights).

The weak start: the demo policy in the tiny household room of the trainer tests imitates two
demonstrators on the same tasks, the expert once and, `wrong_copies` times, one who takes the task
object's lookalike when it meets it first (`demo_confusion=1`). The tasks are the first `tasks`
consecutive seeds from 1000 on which the confused demonstrator fails, so on each the start is torn at
one pivotal, irreversible choice. Training success is measured before and after the updates on
`episodes` sampled episodes per task with the same sampling seeds both times (episode uids apart from
the trainer's): an unchanged policy scores exactly the same.

Used by tests/credit/test_learning_regression.py and bench/learning_regression.py; bench/LEARNING.md
has what it measured.
"""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np

from helpers.demo_config import ROOT, small_demo
from prover_jax.envs import make
from prover_jax.envs.pool import EnvPool
from prover_jax.envs.testing import play_demonstrator
from prover_jax.rollout.loop import Rollout
from prover_jax.sampling import SamplingParams
from prover_jax.training import sft
from prover_jax.training.build import rollout_config
from prover_jax.training.config import load_config_file
from prover_jax.training.trainer import Trainer

VARIANTS = ("grpo", "flipped", "frozen")


@dataclasses.dataclass(frozen=True)
class Probe:
    tasks: int = 4  # fixed training tasks (groups per step)
    wrong_copies: int = 3  # copies of each confused demonstration in SFT (more: a weaker start)
    sft_steps: int = 200
    lr: float = 4e-4  # RL learning rate
    steps: int = 10  # RL steps per variant
    episodes: int = 16  # sampled episodes per task that measure success
    aggregation: str = "token-mean"
    words: bool = False  # word-piece tokens (tokenizer.phrases=False)


def probe_config(p: Probe):
    """The tiny room, task objects from configs/demo_levers.py:pairs, p.tasks fixed training tasks on
    which the confused demonstrator fails, GRPO at p.lr on p.tasks groups of 8 episodes."""
    c = small_demo()
    pairs = load_config_file(os.path.join(ROOT, "configs", "demo_levers.py"), "pairs")
    c.env.kwargs.target_types = pairs.env.kwargs.target_types
    confused = make("household", **{**c.env.kwargs, "demo_confusion": 1.0})
    start = 1000
    while any(play_demonstrator(confused, start + i)[0] for i in range(p.tasks)):
        start += 1
    c.env.train_seed_start, c.env.train_tasks, c.env.eval_seeds = start, p.tasks, 2
    c.rollout.groups_per_step, c.rollout.group_size = p.tasks, 8
    c.rollout.max_action_tokens, c.rollout.max_concurrent_decodes, c.rollout.max_target_length = 16, 32, 1024
    c.train.micro_batch_size, c.train.eval_episodes = 8 * p.tasks, 2
    c.sft.steps, c.sft.episodes, c.sft.learning_rate = p.sft_steps, p.tasks, 3e-3
    c.credit.method = "grpo"
    c.loss.aggregation = p.aggregation
    c.optim.learning_rate = p.lr
    c.tokenizer.phrases = not p.words
    return c


def task_seeds(t: Trainer) -> list[int]:
    c = t.config
    return list(range(c.env.train_seed_start, c.env.train_seed_start + c.env.train_tasks))


def torn_demonstrations(t: Trainer, wrong_copies: int) -> list:
    """The expert's episode of each training task and `wrong_copies` of the confused demonstrator's."""
    c, seeds = t.config, task_seeds(t)
    expert = Rollout(None, t.run.tokenizer, rollout_config(t.config, SamplingParams(), tokenizer=t.run.tokenizer))
    confused = EnvPool(c.env.name, len(seeds), {**c.env.kwargs, "demo_confusion": 1.0})
    try:
        wrong = sft.demonstrations(expert, confused, seeds, c.rollout.max_target_length, successes_only=False)
    finally:
        confused.close()
    right = sft.demonstrations(expert, t.run.pool, seeds, c.rollout.max_target_length)
    if [d.success for d in right + wrong] != [True] * len(seeds) + [False] * len(seeds):
        raise RuntimeError("the expert must succeed and the confused demonstrator fail on every task")
    return right + wrong * wrong_copies


def training_success(t: Trainer, episodes: int) -> float:
    """The sampler's success on `episodes` episodes of each training task, with fixed sampling seeds
    (episode uids apart from the trainer's)."""
    seeds = [s for s in task_seeds(t) for _ in range(episodes)]
    uids = list(range(10**6, 10**6 + len(seeds)))
    n = t.run.pool.num_envs
    trajs = [x for i in range(0, len(seeds), n) for x in t.run.rollout.run(t.run.pool, seeds[i:i + n], uids=uids[i:i + n])]
    return float(np.mean([x.success for x in trajs]))


class Run:
    """The probe's trainer after SFT on the torn demonstrations, with its start measured; `play` runs
    one variant from that start."""

    def __init__(self, p: Probe, workdir: str):
        self.probe = p
        self.trainer = t = Trainer(probe_config(p), workdir)
        try:
            t.run_sft(demos=torn_demonstrations(t, p.wrong_copies))
            self.before = training_success(t, p.episodes)
            self.start, self.tasks = jax.tree.map(jnp.copy, t.state), t.run.tasks.get_state()
        except BaseException:
            t.close()
            raise

    def play(self, variant: str) -> tuple[float, list[float]]:
        """`probe.steps` RL steps of `variant` from the start: (training success after them, each
        step's batch success)."""
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")
        t = self.trainer
        t.state = jax.tree.map(jnp.copy, self.start)
        t.run.tasks.set_state(self.tasks)
        t.batches_drawn = 0
        t.run.driver.update_params(t.run.sync(t.state.params))
        assign, update = t.run.credit.assign, t.run.driver.update_params
        if variant == "flipped":
            def flipped(*args, **kwargs):
                out = assign(*args, **kwargs)
                out.advantages = [[-a for a in group] for group in out.advantages]
                return out

            t.run.credit.assign = flipped
        elif variant == "frozen":  # the sampler keeps its own copy of the start's weights
            t.run.driver.update_params(jax.tree.map(jnp.copy, t.run.driver.params))
            t.run.driver.update_params = lambda params: None
        try:
            curve = [t.rl_step()["success_rate"] for _ in range(self.probe.steps)]
            return training_success(t, self.probe.episodes), curve
        finally:
            t.run.credit.assign, t.run.driver.update_params = assign, update

    def close(self) -> None:
        self.trainer.close()
