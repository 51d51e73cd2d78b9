"""`prompts`: single-turn prompt tasks (a prompt dataset and a reward function).

  env.py      the family: one turn, reward_fn(completion, row)
  data.py     JSONL / JSON files and Hugging Face datasets, the train / held-out split
  rewards.py  the built-in rewards (exact_match, gsm8k) and module:function lookup
"""

from prover_jax.envs.prompts.data import DataError, load
from prover_jax.envs.prompts.env import Prompts
from prover_jax.envs.prompts.rewards import BUILT_IN, exact_match, gsm8k, reward_fn

__all__ = ["BUILT_IN", "DataError", "Prompts", "exact_match", "gsm8k", "load", "reward_fn"]
