"""prover_jax: GRPO + ProVer segment credit for LLM agents, in JAX.

Data flows one way through the packages:
    envs (tasks) -> rollout (sampling engine) -> judges/credit (propose, verify, credit)
    -> training (update) -> checkpoint / export (models.*.params)
"""

__version__ = "0.1.0"
