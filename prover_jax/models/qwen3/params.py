"""Hugging Face <-> prover_jax parameter conversion for Qwen3 (one key table, streamed I/O).

Checkpoint layout: Qwen3ForCausalLM's (`model.*` and `lm_head.weight`). Which weight files a folder's
tensors are read from, the placement on a mesh (`param_shardings`, `shard_model`) and the tied-head
check are Qwen3.5's (`qwen3_5.params`), which are family-neutral.
"""

from __future__ import annotations

import json
import os
import re
import shutil

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors import safe_open
from safetensors.flax import save_file

from prover_jax.models.hf_folder import TOKENIZER_FILES, HFSource
from prover_jax.models.qwen3.config import Qwen3Config
from prover_jax.models.qwen3.model import Qwen3
from prover_jax.models.qwen3_5.params import (INDEX_FILE, STALE_WEIGHTS, _check_tied, _fill, _flat_state,
                                              _weight_files, param_shardings, shard_model)
from prover_jax.sharding import place

__all__ = ["KEY_TABLE", "abstract_model", "export_tensors", "hf_to_path", "load_hf", "param_shardings",
           "path_to_hf", "save_hf", "shard_model"]

# HF name (without "model.") -> (our state path template, transform); "T" = transpose (torch Linear
# (out, in) <-> our kernel (in, out)).
_LAYER = r"layers\.(\d+)\."
KEY_TABLE: tuple[tuple[str, str, str | None], ...] = (
    (r"embed_tokens\.weight", "embed_tokens", None),
    (r"norm\.weight", "norm.weight", None),
    (_LAYER + r"(input_layernorm|post_attention_layernorm)\.weight", "layers.{0}.{1}.weight", None),
    (_LAYER + r"mlp\.(gate_proj|up_proj|down_proj)\.weight", "layers.{0}.mlp.{1}.kernel", "T"),
    (_LAYER + r"self_attn\.(q_proj|k_proj|v_proj|o_proj)\.weight", "layers.{0}.self_attn.{1}.kernel", "T"),
    (_LAYER + r"self_attn\.(q_proj|k_proj|v_proj|o_proj)\.bias", "layers.{0}.self_attn.{1}.bias", None),
    (_LAYER + r"self_attn\.(q_norm|k_norm)\.weight", "layers.{0}.self_attn.{1}.weight", None),
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


def abstract_model(cfg: Qwen3Config, *, dtype=jnp.float32, param_dtype=jnp.float32, mesh=None) -> Qwen3:
    """The model with ShapeDtypeStruct leaves: no memory allocated."""
    return nnx.eval_shape(lambda: Qwen3(cfg, rngs=nnx.Rngs(0), dtype=dtype, param_dtype=param_dtype, mesh=mesh))


def load_hf(path: str, dtype=jnp.float32, mesh=None, compute_dtype=None, config: Qwen3Config | None = None
            ) -> Qwen3:
    """Loads a HF Qwen3 checkpoint folder into a Qwen3 (params in `dtype`, computing in `compute_dtype`
    (None: dtype), placed tensor by tensor on `mesh` with the rules-table shardings; never a full
    unsharded copy). `config`: the architecture (default: the folder's config.json). A tied checkpoint
    may also store lm_head.weight, as transformers accepts, if it equals the embedding."""
    cfg = Qwen3Config.from_pretrained(path) if config is None else config
    abstract = abstract_model(cfg, dtype=dtype if compute_dtype is None else compute_dtype, param_dtype=dtype,
                              mesh=mesh)
    slots = _flat_state(abstract)
    shardings = param_shardings(abstract, mesh) if mesh is not None else {}
    filled: dict[str, jax.Array] = {}
    dtypes: dict[str, str] = {}
    where: dict[str, tuple[str, str]] = {}  # embed_tokens / a tied lm_head: (file, name), for _check_tied
    for file in _weight_files(path):
        try:
            handle = safe_open(file, framework="flax")
        except Exception as e:  # corrupt header, truncated file
            raise ValueError(f"cannot read safetensors file {file}: {e}") from None
        with handle as f:
            for name in f.keys():
                target = hf_to_path(name)
                if target is None:
                    continue
                p, fn = target
                if p == "embed_tokens" or (p == "lm_head" and cfg.tie_word_embeddings):
                    where[p] = (file, name)
                    if p == "lm_head":
                        continue  # checked against the embedding below, not loaded
                if p not in slots:
                    raise ValueError(f"tensor {name!r} in {file} maps to {p!r}, which this config "
                                     f"(num_hidden_layers={cfg.num_hidden_layers}, "
                                     f"attention_bias={cfg.attention_bias}) does not have")
                x = _transform(f.get_tensor(name), fn)
                want = slots[p].get_value().shape
                if tuple(x.shape) != tuple(want):
                    raise ValueError(f"tensor {name!r} in {file} has shape {tuple(_transform(x, fn).shape)}; "
                                     f"the config implies {tuple(_transform(np.empty(want, np.int8), fn).shape)}")
                dtypes[name] = str(x.dtype)
                x = x.astype(dtype)
                filled[p] = place(x, shardings[p]) if p in shardings else x
    missing = [path_to_hf(p)[0] for p in slots if p not in filled]
    if missing:
        raise ValueError(f"checkpoint {path!r} is missing tensors: {missing}")
    if "lm_head" in where:
        _check_tied(where["lm_head"], where["embed_tokens"])
    model = _fill(abstract, filled)
    model.hf_source = HFSource(os.path.abspath(path), tuple(sorted(dtypes.items())))
    return model


def export_tensors(model: Qwen3, dtype=None):
    """Yields (HF name, numpy array) one tensor at a time. dtype=None keeps each tensor's source dtype
    (a model not loaded from HF: the param dtype); else every tensor is cast to `dtype`."""
    src = getattr(model, "hf_source", None)
    src_dtypes = dict(src.dtypes) if src else {}
    for p, var in _flat_state(model).items():
        name, fn = path_to_hf(p)
        x = jax.device_get(var[...])
        target = jnp.dtype(dtype) if dtype is not None else jnp.dtype(src_dtypes.get(name, x.dtype))
        yield name, np.ascontiguousarray(_transform(x.astype(target), fn))


def save_hf(model: Qwen3, out_dir: str, dtype=None, max_shard_bytes: int = 5 * 2 ** 30) -> None:
    """Writes config.json (its dtype entry, where it has one, set to `dtype` when given) + safetensors
    (sharded with an index above `max_shard_bytes`) and copies the tokenizer files found next to the
    source checkpoint. Weight files of an earlier export this one does not write (`model*.safetensors`,
    the index, an interrupted export's `_shard*.safetensors`) are removed; other files stay."""
    os.makedirs(out_dir, exist_ok=True)
    config = model.config.to_hf_dict()
    for key in DTYPE_KEYS:
        if dtype is not None and config.get(key) is not None:
            config[key] = jnp.dtype(dtype).name
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    shards: list[list[str]] = [[]]
    size = total = 0
    current: dict[str, np.ndarray] = {}

    def flush():
        nonlocal current, size
        save_file({k: jnp.asarray(v) for k, v in current.items()},
                  os.path.join(out_dir, f"_shard{len(shards) - 1:05d}.safetensors"), metadata={"format": "pt"})
        shards.append([])
        current, size = {}, 0

    for name, x in export_tensors(model, dtype):
        if current and size + x.nbytes > max_shard_bytes:
            flush()
        current[name] = x
        shards[-1].append(name)
        size, total = size + x.nbytes, total + x.nbytes
    flush()
    n = len(shards) - 1
    finals = ["model.safetensors"] if n == 1 else [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
    for i, final in enumerate(finals):
        os.replace(os.path.join(out_dir, f"_shard{i:05d}.safetensors"), os.path.join(out_dir, final))
    written = set(finals)
    if n > 1:
        written.add(INDEX_FILE)
        weight_map = {name: finals[i] for i in range(n) for name in shards[i]}
        with open(os.path.join(out_dir, INDEX_FILE), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    for fname in os.listdir(out_dir):
        stale = os.path.join(out_dir, fname)
        if STALE_WEIGHTS.fullmatch(fname) and fname not in written and os.path.isfile(stale):
            os.remove(stale)
    src = getattr(model, "hf_source", None)
    if src is not None:
        for fname in TOKENIZER_FILES:
            p = os.path.join(src.path, fname)
            if os.path.isfile(p) and os.path.abspath(p) != os.path.abspath(os.path.join(out_dir, fname)):
                shutil.copy(p, os.path.join(out_dir, fname))
