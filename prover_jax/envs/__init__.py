"""Environments: one subpackage per family, all behind `make(name, **kwargs)`.

  base.py     the contract (Env, PromptSpec, info_dict), the seed/split convention and the registry
  splits.py   train / eval task splits (IndexSplit for task lists, ContentSplit for generated tasks)
  pool.py     EnvPool: many envs stepped at once, in worker processes where the engine needs it
  text.py     text normalisation, tokenization and the BM25 index the families share
  testing/    exact DP and fixed policies (ground truth for tests and the credit lab)
  household/  shop/ (+ webshop)  searchqa/ (+ searchqa_data)  alfworld/  prompts/ (one turn): the families

Families register themselves on import; the five are imported here so that `make` knows them all.
Heavy engines (ALFWorld/TextWorld) import lazily, when an env is built.
"""

from prover_jax.envs import alfworld, household, prompts, searchqa, shop  # importing a family registers it
from prover_jax.envs.base import (SPLITS, Env, PromptSpec, info_dict, make, names, register, seed_split,
                                  split_seed)

__all__ = ["SPLITS", "Env", "PromptSpec", "alfworld", "household", "info_dict", "make", "names", "prompts",
           "register", "searchqa", "seed_split", "shop", "split_seed"]
