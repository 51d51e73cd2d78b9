"""HF checkpoint folders <-> nnx models, family-neutral: which files hold a folder's weights, the
parameters' shardings and placement, a streamed load (one tensor at a time, placed on the mesh as read;
never a full unsharded copy) and a sharded safetensors export with its index.

A family supplies its key table as functions of its own:
    hf_to_path(name) -> (state path, transform) | None (an ignored tensor); ValueError for an unknown name
    path_to_hf(path) -> (HF name, transform)
    to_ours(x, transform) / to_hf(x, transform): a stored tensor -> the parameter's layout, and back
State paths are the model's flat nnx state keys joined by "." ("layers.0.mlp.up_proj.kernel").
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
from typing import Callable, Iterable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors import safe_open
from safetensors.flax import save_file

from prover_jax.models.hf_folder import TOKENIZER_FILES, HFSource
from prover_jax.sharding import named_sharding, place

LAYER = r"layers\.(\d+)\."  # a layer's index: the first group of a key pattern
# HF names (after the layout's "model." prefix) every family here shares -> (our state path template,
# transform); "T" = transpose (torch Linear (out, in) <-> our kernel (in, out)). A family's KEY_TABLE is
# these and its own.
DECODER_KEYS: tuple[tuple[str, str, str | None], ...] = (
    (r"embed_tokens\.weight", "embed_tokens", None),
    (r"norm\.weight", "norm.weight", None),
    (LAYER + r"(input_layernorm|post_attention_layernorm)\.weight", "layers.{0}.{1}.weight", None),
    (LAYER + r"mlp\.(gate_proj|up_proj|down_proj)\.weight", "layers.{0}.mlp.{1}.kernel", "T"),
    (LAYER + r"self_attn\.(q_proj|k_proj|v_proj|o_proj)\.weight", "layers.{0}.self_attn.{1}.kernel", "T"),
    (LAYER + r"self_attn\.(q_norm|k_norm)\.weight", "layers.{0}.self_attn.{1}.weight", None),
)
INDEX_FILE = "model.safetensors.index.json"
# Weight file names (fullmatch) an export replaces: `save_folder` removes those it does not write.
STALE_WEIGHTS = re.compile(r"model.*\.safetensors|_shard\d{5}\.safetensors|" + re.escape(INDEX_FILE))


def abstract(model_class, cfg, **kw) -> nnx.Module:
    """model_class(cfg, rngs=nnx.Rngs(0), **kw) with ShapeDtypeStruct leaves: no memory allocated."""
    return nnx.eval_shape(lambda: model_class(cfg, rngs=nnx.Rngs(0), **kw))


def flat_state(model: nnx.Module) -> dict[str, nnx.Variable]:
    """{state path: variable} of every variable of `model` (or of an abstract model)."""
    _, state = nnx.split(model)
    return {".".join(str(p) for p in path): var for path, var in nnx.to_flat_state(state)}


def param_shardings(model_or_abstract: nnx.Module, mesh) -> dict[str, jax.sharding.NamedSharding]:
    """NamedSharding per state path, from each parameter's logical axes and the rules table."""
    return {p: named_sharding(v.get_metadata()["axes"], mesh, v.get_value().shape)
            for p, v in flat_state(model_or_abstract).items()}


def shard_model(model: nnx.Module, mesh) -> nnx.Module:
    """`model` (in place) with every parameter placed on `mesh` by the rules table, and its
    activation constraints switched to that mesh (model.mesh)."""
    shardings = param_shardings(model, mesh)
    _, state = nnx.split(model)
    flat = nnx.to_flat_state(state)
    for path, var in flat:
        var.set_value(place(var.get_value(), shardings[".".join(str(p) for p in path)]))
    nnx.update(model, nnx.from_flat_state(flat))
    model.mesh = mesh
    return model


def fill(abstract_model: nnx.Module, arrays: dict[str, jax.Array]) -> nnx.Module:
    """The model of `abstract_model`'s graph with each variable's value arrays[state path]."""
    graphdef, state = nnx.split(abstract_model)
    flat = nnx.to_flat_state(state)
    for path, var in flat:
        var.set_value(arrays[".".join(str(p) for p in path)])
    return nnx.merge(graphdef, nnx.from_flat_state(flat))


def weight_files(path: str) -> list[str]:
    """The folder's weight files, as transformers picks them: model.safetensors, else the shards of
    model.safetensors.index.json, else every *.safetensors but a PEFT adapter's. FileNotFoundError
    when there are none, or the index names missing shards."""
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


def check_tied(head: tuple[str, str], embed: tuple[str, str]) -> None:
    """A tied checkpoint's stored lm_head (file, name) must equal its embedding (transformers ties them
    only then); ValueError naming both otherwise."""
    def read(file, name):
        with safe_open(file, framework="flax") as f:
            return f.get_tensor(name)

    if not bool(jnp.array_equal(read(*head), read(*embed))):
        raise ValueError(f"tensor {head[1]!r} in {head[0]} differs from {embed[1]!r}, but config.json ties "
                         "them (tie_word_embeddings: true): set it to false to use this head, or drop the "
                         "tensor")


def load_weights(path: str, abstract_model: nnx.Module, *, hf_to_path: Callable, path_to_hf: Callable,
                 to_ours: Callable, to_hf: Callable, dtype, mesh, tied: bool, layout: str) -> nnx.Module:
    """The model of `abstract_model`'s graph with every parameter read from HF folder `path`'s weight
    files (the family's key table, module doc), cast to `dtype` and placed on `mesh` (None: as read)
    tensor by tensor; model.hf_source records the folder and each tensor's stored dtype. `tied`: a
    stored lm_head is not loaded but must equal the embedding (`check_tied`). ValueError naming the
    tensor for an unreadable file, a tensor the model has no slot for (`layout`: the config's words for
    why, e.g. "num_hidden_layers=2"), a shape the config does not imply, or missing tensors."""
    slots = flat_state(abstract_model)
    shardings = param_shardings(abstract_model, mesh) if mesh is not None else {}
    filled: dict[str, jax.Array] = {}
    dtypes: dict[str, str] = {}
    where: dict[str, tuple[str, str]] = {}  # embed_tokens / a tied lm_head: (file, name), for check_tied
    for file in weight_files(path):
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
                if p == "embed_tokens" or (p == "lm_head" and tied):
                    where[p] = (file, name)
                    if p == "lm_head":
                        continue  # a tied checkpoint may store the head too: checked below, not loaded
                if p not in slots:
                    raise ValueError(f"tensor {name!r} in {file} maps to {p!r}, which this config "
                                     f"({layout}) does not have")
                x = to_ours(f.get_tensor(name), fn)
                want = slots[p].get_value().shape
                if tuple(x.shape) != tuple(want):
                    raise ValueError(f"tensor {name!r} in {file} has shape {tuple(to_hf(x, fn).shape)}; the "
                                     f"config implies {tuple(to_hf(np.empty(want, np.int8), fn).shape)}")
                dtypes[name] = str(x.dtype)
                x = x.astype(dtype)
                filled[p] = place(x, shardings[p]) if p in shardings else x
    missing = [path_to_hf(p)[0] for p in slots if p not in filled]
    if missing:
        raise ValueError(f"checkpoint {path!r} is missing tensors: {missing}")
    if "lm_head" in where:
        check_tied(where["lm_head"], where["embed_tokens"])
    model = fill(abstract_model, filled)
    model.hf_source = HFSource(os.path.abspath(path), tuple(sorted(dtypes.items())))
    return model


def save_folder(model: nnx.Module, out_dir: str, config: dict, tensors: Iterable[tuple[str, np.ndarray]],
                max_shard_bytes: int) -> None:
    """Writes `config` as out_dir/config.json and `tensors` ((HF name, array), consumed one at a time) as
    safetensors: model.safetensors, or model-0000i-of-0000n.safetensors shards of at most
    `max_shard_bytes` (a larger tensor alone) with model.safetensors.index.json. Weight files of an
    earlier export this one does not write (STALE_WEIGHTS: `model*.safetensors`, the index, an
    interrupted export's `_shard*.safetensors`) are removed, other files stay; the tokenizer files found
    next to the model's source checkpoint (model.hf_source) are copied."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    shards: list[list[str]] = []
    current: dict[str, np.ndarray] = {}
    size = total = 0

    def flush():
        nonlocal current, size
        if current:
            save_file({k: jnp.asarray(v) for k, v in current.items()},
                      os.path.join(out_dir, f"_shard{len(shards):05d}.safetensors"), metadata={"format": "pt"})
            shards.append(list(current))
            current, size = {}, 0

    for name, x in tensors:
        if current and size + x.nbytes > max_shard_bytes:
            flush()
        current[name] = x
        size, total = size + x.nbytes, total + x.nbytes
    flush()
    n = len(shards)
    finals = ["model.safetensors"] if n == 1 else [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
    for i, final in enumerate(finals):
        os.replace(os.path.join(out_dir, f"_shard{i:05d}.safetensors"), os.path.join(out_dir, final))
    written = set(finals)
    if n != 1:
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
