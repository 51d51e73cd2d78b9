"""`alfworld`: ALFWorld's text games on the real engine (TextWorld's PDDL environment + ALFWorld's
planner expert), imported lazily: this package loads without the `alfworld` extra.

  env.py  AlfredEnv (registers `alfworld`): game discovery, splits, replay-based snapshots, the
          process's single engine
  tasks/  18 project-authored games (12 train, 6 valid_seen; package data) and make_tasks.py,
          which writes them
"""

from prover_jax.envs.alfworld.env import (MAX_ACTION_CHARS, NOTHING, SHIPPED_TASKS, SYSTEM_PROMPT, TASK_TYPES,
                                          AlfredEnv, Snapshot, find_games, game_id, malformed, resolve_data_dir)

__all__ = ["MAX_ACTION_CHARS", "NOTHING", "SHIPPED_TASKS", "SYSTEM_PROMPT", "TASK_TYPES", "AlfredEnv", "Snapshot",
           "find_games", "game_id", "malformed", "resolve_data_dir"]
