"""LoRA adapters on the policy, through qwix (pinned: README, dependencies).

    spec = LoraSpec(rank=8, alpha=16.0, targets=DEFAULT_TARGETS)
    lm = apply_lora(model, spec, mesh)                # adapters A [in, r] (he-uniform), B [r, out] = 0, fp32
    graphdef, adapters, base = split_lora(lm)         # nnx.LoRAParam state / the frozen base's nnx.Param state
    params = merge_weights(base, adapters, spec)      # a plain model's params: W + (alpha / r) A @ B
    tensors, config = peft_adapter(adapters, spec, base_model, path_to_hf=fam.path_to_hf)  # HF PEFT's files

qwix intercepts the `jnp.dot` of every `Linear` (models.common.layers) whose module path matches a
target name, inside the model's `hidden` (the method every forward goes through: the loss, the log-prob
pass, prefill and decode), and adds (x @ A) @ B * alpha / r. With B = 0 the model is the base model
exactly. The adapters are created by one cached forward (the uncached forward splits and merges each
layer, where created variables would be lost), then checked: one pair per matched module, or an error.
The sampler gets plain weights merged on device (`merge_weights`, jitted by the caller), so it
decodes at the base model's cost; PEFT's scaling is alpha / r too (no rsLoRA), lora_A = A^T [r, in],
lora_B = B^T [out, r]. Which names a family's Linears have, and their HF names, are its `Family` record's
(lora_targets, path_to_hf): nothing here names a family.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from prover_jax.models.common.layers import Linear
from prover_jax.models.families import family_for, known_families

# every projection of the attention layers, Qwen3.5's delta-rule layers and the MLP (not the embedding /
# head, nor the tiny GDN gates in_proj_b / in_proj_a); a name a family's model lacks adapts nothing there
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "out_proj",
                   "gate_proj", "up_proj", "down_proj")
A_SUFFIX, B_SUFFIX = "_lora_a", "_lora_b"


@dataclasses.dataclass(frozen=True)
class LoraSpec:
    rank: int
    alpha: float
    targets: tuple[str, ...] = DEFAULT_TARGETS
    dropout: float = 0.0

    @property
    def scale(self) -> float:
        return float(self.alpha) / int(self.rank)

    @classmethod
    def from_config(cls, section) -> "LoraSpec | None":
        """`model.lora` (rank 0: no LoRA)."""
        if int(section.rank) <= 0:
            return None
        targets = tuple(section.targets)
        known = known_targets()
        bad = [t for t in targets if t not in known]
        if bad or not targets:
            raise ValueError(f"model.lora.targets: unknown module names {bad}; choose from {', '.join(known)}")
        if float(section.dropout) != 0.0:  # qwix draws it from module rngs the jitted step does not carry:
            # the first step failed, and a mask kept in the frozen base would repeat every step
            raise ValueError(f"model.lora.dropout = {section.dropout}: adapter dropout is not supported; set it to 0")
        return cls(int(section.rank), float(section.alpha), targets, float(section.dropout))

    def to_json(self) -> dict:
        return {"rank": self.rank, "alpha": self.alpha, "targets": list(self.targets), "dropout": self.dropout}

    @classmethod
    def from_json(cls, d: dict) -> "LoraSpec":
        """The inverse of `to_json` (W/model/lora.json; extra keys ignored)."""
        return cls(int(d["rank"]), float(d["alpha"]), tuple(d["targets"]), float(d.get("dropout", 0.0)))


def known_targets() -> tuple[str, ...]:
    """Every name model.lora.targets may hold: the registered families' lora_targets, in order."""
    return tuple(dict.fromkeys(t for fam in known_families() for t in fam.lora_targets))


def _targeted(model, spec: LoraSpec) -> list[Linear]:
    """The Linear modules whose name is a target."""
    return [mod for path, mod in nnx.iter_graph(model)
            if isinstance(mod, Linear) and path and str(path[-1]) in spec.targets]


def apply_lora(model, spec: LoraSpec, mesh=None, seed: int = 0):
    """`model` (any family's) with qwix LoRA adapters on the target projections, adapters in fp32 with
    the base kernel's logical axes on their outer dims (A: (in, None), B: (None, out)), sharded over
    `mesh`. qwix works on a clone of the model (nnx.clone, a subclass of its class), so the result keeps
    the model's attributes, its runtime included. ValueError when no Linear of the model is a target."""
    import qwix

    want = _targeted(model, spec)
    fam = family_for(model.config)
    if not want:
        raise ValueError(f"model.lora.targets {list(spec.targets)} name no module of a {fam.name} model; its "
                         f"Linears: {', '.join(fam.lora_targets)}")
    provider = qwix.LoraProvider(module_path=r".*/(" + "|".join(map(re.escape, spec.targets)) + r")$",
                                 rank=spec.rank, alpha=spec.alpha, dropout=spec.dropout)
    tokens = jnp.zeros((1, 2), jnp.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lm = qwix.apply_lora_to_model(model, provider, tokens, methods=("hidden",), rngs=nnx.Rngs(seed),
                                      cache=model.init_cache(1, 3))
    got = 0
    for _, mod in nnx.iter_graph(lm):
        if isinstance(mod, Linear) and hasattr(mod, "kernel" + A_SUFFIX):
            axes = mod.kernel.get_metadata().get("axes", (None, None))
            a, b = getattr(mod, "kernel" + A_SUFFIX), getattr(mod, "kernel" + B_SUFFIX)
            a.set_value(a[...].astype(jnp.float32))
            b.set_value(b[...].astype(jnp.float32))
            a.set_metadata("axes", (axes[0], None))
            b.set_metadata("axes", (None, axes[1]))
            got += 1
    if got != len(want):
        raise RuntimeError(f"LoRA: {got} adapters created for {len(want)} target modules "
                           f"({', '.join(spec.targets)}); qwix did not intercept the model's projections")
    return fam.shard_model(lm, mesh) if mesh is not None else lm


def split_lora(lm) -> tuple[Any, nnx.State, nnx.State]:
    """(graphdef, adapters: the nnx.LoRAParam state, base: every other nnx.Param)."""
    return nnx.split(lm, nnx.LoRAParam, nnx.Param)


def _flat(adapters) -> dict[tuple[str, ...], Any]:
    """{path: array} of an adapter nnx.State, or of a {path: array} dict (a checkpoint's, read raw)."""
    if isinstance(adapters, dict):
        return {tuple(map(str, p)): v for p, v in adapters.items()}
    return {tuple(map(str, p)): v[...] for p, v in nnx.to_flat_state(adapters)}


def _pairs(adapters) -> dict[tuple, tuple[jax.Array, jax.Array]]:
    """{kernel path: (A [in, r], B [r, out])}."""
    flat = _flat(adapters)
    out = {}
    for p, v in flat.items():
        if p[-1].endswith(A_SUFFIX):
            stem = p[-1][:-len(A_SUFFIX)]
            out[p[:-1] + (stem,)] = (v, flat[p[:-1] + (stem + B_SUFFIX,)])
    return out


def merge_weights(base: nnx.State, adapters: nnx.State, spec: LoraSpec) -> nnx.State:
    """The base's Param state with W' = W + (alpha / r) A @ B on every adapted kernel (in fp32, cast
    to W's dtype): a plain model's params (jit it; shardings follow the base's)."""
    pairs = _pairs(adapters)
    flat = []
    for p, v in nnx.to_flat_state(base):
        key = tuple(map(str, p))
        if key in pairs:
            A, B = pairs[key]
            w = v[...]
            delta = spec.scale * (A.astype(jnp.float32) @ B.astype(jnp.float32))
            v = v.replace((w.astype(jnp.float32) + delta).astype(w.dtype))
        flat.append((p, v))
    return nnx.from_flat_state(flat)


def peft_adapter(adapters, spec: LoraSpec, base_model: str = "", *, path_to_hf
                 ) -> tuple[dict[str, np.ndarray], dict]:
    """HF PEFT's adapter_model tensors ({name: array}) and adapter_config (a dict) for `adapters` (an
    nnx.State, or a checkpoint's {path: array}) of a model whose family's `path_to_hf` (its `Family`
    record's) names its tensors. ValueError naming the adapter when its rank is not `spec.rank` (e.g. a
    lora.json that does not describe the checkpoint)."""
    tensors, modules = {}, set()
    for path, (A, B) in sorted(_pairs(adapters).items(), key=lambda kv: [str(x) for x in kv[0]]):
        if A.shape[-1] != spec.rank or B.shape[0] != spec.rank:
            raise ValueError(f"LoRA adapter {'.'.join(map(str, path))}{A_SUFFIX}/{B_SUFFIX} has rank "
                             f"{A.shape[-1]} (A {tuple(A.shape)}, B {tuple(B.shape)}), but the LoRA spec "
                             f"(lora.json) says rank {spec.rank}")
        hf_name, _ = path_to_hf(".".join(map(str, path)))
        stem = hf_name[:-len(".weight")]
        modules.add(stem.rsplit(".", 1)[-1])
        tensors[f"base_model.model.{stem}.lora_A.weight"] = np.ascontiguousarray(np.asarray(A, np.float32).T)
        tensors[f"base_model.model.{stem}.lora_B.weight"] = np.ascontiguousarray(np.asarray(B, np.float32).T)
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": spec.rank, "lora_alpha": spec.alpha,
              "lora_dropout": spec.dropout, "target_modules": sorted(modules), "bias": "none",
              "use_rslora": False, "fan_in_fan_out": False, "base_model_name_or_path": base_model}
    return tensors, config


def write_peft(folder: str, adapters, spec: LoraSpec, base_model: str = "", *, path_to_hf) -> None:
    """`folder`/adapter_model.safetensors + adapter_config.json (PeftModel.from_pretrained loads it);
    path_to_hf: the model family's (`peft_adapter`)."""
    import json
    import os

    from safetensors.numpy import save_file

    tensors, config = peft_adapter(adapters, spec, base_model, path_to_hf=path_to_hf)
    os.makedirs(folder, exist_ok=True)
    save_file(tensors, os.path.join(folder, "adapter_model.safetensors"))
    with open(os.path.join(folder, "adapter_config.json"), "w") as f:
        json.dump(config, f, indent=2)


def adapter_count(adapters) -> int:
    return len(_pairs(adapters))


def lora_param_count(cfg, spec: LoraSpec) -> int:
    """Adapter parameters of `spec` on a model of architecture `cfg` (any family's): rank x (in + out) per
    adapted kernel."""
    return sum(spec.rank * sum(mod.kernel.shape) for mod in _targeted(family_for(cfg).abstract_model(cfg), spec))
