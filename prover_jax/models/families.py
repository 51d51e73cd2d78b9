"""The model-family table: one frozen `Family` record of entry points per family, found by name or by the
`model_type` of a checkpoint folder's config.json (HF folder or prover checkpoint alike).

    fam = family("qwen3_5")                      # ValueError naming the unknown and the known families
    fam = family_for("/ckpt")                    # by config.json's model_type
    fam = family_for(model.config)               # by the config's class
    fam, cfg = read_config("/ckpt")              # config.json read once
    net = load_hf("/ckpt", dtype=jnp.bfloat16)   # the folder's family's load_hf
    save_hf(net, "/out")                         # the model's family's save_hf
    fam.attention_flops_per_token(cfg, 2048)     # the cost model prover-aot and aot.gpu_memory read

A new family is its folder under models/ (built from models/common) plus one
`register_family(Family(...))`: nothing outside models/ names a family.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Mapping

import jax.numpy as jnp

from prover_jax.models import qwen3, qwen3_5
from prover_jax.models.hf_folder import config_json
from prover_jax.models.qwen3_5.config import MULTIMODAL_MODEL_TYPE, TEXT_MODEL_TYPE
from prover_jax.registry import Registry

DEFAULT_FAMILY = "qwen3_5"  # whose named sizes model.size picks for a randomly initialised policy


@dataclasses.dataclass(frozen=True, repr=False)
class Family:
    """A model family's entry points. Models are nnx Modules with `.config` (an instance of
    config_class) and `.runtime` (a runtime_class, static in the graph: how the uncached forward runs);
    model_class(cfg, *, rngs, dtype, param_dtype, mesh=None, runtime=None) builds one (runtime None: the
    runtime_class defaults). Models keep the trainer's and the engine's call contract
    (`sampling.model_api.DecodeModel`; `common.model.DecoderLM` implements it)."""

    name: str
    model_types: tuple[str, ...]  # config.json `model_type` values the family reads
    # .from_hf_dict(d), .to_hf_dict(), .eos_ids, .vocab_size, .hidden_size, .tie_word_embeddings,
    # .param_count(), .num_hidden_layers
    config_class: type
    configs: Mapping[str, Any]  # named sizes -> config_class instances
    model_class: type
    abstract_model: Callable  # (cfg, *, dtype, param_dtype, mesh=None, runtime=None) -> model of ShapeDtypeStructs
    shard_model: Callable  # (model, mesh) -> the model, params placed on mesh
    param_shardings: Callable  # (model or abstract model, mesh) -> {state path: NamedSharding}
    load_hf: Callable  # (path, dtype, mesh=None, compute_dtype=None, runtime=None) -> model
    save_hf: Callable  # (model, out_dir, dtype=None, max_shard_bytes=...) -> None
    path_to_hf: Callable  # (state path) -> (HF tensor name, transform): PEFT adapter names (models.lora)
    # (platform, *, scan_layers, remat, attention, gdn_chunk, gdn_matmul_dtype, cudnn, dtype, packed)
    # -> runtime_class, "auto" resolved for platform; settings the family has no use for are accepted
    resolve_runtime: Callable
    runtime_class: type
    lora_targets: tuple[str, ...]  # names of the Linear modules LoRA may adapt (model.lora.targets)
    # the cost model (prover-aot's model flops, aot.gpu_memory's estimate):
    attention_flops_per_token: Callable  # (cfg, context) -> forward flops / token of the mixers beyond projections
    full_attention_flops_per_token: Callable  # (cfg, context) -> the part of those the attention kernel runs
    mixer_activation_bytes: Callable  # (cfg, runtime) -> bytes / token / layer of the mixers in a remat block
    decode_state_bytes: Callable  # (cfg, *, slots, length) -> {name: bytes} of the decode cache

    def __repr__(self) -> str:
        return f"Family({self.name!r}, model_types={self.model_types})"

    def config(self, size: str):
        """The named size `size`; ValueError naming the known sizes."""
        if size not in self.configs:
            raise ValueError(f"model family {self.name!r} has no size {size!r}; known: {', '.join(self.configs)}")
        return self.configs[size]

    def read_config(self, path: str):
        """The config of checkpoint folder `path` (its config.json)."""
        return self.config_class.from_hf_dict(config_json(path))


FAMILIES: Registry[Family] = Registry("model family")


def register_family(fam: Family) -> Family:
    """Adds `fam` to the table; ValueError when another record holds its name or reads one of its
    model_types."""
    for other in known_families():
        shared = sorted(set(other.model_types) & set(fam.model_types))
        if other.name == fam.name and other != fam:
            raise ValueError(f"model family {fam.name!r} is registered already, with other entry points")
        if other.name != fam.name and shared:
            raise ValueError(f"model family {fam.name!r}: model_type {shared} is read by {other.name!r}")
    FAMILIES.add(fam.name, fam)
    return fam


def family(name: str) -> Family:
    """The family registered as `name`; ValueError naming it and the known families."""
    return FAMILIES.get(name)


def known_families() -> list[Family]:
    """The registered families, by name."""
    return [FAMILIES.get(n) for n in FAMILIES.names()]


def family_for(path_or_config) -> Family:
    """The family of a checkpoint folder (its config.json's model_type), of a config.json dict, or of a
    config instance (its class). FileNotFoundError without config.json; ValueError for a model_type or
    config class no family reads, naming the known ones."""
    if isinstance(path_or_config, (str, os.PathLike)):
        return _by_model_type(config_json(os.fspath(path_or_config)), f" in {os.fspath(path_or_config)}")
    if isinstance(path_or_config, Mapping):
        return _by_model_type(path_or_config, "")
    for fam in known_families():
        if type(path_or_config) is fam.config_class:
            return fam
    raise ValueError(f"no model family has config class {type(path_or_config).__qualname__}; known: "
                     + ", ".join(f"{f.name} ({f.config_class.__qualname__})" for f in known_families()))


def _by_model_type(d: Mapping, where: str) -> Family:
    model_type = d.get("model_type")
    for fam in known_families():
        if model_type in fam.model_types:
            return fam
    known = ", ".join(f"{f.name} (model_type {' / '.join(f.model_types)})" for f in known_families())
    raise ValueError(f"unknown model_type {model_type!r}{where}: no model family reads it; known: {known}")


def read_config(path: str) -> tuple[Family, Any]:
    """(family, config) of checkpoint folder `path`, by its config.json."""
    d = config_json(path)
    fam = _by_model_type(d, f" in {path}")
    return fam, fam.config_class.from_hf_dict(d)


def load_hf(path: str, dtype=jnp.float32, mesh=None, compute_dtype=None, runtime=None):
    """The model of HF folder `path` by its family's load_hf: params in `dtype`, computing in
    `compute_dtype` (None: dtype), placed on `mesh`, running per `runtime` (None: the family's default)."""
    return family_for(path).load_hf(path, dtype=dtype, mesh=mesh, compute_dtype=compute_dtype, runtime=runtime)


def save_hf(model, out_dir: str, **kw) -> None:
    """Writes `model` as an HF folder by its family's save_hf (kw: dtype, max_shard_bytes)."""
    family_for(model.config).save_hf(model, out_dir, **kw)


QWEN3_5 = register_family(Family(
    name="qwen3_5", model_types=(TEXT_MODEL_TYPE, MULTIMODAL_MODEL_TYPE),
    config_class=qwen3_5.Qwen3_5Config, configs=qwen3_5.CONFIGS, model_class=qwen3_5.Qwen3_5,
    abstract_model=qwen3_5.abstract_model, shard_model=qwen3_5.shard_model,
    param_shardings=qwen3_5.param_shardings, load_hf=qwen3_5.load_hf, save_hf=qwen3_5.save_hf,
    path_to_hf=qwen3_5.path_to_hf, resolve_runtime=qwen3_5.resolve_runtime, runtime_class=qwen3_5.Runtime,
    lora_targets=qwen3_5.LORA_TARGETS, attention_flops_per_token=qwen3_5.cost.attention_flops_per_token,
    full_attention_flops_per_token=qwen3_5.cost.full_attention_flops_per_token,
    mixer_activation_bytes=qwen3_5.cost.mixer_activation_bytes, decode_state_bytes=qwen3_5.cost.decode_state_bytes))

QWEN3 = register_family(Family(
    name="qwen3", model_types=(qwen3.MODEL_TYPE,), config_class=qwen3.Qwen3Config, configs=qwen3.CONFIGS,
    model_class=qwen3.Qwen3, abstract_model=qwen3.abstract_model, shard_model=qwen3.shard_model,
    param_shardings=qwen3.param_shardings, load_hf=qwen3.load_hf, save_hf=qwen3.save_hf,
    path_to_hf=qwen3.path_to_hf, resolve_runtime=qwen3.resolve_runtime, runtime_class=qwen3.Runtime,
    lora_targets=qwen3.LORA_TARGETS, attention_flops_per_token=qwen3.cost.attention_flops_per_token,
    full_attention_flops_per_token=qwen3.cost.full_attention_flops_per_token,
    mixer_activation_bytes=qwen3.cost.mixer_activation_bytes, decode_state_bytes=qwen3.cost.decode_state_bytes))
