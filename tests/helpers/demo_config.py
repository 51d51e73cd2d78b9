"""configs/demo.py (the config `make demo` runs) shrunk to seconds, in three variants:

- ""       the trainer tests': 2 SFT + 2 RL steps of 2 tasks x 2 rollouts, 2 held-out eval tasks;
- "compare" the same with an evaluation after every step (prover-compare's runs in tests/compare);
- "pod"    a simulated pod (tests/training/test_multihost.py), packed rows: 8 devices in one fsdp axis, 2 task groups
           x 4 rollouts over a fixed set of 16 tasks that the SFT warm start has seen (so groups are
           mixed and ProVer's verifier runs), deterministic judge.

A prover config file (`--config=tests/helpers/demo_config.py[:VARIANT]`, read by path in the processes
the tests start) and a module (`from helpers.demo_config import get_config`): it imports nothing from
the tests."""

import os

from prover_jax.training.config import load_config_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PATH = os.path.abspath(__file__)


def small_demo():
    """configs/demo.py with short episodes in a near-empty room."""
    c = load_config_file(os.path.join(ROOT, "configs", "demo.py"))
    c.env.kwargs.max_turns = 6
    c.env.kwargs.expert_turns = (1, 6)
    c.env.kwargs.num_objects = 0
    c.env.kwargs.num_decoys = 1
    c.tokenizer.corpus_seeds = 20
    c.rollout.warmup = False  # the shapes a test meets compile when met (all 24 at start: ~1 min per trainer)
    return c


def trainer_config():
    c = small_demo()
    c.env.eval_seeds = 2
    c.rollout.groups_per_step = 2
    c.rollout.group_size = 2
    c.rollout.max_action_tokens = 8
    c.rollout.max_concurrent_decodes = 4
    c.rollout.max_target_length = 1024
    c.train.steps = 2
    c.train.micro_batch_size = 2
    c.train.checkpoint_every = 1
    c.train.eval_episodes = 2
    c.sft.steps = 2
    c.sft.episodes = 4
    c.sft.batch_size = 2
    c.credit.prover.k = 2
    c.judge.name = "random"
    return c


def pod_config():
    c = small_demo()
    c.env.eval_seeds = 4
    c.tokenizer.vocab_size = 512
    c.mesh.fsdp = -1
    c.rollout.groups_per_step = 2
    c.rollout.group_size = 4
    c.rollout.max_action_tokens = 16
    c.rollout.max_concurrent_decodes = 8
    c.rollout.max_prefill_length = 256
    c.rollout.max_target_length = 512
    c.train.steps = 2
    c.train.micro_batch_size = 8
    c.train.length_multiple = 256
    c.train.max_tokens_per_row = 512  # packed rows, as the pod layouts: both processes agree on the row bucket
    c.train.checkpoint_every = 1
    c.train.eval_episodes = 4
    c.env.train_tasks = 16
    c.sft.steps = 100
    c.sft.episodes = 16
    c.sft.batch_size = 8
    c.sft.learning_rate = 3e-3
    c.credit.method = "prover"
    c.credit.prover.k = 2
    c.credit.band_high = 1.0  # every mixed group is eligible
    c.judge.name = "contrastive"
    return c


def get_config(variant: str = ""):
    if variant == "pod":
        return pod_config()
    c = trainer_config()
    if variant == "compare":
        c.train.eval_every = 1
    elif variant:
        raise ValueError(f"unknown variant {variant!r}; expected '', 'compare' or 'pod'")
    return c
