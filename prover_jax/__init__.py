"""prover_jax: GRPO + ProVer segment credit for LLM agents, in JAX.

Data flows one way through the packages:
    envs (tasks) -> rollout (sampling engine) -> judges/credit (propose, verify, credit)
    -> training (update) -> checkpoint / export (models.*.params)
"""

__version__ = "0.1.0"

from prover_jax import tpu_env as _tpu_env

_tpu_env.quiet_without_chips()  # before JAX starts its backends: no libtpu error block on CPU/GPU hosts
_tpu_env.compiler_flags()  # the TPU compiler flags the pod layouts were measured with (LIBTPU_INIT_ARGS)
