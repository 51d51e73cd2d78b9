"""A second model family for the family-table tests: Qwen3.5's modules under another name, whose
config.json says model_type "standin_text", registered the way a new family is (its record, one call).

    from helpers.standin_family import STANDIN, StandInConfig, tiny_standin
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from helpers.tiny import DIMS, FULL, LINEAR
from prover_jax.models import Family, qwen3_5, register_family

MODEL_TYPE = "standin_text"


class StandInConfig(qwen3_5.Qwen3_5Config):
    """Qwen3_5Config read from and written as a `standin_text` config.json."""

    @classmethod
    def from_hf_dict(cls, d: dict) -> "StandInConfig":
        if d.get("model_type") != MODEL_TYPE:
            raise ValueError(f"not a {MODEL_TYPE} config: model_type {d.get('model_type')!r}")
        return super().from_hf_dict({**d, "model_type": qwen3_5.config.TEXT_MODEL_TYPE, "architectures": []})

    def to_hf_dict(self) -> dict:
        return {**super().to_hf_dict(), "model_type": MODEL_TYPE, "architectures": ["StandInForCausalLM"]}


def load_hf(path: str, dtype=jnp.float32, mesh=None, compute_dtype=None):
    return qwen3_5.load_hf(path, dtype=dtype, mesh=mesh, compute_dtype=compute_dtype,
                           config=StandInConfig.from_pretrained(path))


TINY = StandInConfig(num_hidden_layers=2, layer_types=(LINEAR, FULL), eos_token_id=5, **DIMS)

STANDIN = register_family(Family(
    name="standin", model_types=(MODEL_TYPE,), config_class=StandInConfig, configs={"tiny": TINY},
    model_class=qwen3_5.Qwen3_5, abstract_model=qwen3_5.abstract_model, shard_model=qwen3_5.shard_model,
    param_shardings=qwen3_5.param_shardings, load_hf=load_hf, save_hf=qwen3_5.save_hf,
    resolve_runtime=qwen3_5.resolve_runtime, runtime_class=qwen3_5.Runtime))


def tiny_standin(seed: int = 0) -> qwen3_5.Qwen3_5:
    """A random model of the stand-in family's "tiny" size."""
    return STANDIN.model_class(STANDIN.config("tiny"), rngs=nnx.Rngs(seed))
