"""The demo setting with the levers of the learning study (bench/LEARNING.md) exposed: GRPO from a
shorter SFT warm start, with the demonstrator's and the tokenizer's levers at their neutral values.

    prover-train --config=configs/demo_levers.py[:pairs] --workdir=W --config.train.steps=0   # SFT start
    prover-train --config=configs/demo_levers.py[:pairs] --workdir=W2 ...                      # RL from it

`:pairs` draws the task object from five lookalike pairs only (each pivotal choice recurs across many
tasks); without it, every type with a lookalike in the room.
"""

import os

from prover_jax.envs.household.gen import LOOKALIKE
from prover_jax.training.config import load_config_file

_HERE = os.path.dirname(os.path.abspath(__file__))
PAIRS = ("apple", "tomato", "mug", "cup", "pen", "pencil", "cloth", "handtowel", "cellphone", "remotecontrol")


def get_config(variant: str = ""):
    if variant not in ("", "pairs"):
        raise ValueError(f"configs/demo_levers.py: unknown variant {variant!r}; expected '' or 'pairs'")
    c = load_config_file(os.path.join(_HERE, "demo.py"))
    # the task object types a task may draw: five lookalike pairs (:pairs) or every type
    c.env.kwargs.target_types = PAIRS if variant == "pairs" else tuple(sorted(LOOKALIKE))
    c.env.kwargs.demo_confusion = 0.0  # share of tasks whose demonstrator commits the lookalike it meets first
    c.env.kwargs.demo_noise = 0.0  # the demonstrator's slips (inadmissible commands) per turn, masked in SFT
    c.sft.successes_only = True  # False: SFT also imitates the demonstrator's failed episodes
    c.tokenizer.phrases = True  # False: word pieces, so goal nouns and command nouns are the same tokens
    c.credit.method = "grpo"  # the levers are measured with plain GRPO
    c.sft.steps = 1200  # a shorter warm start than the demo's 1800
    c.optim.learning_rate = 1e-4  # RL rate of the study's runs
    c.train.steps = 40  # RL updates
    c.train.eval_every = 20  # held-out evaluation mid-way too
    c.train.checkpoint_every = 20  # RL checkpoints (the SFT start is checkpoint 0 of a train.steps=0 run)
    return c
