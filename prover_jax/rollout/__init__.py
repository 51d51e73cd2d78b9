"""Multi-turn rollouts: the conversation layout, the episode record, the loop and continuations.

    from prover_jax.rollout import Rollout, RolloutConfig, Trajectory
"""

from prover_jax.rollout.chat import ChatTemplate, observation_text
from prover_jax.rollout.loop import Rollout, RolloutConfig, mix_seed
from prover_jax.rollout.tokenizer import env_corpus, load_tokenizer, train_tokenizer
from prover_jax.rollout.trajectory import CONTEXT_LIMIT, DONE, INVALID_LIMIT, TURN_LIMIT, Trajectory, Turn

__all__ = ["CONTEXT_LIMIT", "DONE", "INVALID_LIMIT", "TURN_LIMIT", "ChatTemplate", "Rollout", "RolloutConfig",
           "Trajectory", "Turn", "env_corpus", "load_tokenizer", "mix_seed", "observation_text", "train_tokenizer"]
