"""Hugging Face <-> prover_jax parameter conversion for Qwen3.5 (one key table, streamed I/O).

Accepted checkpoint layouts: text-only (`model.*`, Qwen3_5ForCausalLM) and the released multimodal one
(`model.language_model.*`, config under `text_config`; `model.visual.*` and `mtp.*` are ignored).
Export always writes the text-only layout, which `AutoModelForCausalLM.from_pretrained` loads.
"""

from __future__ import annotations

import glob
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
from prover_jax.models.qwen3_5.config import Qwen3_5Config
from prover_jax.models.qwen3_5.model import Qwen3_5
from prover_jax.sharding import named_sharding, place

# HF name (without the layout prefix) -> (our state path template, transform).
# transforms: "T" = transpose (torch Linear (out, in) <-> our kernel (in, out)); "conv" = (C, 1, K) <-> (C, K).
_LAYER = r"layers\.(\d+)\."
KEY_TABLE: tuple[tuple[str, str, str | None], ...] = (
    (r"embed_tokens\.weight", "embed_tokens", None),
    (r"norm\.weight", "norm.weight", None),
    (_LAYER + r"(input_layernorm|post_attention_layernorm)\.weight", "layers.{0}.{1}.weight", None),
    (_LAYER + r"mlp\.(gate_proj|up_proj|down_proj)\.weight", "layers.{0}.mlp.{1}.kernel", "T"),
    (_LAYER + r"self_attn\.(q_proj|k_proj|v_proj|o_proj)\.weight", "layers.{0}.self_attn.{1}.kernel", "T"),
    (_LAYER + r"self_attn\.(q_norm|k_norm)\.weight", "layers.{0}.self_attn.{1}.weight", None),
    (_LAYER + r"linear_attn\.(in_proj_qkv|in_proj_z|in_proj_b|in_proj_a|out_proj)\.weight",
     "layers.{0}.linear_attn.{1}.kernel", "T"),
    (_LAYER + r"linear_attn\.conv1d\.weight", "layers.{0}.linear_attn.conv_weight", "conv"),
    (_LAYER + r"linear_attn\.(dt_bias|A_log)", "layers.{0}.linear_attn.{1}", None),
    (_LAYER + r"linear_attn\.norm\.weight", "layers.{0}.linear_attn.norm.weight", None),
)
_COMPILED = tuple((re.compile(p + "$"), t, f) for p, t, f in KEY_TABLE)
IGNORED_PREFIXES = ("model.visual.", "mtp.", "visual.")
INDEX_FILE = "model.safetensors.index.json"
# Weight file names (fullmatch) an export replaces: save_hf removes those it does not write.
STALE_WEIGHTS = re.compile(r"model.*\.safetensors|_shard\d{5}\.safetensors|" + re.escape(INDEX_FILE))
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


def _flat_state(model: nnx.Module) -> dict[str, nnx.Variable]:
    _, state = nnx.split(model)
    out = {}
    for path, var in nnx.to_flat_state(state):
        out[".".join(str(p) for p in path)] = var
    return out


def _weight_files(path: str) -> list[str]:
    """The folder's weight files, as transformers picks them: model.safetensors, else the shards of
    model.safetensors.index.json, else every *.safetensors but a PEFT adapter's."""
    single = os.path.join(path, "model.safetensors")
    if os.path.isfile(single):
        return [single]
    index = os.path.join(path, INDEX_FILE)
    if os.path.isfile(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        missing = [f for f in files if not os.path.isfile(os.path.join(path, f))]
        if missing:
            raise FileNotFoundError(f"{index} names missing shard files {missing}")
        return [os.path.join(path, f) for f in files]
    files = sorted(f for f in glob.glob(os.path.join(path, "*.safetensors"))
                   if not os.path.basename(f).startswith("adapter_model"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in checkpoint folder {path!r}")
    return files


def abstract_model(cfg: Qwen3_5Config, *, dtype=jnp.float32, param_dtype=jnp.float32, mesh=None):
    """The model with ShapeDtypeStruct leaves: no memory allocated."""
    return nnx.eval_shape(lambda: Qwen3_5(cfg, rngs=nnx.Rngs(0), dtype=dtype, param_dtype=param_dtype,
                                          mesh=mesh))


def param_shardings(model_or_abstract: nnx.Module, mesh) -> dict[str, jax.sharding.NamedSharding]:
    """NamedSharding per state path, from each parameter's logical axes and the rules table."""
    return {p: named_sharding(v.get_metadata()["axes"], mesh, v.get_value().shape)
            for p, v in _flat_state(model_or_abstract).items()}


def shard_model(model: Qwen3_5, mesh) -> Qwen3_5:
    """`model` (in place) with every parameter placed on `mesh` by the rules table, and its
    activation constraints switched to that mesh."""
    shardings = param_shardings(model, mesh)
    _, state = nnx.split(model)
    flat = nnx.to_flat_state(state)
    for path, var in flat:
        var.set_value(place(var.get_value(), shardings[".".join(str(p) for p in path)]))
    nnx.update(model, nnx.from_flat_state(flat))
    model.mesh = mesh
    return model


def load_hf(path: str, dtype=jnp.float32, mesh=None, compute_dtype=None, config: Qwen3_5Config | None = None
            ) -> Qwen3_5:
    """Loads a HF Qwen3.5 checkpoint folder into a Qwen3_5 (params in `dtype`, placed tensor by tensor
    on `mesh` with the rules-table shardings; never a full unsharded copy). `config`: the architecture
    (default: read from the folder's config.json). A tied checkpoint may also store lm_head.weight, as
    transformers accepts, if it equals the embedding (ValueError naming it otherwise)."""
    cfg = Qwen3_5Config.from_pretrained(path) if config is None else config
    compute_dtype = dtype if compute_dtype is None else compute_dtype
    abstract = abstract_model(cfg, dtype=compute_dtype, param_dtype=dtype, mesh=mesh)
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
                        continue  # a tied checkpoint may store the head too: checked below, not loaded
                if p not in slots:
                    raise ValueError(f"tensor {name!r} in {file} maps to {p!r}, which this config "
                                     f"(layer_types={list(cfg.layer_types)}) does not have")
                x = _to_ours(f.get_tensor(name), fn)
                want = slots[p].get_value().shape
                if tuple(x.shape) != tuple(want):
                    raise ValueError(f"tensor {name!r} in {file} has shape "
                                     f"{tuple(_to_hf(x, fn).shape)}; the config implies "
                                     f"{tuple(_to_hf(np.empty(want, np.int8), fn).shape)}")
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


def _check_tied(head: tuple[str, str], embed: tuple[str, str]) -> None:
    """A tied checkpoint's stored lm_head must equal its embedding (transformers ties them only then)."""
    def read(file, name):
        with safe_open(file, framework="flax") as f:
            return f.get_tensor(name)

    if not bool(jnp.array_equal(read(*head), read(*embed))):
        raise ValueError(f"tensor {head[1]!r} in {head[0]} differs from {embed[1]!r}, but config.json ties "
                         "them (tie_word_embeddings: true): set it to false to use this head, or drop the "
                         "tensor")


def _fill(abstract: nnx.Module, arrays: dict[str, jax.Array]) -> nnx.Module:
    graphdef, state = nnx.split(abstract)
    flat = nnx.to_flat_state(state)
    for path, var in flat:
        var.set_value(arrays[".".join(str(p) for p in path)])
    return nnx.merge(graphdef, nnx.from_flat_state(flat))


def export_tensors(model: Qwen3_5, dtype=None):
    """Yields (HF name, numpy/jax array) one tensor at a time, in the text-only HF layout.

    dtype=None keeps each tensor's source dtype (or the param dtype); otherwise tensors are cast to
    `dtype`, except A_log and the gated norm weight, which stay fp32 where the source had them fp32
    (models not loaded from HF: always fp32, as in the official checkpoints).
    """
    src = getattr(model, "hf_source", None)
    src_dtypes = dict(src.dtypes) if src else {}
    for p, var in _flat_state(model).items():
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
    tokenizer files found next to the source checkpoint. In a folder that already holds weights, the
    weight files this export does not write (`model*.safetensors`, `model.safetensors.index.json`, and
    the `_shard*.safetensors` of an interrupted export) are removed, so no reader picks up stale ones;
    other files stay."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(model.config.to_hf_dict(), f, indent=2)
    shards: list[list[str]] = []
    weight_map: dict[str, str] = {}
    current: dict[str, np.ndarray] = {}
    size = total = 0
    tmp_names: list[str] = []

    def flush():
        nonlocal current, size
        if current:
            name = f"_shard{len(tmp_names):05d}.safetensors"
            save_file({k: jnp.asarray(v) for k, v in current.items()}, os.path.join(out_dir, name),
                      metadata={"format": "pt"})
            tmp_names.append(name)
            shards.append(list(current))
            current, size = {}, 0

    for name, x in export_tensors(model, dtype):
        if current and size + x.nbytes > max_shard_bytes:
            flush()
        current[name] = x
        size += x.nbytes
        total += x.nbytes
    flush()
    if len(tmp_names) == 1:
        written = {"model.safetensors"}
        os.replace(os.path.join(out_dir, tmp_names[0]), os.path.join(out_dir, "model.safetensors"))
    else:
        n = len(tmp_names)
        written = {INDEX_FILE}
        for i, tmp in enumerate(tmp_names):
            final = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
            os.replace(os.path.join(out_dir, tmp), os.path.join(out_dir, final))
            weight_map.update({k: final for k in shards[i]})
            written.add(final)
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
