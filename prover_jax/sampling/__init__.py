"""Sampling: per-row token sampling controls, a slot-based decode engine (JetStream contract) over
any model satisfying `DecodeModel` (model_api) and the offline continuous-batching driver (stop
strings, extension, fork).

    from prover_jax.sampling import Driver, Engine, Request, SamplingParams
"""

from prover_jax.sampling.driver import CACHE_FULL, LENGTH, STOP, Completion, Context, Driver, Finished, Request
from prover_jax.sampling.engine import DecodeState, Engine, Prefix, ResultTokens
from prover_jax.sampling.model_api import DecodeModel
from prover_jax.sampling.sampler import SamplingParams, kept_mask, sample

__all__ = ["CACHE_FULL", "LENGTH", "STOP", "Completion", "Context", "DecodeModel", "DecodeState", "Driver",
           "Engine", "Finished", "Prefix", "Request", "ResultTokens", "SamplingParams", "kept_mask", "sample"]
