"""Sampling: per-row token sampling controls and a slot-based decode engine (JetStream contract).

    from prover_jax.sampling import Driver, Engine, Request, SamplingParams, sample
"""

from prover_jax.sampling.driver import Completion, Driver, Request
from prover_jax.sampling.engine import DecodeState, Engine, Prefix, ResultTokens
from prover_jax.sampling.sampler import SamplingParams, kept_mask, sample

__all__ = ["Completion", "DecodeState", "Driver", "Engine", "Request", "Prefix", "ResultTokens",
           "SamplingParams", "kept_mask", "sample"]
