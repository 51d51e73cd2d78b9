"""Hugging Face <-> prover_jax parameter conversion for Qwen3.5 (one key table, streamed I/O).

Accepted checkpoint layouts: text-only (`model.*`, Qwen3_5ForCausalLM) and the released multimodal one
(`model.language_model.*`, config under `text_config`; `model.visual.*` and `mtp.*` are ignored).
Export always writes the text-only layout, which `AutoModelForCausalLM.from_pretrained` loads.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np

from prover_jax.models.common import weights
from prover_jax.models.common.weights import DECODER_KEYS, LAYER, param_shardings, shard_model
from prover_jax.models.hf_folder import HFSource
from prover_jax.models.qwen3_5.config import Qwen3_5Config
from prover_jax.models.qwen3_5.model import Qwen3_5, Runtime

__all__ = ["KEY_TABLE", "HFSource", "abstract_model", "export_tensors", "hf_to_path", "load_hf", "param_shardings",
           "path_to_hf", "save_hf", "shard_model"]

# HF name (without the layout prefix) -> (our state path template, transform): `common.weights.DECODER_KEYS`
# and the Gated DeltaNet's. transforms: "T" = transpose (torch Linear (out, in) <-> our kernel (in, out));
# "conv" = (C, 1, K) <-> (C, K).
KEY_TABLE: tuple[tuple[str, str, str | None], ...] = DECODER_KEYS + (
    (LAYER + r"linear_attn\.(in_proj_qkv|in_proj_z|in_proj_b|in_proj_a|out_proj)\.weight",
     "layers.{0}.linear_attn.{1}.kernel", "T"),
    (LAYER + r"linear_attn\.conv1d\.weight", "layers.{0}.linear_attn.conv_weight", "conv"),
    (LAYER + r"linear_attn\.(dt_bias|A_log)", "layers.{0}.linear_attn.{1}", None),
    (LAYER + r"linear_attn\.norm\.weight", "layers.{0}.linear_attn.norm.weight", None),
)
_COMPILED = tuple((re.compile(p + "$"), t, f) for p, t, f in KEY_TABLE)
IGNORED_PREFIXES = ("model.visual.", "mtp.", "visual.")
# Tensors the official checkpoints keep in fp32 whatever the rest is.
FP32_TENSORS = re.compile(r".*linear_attn\.(A_log|norm\.weight)$")


def hf_to_path(name: str) -> tuple[str, str | None] | None:
    """Our state path and transform for a HF tensor name; None for ignored tensors.

    Raises ValueError for a name that is neither known nor ignorable.
    """
    if name.startswith(IGNORED_PREFIXES):
        return None
    if name == "lm_head.weight":
        return "lm_head", "T"
    for prefix in ("model.language_model.", "model."):
        if name.startswith(prefix):
            rest = name[len(prefix):]
            for pat, tmpl, fn in _COMPILED:
                m = pat.match(rest)
                if m:
                    return tmpl.format(*m.groups()), fn
    raise ValueError(f"unexpected tensor {name!r} in checkpoint (not a Qwen3.5 text-model weight)")


def path_to_hf(path: str) -> tuple[str, str | None]:
    """HF (text-only layout) name and transform for one of our state paths."""
    if path == "lm_head":
        return "lm_head.weight", "T"
    if path == "embed_tokens":
        return "model.embed_tokens.weight", None
    name = path.replace(".kernel", ".weight").replace("conv_weight", "conv1d.weight")
    if path.endswith(("dt_bias", "A_log")):
        name = path
    _, fn = hf_to_path("model." + name)
    return "model." + name, fn


def _to_ours(x, fn):
    if fn == "T":
        return x.T
    if fn == "conv":
        return x[:, 0, :]
    return x


def _to_hf(x, fn):
    if fn == "T":
        return x.T
    if fn == "conv":
        return x[:, None, :]
    return x


def abstract_model(cfg: Qwen3_5Config, *, dtype=jnp.float32, param_dtype=jnp.float32, mesh=None,
                   runtime: Runtime | None = None) -> Qwen3_5:
    """The model with ShapeDtypeStruct leaves: no memory allocated."""
    return weights.abstract(Qwen3_5, cfg, dtype=dtype, param_dtype=param_dtype, mesh=mesh, runtime=runtime)


def load_hf(path: str, dtype=jnp.float32, mesh=None, compute_dtype=None, config: Qwen3_5Config | None = None,
            runtime: Runtime | None = None) -> Qwen3_5:
    """Loads a HF Qwen3.5 checkpoint folder into a Qwen3_5 (params in `dtype`, computing in
    `compute_dtype` (None: dtype), running per `runtime`, placed tensor by tensor on `mesh` with the
    rules-table shardings; never a full unsharded copy: `common.weights.load_weights`). `config`: the
    architecture (default: read from the folder's config.json). A tied checkpoint may also store
    lm_head.weight, as transformers accepts, if it equals the embedding (ValueError naming it otherwise)."""
    cfg = Qwen3_5Config.from_pretrained(path) if config is None else config
    compute_dtype = dtype if compute_dtype is None else compute_dtype
    abstract = abstract_model(cfg, dtype=compute_dtype, param_dtype=dtype, mesh=mesh, runtime=runtime)
    return weights.load_weights(path, abstract, hf_to_path=hf_to_path, path_to_hf=path_to_hf, to_ours=_to_ours,
                                to_hf=_to_hf, dtype=dtype, mesh=mesh, tied=cfg.tie_word_embeddings,
                                layout=f"layer_types={list(cfg.layer_types)}")


def export_tensors(model: Qwen3_5, dtype=None):
    """Yields (HF name, numpy/jax array) one tensor at a time, in the text-only HF layout.

    dtype=None keeps each tensor's source dtype (or the param dtype); otherwise tensors are cast to
    `dtype`, except A_log and the gated norm weight, which stay fp32 where the source had them fp32
    (models not loaded from HF: always fp32, as in the official checkpoints).
    """
    src = getattr(model, "hf_source", None)
    src_dtypes = dict(src.dtypes) if src else {}
    for p, var in weights.flat_state(model).items():
        name, fn = path_to_hf(p)
        x = var[...]
        keep = src_dtypes.get(name) or src_dtypes.get(name.replace("model.", "model.language_model.", 1))
        if dtype is None:
            target = jnp.dtype(keep) if keep else x.dtype
        elif FP32_TENSORS.match(name) and (keep is None or jnp.dtype(keep) == jnp.float32):
            target = jnp.float32
        else:
            target = jnp.dtype(dtype)
        x = jax.device_get(x).astype(target)
        yield name, np.ascontiguousarray(_to_hf(x, fn))


def save_hf(model: Qwen3_5, out_dir: str, dtype=None, max_shard_bytes: int = 5 * 2 ** 30) -> None:
    """Writes config.json + safetensors (sharded with an index above `max_shard_bytes`) and copies the
    tokenizer files found next to the source checkpoint (`common.weights.save_folder`). In a folder that
    already holds weights, the weight files this export does not write (`model*.safetensors`,
    `model.safetensors.index.json`, and the `_shard*.safetensors` of an interrupted export) are removed,
    so no reader picks up stale ones; other files stay."""
    weights.save_folder(model, out_dir, model.config.to_hf_dict(), export_tensors(model, dtype), max_shard_bytes)
