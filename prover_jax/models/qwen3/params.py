"""Hugging Face <-> prover_jax parameter conversion for Qwen3 (one key table, streamed I/O).

Checkpoint layout: Qwen3ForCausalLM's (`model.*` and `lm_head.weight`). Which weight files a folder's
tensors are read from, the streamed load, the placement on a mesh (`param_shardings`, `shard_model`),
the tied-head check and the sharded export are `common.weights`'.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np

from prover_jax.models.common import weights
from prover_jax.models.common.weights import DECODER_KEYS, LAYER, param_shardings, shard_model
from prover_jax.models.qwen3.config import Qwen3Config
from prover_jax.models.qwen3.model import Qwen3
from prover_jax.models.qwen3_5.model import Runtime

__all__ = ["KEY_TABLE", "abstract_model", "export_tensors", "hf_to_path", "load_hf", "param_shardings",
           "path_to_hf", "save_hf", "shard_model"]

# HF name (without "model.") -> (our state path template, transform): `common.weights.DECODER_KEYS` and the
# attention biases; "T" = transpose (torch Linear (out, in) <-> our kernel (in, out)).
KEY_TABLE: tuple[tuple[str, str, str | None], ...] = DECODER_KEYS + (
    (LAYER + r"self_attn\.(q_proj|k_proj|v_proj|o_proj)\.bias", "layers.{0}.self_attn.{1}.bias", None),
)
_COMPILED = tuple((re.compile(p + "$"), t, f) for p, t, f in KEY_TABLE)
IGNORED = re.compile(r"model\.(layers\.\d+\.self_attn\.)?rotary_emb\.inv_freq$")  # older exports' buffers
DTYPE_KEYS = ("dtype", "torch_dtype")  # config.json's record of the tensors' dtype


def hf_to_path(name: str) -> tuple[str, str | None] | None:
    """Our state path and transform for a HF tensor name; None for an ignored buffer. ValueError for a
    name that is not a Qwen3ForCausalLM weight."""
    if IGNORED.match(name):
        return None
    if name == "lm_head.weight":
        return "lm_head", "T"
    if name.startswith("model."):
        for pat, tmpl, fn in _COMPILED:
            m = pat.match(name[len("model."):])
            if m:
                return tmpl.format(*m.groups()), fn
    raise ValueError(f"unexpected tensor {name!r} in checkpoint (not a Qwen3ForCausalLM weight)")


def path_to_hf(path: str) -> tuple[str, str | None]:
    """HF name and transform of one of our state paths."""
    if path == "lm_head":
        return "lm_head.weight", "T"
    name = "model." + ("embed_tokens.weight" if path == "embed_tokens" else path.replace(".kernel", ".weight"))
    return name, hf_to_path(name)[1]


def _transform(x, fn):  # "T" is its own inverse
    return x.T if fn == "T" else x


def abstract_model(cfg: Qwen3Config, *, dtype=jnp.float32, param_dtype=jnp.float32, mesh=None,
                   runtime: Runtime | None = None) -> Qwen3:
    """The model with ShapeDtypeStruct leaves: no memory allocated."""
    return weights.abstract(Qwen3, cfg, dtype=dtype, param_dtype=param_dtype, mesh=mesh, runtime=runtime)


def load_hf(path: str, dtype=jnp.float32, mesh=None, compute_dtype=None, config: Qwen3Config | None = None,
            runtime: Runtime | None = None) -> Qwen3:
    """Loads a HF Qwen3 checkpoint folder into a Qwen3 (params in `dtype`, computing in `compute_dtype`
    (None: dtype), running per `runtime`, placed tensor by tensor on `mesh` with the rules-table
    shardings; never a full unsharded copy: `common.weights.load_weights`). `config`: the architecture
    (default: the folder's config.json). A tied checkpoint may also store lm_head.weight, as
    transformers accepts, if it equals the embedding."""
    cfg = Qwen3Config.from_pretrained(path) if config is None else config
    abstract = abstract_model(cfg, dtype=dtype if compute_dtype is None else compute_dtype, param_dtype=dtype,
                              mesh=mesh, runtime=runtime)
    return weights.load_weights(path, abstract, hf_to_path=hf_to_path, path_to_hf=path_to_hf, to_ours=_transform,
                                to_hf=_transform, dtype=dtype, mesh=mesh, tied=cfg.tie_word_embeddings,
                                layout=f"num_hidden_layers={cfg.num_hidden_layers}, "
                                       f"attention_bias={cfg.attention_bias}")


def export_tensors(model: Qwen3, dtype=None):
    """Yields (HF name, numpy array) one tensor at a time. dtype=None keeps each tensor's source dtype
    (a model not loaded from HF: the param dtype); else every tensor is cast to `dtype`."""
    src = getattr(model, "hf_source", None)
    src_dtypes = dict(src.dtypes) if src else {}
    for p, var in weights.flat_state(model).items():
        name, fn = path_to_hf(p)
        x = jax.device_get(var[...])
        target = jnp.dtype(dtype) if dtype is not None else jnp.dtype(src_dtypes.get(name, x.dtype))
        yield name, np.ascontiguousarray(_transform(x.astype(target), fn))


def save_hf(model: Qwen3, out_dir: str, dtype=None, max_shard_bytes: int = 5 * 2 ** 30) -> None:
    """Writes config.json (its dtype entry, where it has one, set to `dtype` when given) + safetensors
    (sharded with an index above `max_shard_bytes`) and copies the tokenizer files found next to the
    source checkpoint (`common.weights.save_folder`). Weight files of an earlier export this one does not
    write (`model*.safetensors`, the index, an interrupted export's `_shard*.safetensors`) are removed;
    other files stay."""
    config = model.config.to_hf_dict()
    for key in DTYPE_KEYS:
        if dtype is not None and config.get(key) is not None:
            config[key] = jnp.dtype(dtype).name
    weights.save_folder(model, out_dir, config, export_tensors(model, dtype), max_shard_bytes)
