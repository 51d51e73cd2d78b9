"""Multi-process (multi-host) runs: the JAX runtime, cross-process agreement, global arrays.

The design (as on TPU pods in MaxText and Tunix): the TRAIN state lives on the global mesh over all
processes; ROLLOUTS are host-local (each process plays its share of the step's task groups with its
own envs and its own engine on its local devices); the per-token batch is assembled into global
arrays; one global update; the new weights are resharded onto every host's engine.
"""

from prover_jax.distributed.arrays import (WeightSync, engine_mesh, global_batch, globalize,
                                           to_global)
from prover_jax.distributed.runtime import (allgather_json, barrier, check_layout, initialize,
                                            is_primary, keep_host_memory, process_count, process_index,
                                            share, uneven_share)

__all__ = ["WeightSync", "allgather_json", "barrier", "check_layout", "engine_mesh", "global_batch", "globalize",
           "initialize", "is_primary", "keep_host_memory", "process_count", "process_index", "share", "to_global",
           "uneven_share"]
