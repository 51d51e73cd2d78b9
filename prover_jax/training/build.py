"""What a run is built from, before its first step: the mesh, the tokenizer, the policy, this host's
sampling engine and the judge served beside training. Functions of the config; the Trainer wires them.

    mesh = make_mesh(mesh_shape(c), devices=mesh_devices(c))
    tok = tokenizer(c, root, primary)            # the checkpoint's, or trained on the env's text
    net = model(c, mesh, tok)                     # random | hf | checkpoint, sharded over `mesh`
    eos = eos_ids(c, net, tok)                    # models.hf_folder.eos_ids of the policy folder
    pol, trainable = policy(c, mesh, net)         # LoRA (model.lora.rank > 0): adapters trained, base frozen
    eng, sync = engine(c, mesh, net, params)      # this host's engine + the train -> engine weight copy
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from flax import nnx

from prover_jax import distributed as dist
from prover_jax.models import Family, family, family_for, hf_folder, read_config
from prover_jax.rollout import RolloutConfig, env_corpus, load_tokenizer, train_tokenizer
from prover_jax.rollout.template import resolve as chat_layout
from prover_jax.sampling import Engine, SamplingParams
from prover_jax.sampling.loader import load_model
from prover_jax.training.logprobs import LogprobPass
from prover_jax.training.step import grpo_objective, make_train_step, proximal_pass
from prover_jax.training.workdir import local_copy, save_folder

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def architecture(config) -> tuple[Family, Any]:
    """(family, model config) of the policy: those of model.path's config.json when it has one (init hf |
    checkpoint), else the named size model.size of model family model.family. ValueError naming the
    known families, or the family's sizes."""
    m = config.model
    if m.init != "random" and m.path and os.path.isfile(os.path.join(m.path, "config.json")):
        return read_config(m.path)
    try:
        fam = family(m.family)
    except ValueError as e:
        raise ValueError(f"model.family: {e}") from None
    if m.size not in fam.configs:
        raise ValueError(f"model.size {m.size!r} is not a size of model family {fam.name!r} (model.family; "
                         f"sizes: {', '.join(fam.configs)}) and model.path {m.path!r} has no config.json: "
                         "cannot size the model")
    return fam, fam.configs[m.size]


def model_runtime(config, mesh=None, *, platform: str | None = None, cudnn: bool | None = None):
    """How the policy's uncached forward runs (model.scan_layers / attention / gdn_*, train.remat),
    "auto" resolved for `platform` (None: that of `mesh`'s devices, or without a mesh the default
    backend's; cudnn: whether a GPU has cuDNN, None: ask the backend), the compute dtype (model.dtype) and
    packing (train.max_tokens_per_row): a runtime of the policy's family."""
    m = config.model
    dtype = m.gdn_matmul_dtype
    platform = platform or (mesh.devices.flat[0].platform if mesh is not None else jax.default_backend())
    return architecture(config)[0].resolve_runtime(
        platform, scan_layers=m.scan_layers, remat=config.train.remat,
        attention=m.attention, gdn_chunk=m.gdn_chunk, gdn_matmul_dtype=None if dtype == "float32" else dtype,
        cudnn=cudnn, dtype=m.dtype, packed=config.train.max_tokens_per_row > 0)


def mesh_shape(config) -> tuple[int, int, int]:
    return (config.mesh.data, config.mesh.fsdp, config.mesh.tensor)


def mesh_devices(config) -> list:
    """All devices, or (one process) the first prod(mesh) of them when the mesh is fully specified
    and smaller (e.g. a one-device CPU demo on a host that exposes several)."""
    shape, devices = mesh_shape(config), jax.devices()
    if -1 not in shape and int(np.prod(shape)) < len(devices) and jax.process_count() == 1:
        logging.warning("mesh %s uses %d of %d devices", shape, int(np.prod(shape)), len(devices))
        return devices[:int(np.prod(shape))]
    return devices


def env_kwargs(config) -> dict:
    """config.env.kwargs as a plain dict (the pool's and the tokenizer corpus's env kwargs)."""
    kw = config.env.kwargs
    return dict(kw.to_dict() if hasattr(kw, "to_dict") else kw)


def rollout_config(config, sampling: SamplingParams, keep_contexts: bool = False, tokenizer=None) -> RolloutConfig:
    """keep_contexts: per-turn caches kept for continuations (`Needs.contexts`), within
    rollout.context_budget_mb; tokenizer: whose chat template rollout.chat_template=auto follows (None:
    ChatML, as for a tokenizer still to be trained)."""
    r = config.rollout
    return RolloutConfig(sampling=sampling, max_action_tokens=r.max_action_tokens,
                         max_turns=r.max_turns or None, seed=config.seed, system_prompt=r.system_prompt or None,
                         max_invalid=r.max_invalid_actions,
                         context_budget_mb=r.context_budget_mb if keep_contexts else 0.0,
                         template=chat_layout(r.chat_template, r.enable_thinking, tokenizer, r.observation_role))


def tokenizer(config, root, primary: bool):
    """The checkpoint's tokenizer, or one trained on the env's text by process 0 and saved in
    root/tokenizer (the other processes wait, then load it)."""
    c = config
    if c.model.init in ("hf", "checkpoint"):
        return load_tokenizer(c.model.path)
    path = root / "tokenizer"
    if primary and not (path / "tokenizer.json").exists():
        r = rollout_config(c, SamplingParams())
        corpus = env_corpus(c.env.name, range(c.tokenizer.corpus_seeds), env_kwargs(c),
                            system_prompt=r.system_prompt, max_turns=r.max_turns, template=r.template)
        tok = train_tokenizer(corpus, vocab_size=c.tokenizer.vocab_size, phrases=c.tokenizer.phrases)
        save_folder(tok.save_pretrained, path)
    dist.barrier("tokenizer")
    return load_tokenizer(local_copy(path))


def model(config, mesh, tok) -> nnx.Module:
    """The policy (model.init: random | hf | checkpoint) with its weights sharded over `mesh`, a model
    of the family its folder's config.json names (random: model.family), running per `model_runtime`."""
    c = config
    dtype, pdtype = DTYPES[c.model.dtype], DTYPES[c.model.param_dtype]
    if c.model.init not in ("random", "hf", "checkpoint"):
        raise ValueError(f"model.init must be random | hf | checkpoint, got {c.model.init!r}")
    runtime = model_runtime(c, mesh)
    if c.model.init in ("hf", "checkpoint"):  # the policy loader (sampling.loader), as prover-generate and
        # prover-serve: params in model.param_dtype, computing in model.dtype
        return load_model(c.model.path, pdtype, mesh=mesh, compute_dtype=dtype, runtime=runtime)
    fam, cfg = architecture(c)
    if len(tok) > cfg.vocab_size:
        raise ValueError(f"tokenizer has {len(tok)} tokens; model {c.model.size!r} only {cfg.vocab_size}")
    net = fam.model_class(cfg, rngs=nnx.Rngs(c.seed), dtype=dtype, param_dtype=pdtype, runtime=runtime)
    return fam.shard_model(net, mesh)


def update_program(config, mesh, graphdef, optimizer):
    """The run's jitted RL update (`step.make_train_step`): GRPO's objective from the loss section, the
    micro-batches, PPO epochs and mini-batches, log-prob chunks and the zero-gradient rule. The trainer
    (wiring) and prover-aot build it here, so what prover-aot measures is what training runs."""
    c = config
    return make_train_step(graphdef, grpo_objective(c.loss, c.rollout.max_target_length), optimizer, mesh=mesh,
                           logprob_chunk=c.train.logprob_chunk or None, epochs=c.train.ppo_epochs,
                           mini_batches=c.train.mini_batches, skip_zero_grad=c.optim.skip_zero_grad)


def logprob_pass(config, graphdef, mesh) -> LogprobPass | None:
    """The reference / proximal log-prob pass of a run (`logprobs.LogprobPass` on the plain policy's
    graphdef), None when its loss takes neither (`uses_logprob_pass`)."""
    if not uses_logprob_pass(config):
        return None
    return LogprobPass(graphdef, mesh, logprob_chunk=config.train.logprob_chunk or None)


def uses_logprob_pass(config) -> bool:
    """A run scores each batch before the update: under the reference policy (loss.kl_coef > 0) or the
    proximal one (`step.proximal_pass`)."""
    return config.loss.kl_coef > 0 or proximal_pass(config)


def reference_is_base(config, lora: bool) -> bool:
    """The KL reference is the frozen LoRA base itself, no second copy of the weights: LoRA without SFT
    (RL starts from the base). Otherwise the reference is the policy RL starts from, copied once."""
    return config.loss.kl_coef > 0 and lora and config.sft.steps == 0


def eos_ids(config, net, tok) -> tuple[int, ...]:
    """The ids the policy's responses end at: models.hf_folder.eos_ids of its config, tokenizer and (init
    hf | checkpoint) model.path's generation_config.json."""
    folder = config.model.path if config.model.init in ("hf", "checkpoint") else None
    return hf_folder.eos_ids(net.config, tok, folder)


@dataclasses.dataclass
class Policy:
    """How the trained weights make the policy. graphdef: what the train step merges the trained params
    (and `frozen`) into; frozen: the base weights under LoRA, else None; plain: the graphdef of the
    adapter-free model (sampler, reference, export); lora: the LoraSpec or None."""

    graphdef: Any
    plain: Any
    frozen: Any = None
    lora: Any = None
    merge: Callable | None = None

    def weights(self, params):
        """The plain model's params from the trained ones (LoRA: W + (alpha / r) A @ B, merged on device)."""
        return params if self.lora is None else self.merge(self.frozen, params)


def policy(config, mesh, net) -> tuple[Policy, Any]:
    """(Policy, the params to train: None = all of the model's, or the LoRA adapters)."""
    from prover_jax.models.lora import LoraSpec, apply_lora, merge_weights, split_lora

    spec = LoraSpec.from_config(config.model.lora)
    plain = nnx.graphdef(net)
    if spec is None:
        return Policy(graphdef=plain, plain=plain), None
    lm = apply_lora(net, spec, mesh, seed=config.seed)  # keeps net.runtime (qwix adapts a clone)
    graphdef, adapters, base = split_lora(lm)
    base = dist.globalize(base, mesh)
    shardings = jax.tree.map(lambda x: x.sharding, base)
    merge = jax.jit(lambda b, a: merge_weights(b, a, spec), out_shardings=shardings)
    return Policy(graphdef=graphdef, plain=plain, frozen=base, lora=spec, merge=merge), adapters


def write_model_dir(path, net, tok, lora=None, base_model: str = "") -> None:
    """path (W/model): config.json + tokenizer, so `prover-convert --ckpt=W` can export any checkpoint;
    for a policy loaded from a folder (net.hf_source) also its generation_config.json and source.json
    (the stored dtypes the export keeps, as `--export_hf` does); under LoRA also lora.json (model.lora
    and the base's path) for `prover-convert --out_peft`."""
    import shutil

    from prover_jax.convert.orbax_io import LORA_FILE, write_source

    src = getattr(net, "hf_source", None)

    def write(folder):
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(net.config.to_hf_dict(), f, indent=2)
        if lora is not None:
            with open(os.path.join(folder, LORA_FILE), "w") as f:
                json.dump({**lora.to_json(), "base_model": base_model}, f, indent=2)
        tok.save_pretrained(folder)
        if src is not None:
            write_source(folder, net)
            gen = os.path.join(src.path, hf_folder.GENERATION_CONFIG)
            if os.path.isfile(gen):
                shutil.copyfile(gen, os.path.join(folder, hf_folder.GENERATION_CONFIG))

    save_folder(write, path)


def engine(config, mesh, net, params) -> tuple[Engine, dist.WeightSync]:
    """This host's engine (the train mesh on one process, the local devices on several) and the
    copy of the train weights `params` it decodes from, in rollout.dtype (default: the model's compute
    dtype)."""
    c, r = config, config.rollout
    emesh = dist.engine_mesh(mesh, c.mesh.tensor)
    if r.dtype and r.dtype not in DTYPES:
        raise ValueError(f"rollout.dtype: unknown {r.dtype!r}; expected '' (the model's) or one of {sorted(DTYPES)}")
    compute = DTYPES[r.dtype or c.model.dtype]
    sync = dist.WeightSync(params, mesh, emesh, dtype=compute, tensor=c.mesh.tensor)
    if sync.identity:
        emodel = net
    else:
        abstract = family_for(net.config).abstract_model(net.config, dtype=compute, param_dtype=compute,
                                                         mesh=emesh)
        emodel = nnx.merge(nnx.graphdef(abstract), sync(params))
    eng = Engine(emodel, max_concurrent_decodes=r.max_concurrent_decodes, max_prefill_length=r.max_prefill_length,
                 max_target_length=r.max_target_length, mesh=emesh, row_buckets=tuple(r.row_buckets),
                 length_buckets=tuple(r.prefill_lengths))
    return eng, sync


def serve_judge(judge_section, workdir):
    """prover-serve for judge.serve.model on this host's devices (the `serve` extra installed)."""
    from prover_jax.serving.beside import LocalJudge

    return LocalJudge.start(judge_section, workdir)
