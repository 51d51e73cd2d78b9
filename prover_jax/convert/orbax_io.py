"""A prover model checkpoint: `config.json` (HF text config) + `source.json` (tensor dtypes, source
folder) + tokenizer files + `params/` (orbax, one entry per parameter).

Restore builds the abstract model first and restores each parameter straight into its sharding, so no
host ever holds an unsharded copy of a model that a mesh shards.
"""

from __future__ import annotations

import json
import os
import shutil

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from flax import nnx

from prover_jax.models import qwen3_5
from prover_jax.models.qwen3_5.params import TOKENIZER_FILES

PARAMS_DIR = "params"


def is_prover_checkpoint(path: str) -> bool:
    return os.path.isdir(os.path.join(path, PARAMS_DIR)) and os.path.isfile(
        os.path.join(path, "config.json"))


def save_checkpoint(model: qwen3_5.Qwen3_5, path: str) -> None:
    """Writes `model` (params as stored, e.g. fp32) to a prover checkpoint folder."""
    path = os.path.abspath(path)
    if os.path.exists(os.path.join(path, PARAMS_DIR)):
        raise FileExistsError(f"{path} already holds a checkpoint; choose another --out")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(model.config.to_hf_dict(), f, indent=2)
    src = getattr(model, "hf_source", None)
    with open(os.path.join(path, "source.json"), "w") as f:
        json.dump({"path": src.path if src else None, "dtypes": dict(src.dtypes) if src else {}}, f,
                  indent=2)
    if src is not None:
        for name in TOKENIZER_FILES:
            p = os.path.join(src.path, name)
            if os.path.isfile(p):
                shutil.copy(p, os.path.join(path, name))
    state = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(os.path.join(path, PARAMS_DIR), state)


def load_checkpoint(path: str, dtype=jnp.float32, mesh=None, compute_dtype=None) -> qwen3_5.Qwen3_5:
    """Restores a prover checkpoint into a Qwen3_5 (params cast to `dtype`, sharded over `mesh`)."""
    path = os.path.abspath(path)
    if not is_prover_checkpoint(path):
        raise FileNotFoundError(f"{path} is not a prover checkpoint (needs config.json and {PARAMS_DIR}/)")
    cfg = qwen3_5.Qwen3_5Config.from_pretrained(path)
    compute_dtype = dtype if compute_dtype is None else compute_dtype
    abstract = qwen3_5.abstract_model(cfg, dtype=compute_dtype, param_dtype=dtype, mesh=mesh)
    graphdef, abs_state = nnx.split(abstract)
    shardings = qwen3_5.param_shardings(abstract, mesh) if mesh is not None else None
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    flat = {}
    for p, var in nnx.to_flat_state(abs_state):
        key = ".".join(str(x) for x in p)
        v = var.get_value()
        flat[p] = jax.ShapeDtypeStruct(v.shape, v.dtype,
                                       sharding=shardings[key] if shardings else device)
    target = _replace_leaves(nnx.to_pure_dict(abs_state), flat)
    try:
        with ocp.StandardCheckpointer() as ckptr:
            restored = ckptr.restore(os.path.join(path, PARAMS_DIR), target)
    except Exception as e:
        raise ValueError(f"cannot restore parameters from {path}/{PARAMS_DIR}: {e}") from None
    nnx.replace_by_pure_dict(abs_state, restored)
    model = nnx.merge(graphdef, abs_state)
    with open(os.path.join(path, "source.json")) as f:
        src = json.load(f)
    model.hf_source = qwen3_5.HFSource(path, tuple(sorted(src.get("dtypes", {}).items())))
    return model


def _replace_leaves(tree: dict, flat: dict, prefix=()):
    out = {}
    for k, v in tree.items():
        key = prefix + (k,)
        out[k] = _replace_leaves(v, flat, key) if isinstance(v, dict) else flat[key]
    return out
