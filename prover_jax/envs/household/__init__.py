"""`household`: ALFWorld-like text household tasks generated from the seed, pure Python, with
irreversible pivotal moves.

  env.py     HouseholdEnv (registers `household`): parsing, turns, info, snapshots, splits
  world.py   one room's rules: Layout (static) + State (hashable snapshot), commands and apply
  gen.py     deterministic layouts per seed and task type, tuned to the expert's episode length
  expert.py  the expert: a searcher that knows only what the agent has seen
"""

from prover_jax.envs.household.env import (MAX_ACTION_CHARS, SYSTEM_PROMPT, VERBS, HouseholdEnv, layout_key,
                                           normalize)
from prover_jax.envs.household.expert import expert_command
from prover_jax.envs.household.gen import TASK_TYPES, Config, generate
from prover_jax.envs.household.world import Layout, State, apply, commands, intro_text
from prover_jax.envs.testing.policies import mixed_policy, uniform_policy

__all__ = ["MAX_ACTION_CHARS", "SYSTEM_PROMPT", "TASK_TYPES", "VERBS", "Config", "HouseholdEnv", "Layout", "State",
           "apply", "commands", "expert_command", "generate", "intro_text", "layout_key", "mixed_policy", "normalize",
           "uniform_policy"]
