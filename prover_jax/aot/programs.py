"""The programs a training run compiles, built from its config on abstract inputs (no arrays):

    progs = programs(config, devices, fns=("train_step", "generate", "prefill"))
    for p in progs: compiled = p.jitted.trace(*p.args).lower().compile()

train_step: the trainer's jitted update (its optimizer, loss, micro-batching, remat, shardings) on
    the largest batch a run builds (`train_batch`), on the config's (data, fsdp, tensor) mesh; with
    packed rows (train.max_tokens_per_row > 0), one program per micro-batch bucket the trainer pads a
    step to (`assemble.packed_micro_batches`), `bucket` naming its micro-batch count.
logprob: the reference / proximal log-prob pass (loss.kl_coef > 0, or loss.tis_cap > 0 off-policy)
    on that batch, in train.logprob_chunk chunks, under a second copy of the params (the reference,
    held for the whole run) or the policy's own.
generate: one decode step of the engine for all rollout.max_concurrent_decodes slots, on one host's
    devices (each host of a pod runs its own engine), weights in the compute dtype.
prefill: one batched prefill of PREFILL_ROWS prompts of rollout.max_prefill_length tokens.
judge_generate, judge_prefill: the same for the judge served beside training (config.judge.serve:
    its architecture, slots, lengths, dtype and tensor degree on one host's devices).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from prover_jax.models import DEFAULT_FAMILY, family_for
from prover_jax.sharding import make_mesh, tree_shardings
from prover_jax.training.build import DTYPES, logprob_pass, reference_is_base, update_program, uses_logprob_pass

FNS = ("train_step", "logprob", "generate", "prefill", "judge_generate", "judge_prefill")
JUDGE_FNS = ("judge_generate", "judge_prefill")
PREFILL_ROWS = 8  # one group's prompts (the driver admits a group at a time)


@dataclasses.dataclass
class Program:
    fn: str
    jitted: object  # a jax.jit object: .trace(*args).lower().compile()
    args: tuple  # ShapeDtypeStructs with shardings
    mesh: Mesh
    tokens: int  # tokens processed per call
    model_flops: float  # analytic 6 N T (4 N T with a frozen base: LoRA) (+ attention) for train, 2 N T
    # for inference (global)
    kernel_flops: float = 0.0  # analytic flops inside Pallas kernels (uncounted by the jaxpr walk)
    params_bytes: float = 0.0  # logprob: per chip, the params it scores under
    resident_bytes: float = 0.0  # logprob: per chip, what the run holds beside the train state (the reference)
    unread_bytes: float = 0.0  # generate: per chip, argument bytes a step does not read whole (an untied
    # embedding table, of which it gathers one row per slot)
    bucket: int = 0  # packed train_step: the micro-batches of its batch (0: unpacked)


def model_config(config):
    """The policy's architecture (training.build.architecture): config.json of model.path when readable,
    else the named size model.size."""
    from prover_jax.training.build import architecture
    return architecture(config)[1]


def matmul_params(cfg) -> int:
    """Weights that enter a matmul per token: all matrices but the embedding lookup (the lm_head
    counts, tied or not)."""
    abstract = family_for(cfg).abstract_model(cfg)
    _, params = nnx.split(abstract, nnx.Param)
    total = sum(math.prod(x.shape) for x in jax.tree.leaves(params) if len(x.shape) >= 2)
    if not cfg.tie_word_embeddings:
        total -= cfg.vocab_size * cfg.hidden_size  # the untied embedding is only looked up
    return total


def full_attention_flops_per_token(cfg, context: int) -> float:
    """Forward flops per token the attention kernel (runtime.attention splash | cudnn) runs over
    `context` keys on average: the family's cost model (`Family.full_attention_flops_per_token`)."""
    return family_for(cfg).full_attention_flops_per_token(cfg, context)


def attention_flops_per_token(cfg, context: int) -> float:
    """Forward flops per token of the sequence mixers beyond their projections (causal context of
    `context` tokens on average): the family's cost model (`Family.attention_flops_per_token`)."""
    return family_for(cfg).attention_flops_per_token(cfg, context)


def _with_shardings(abstract_tree, shardings_tree):
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                        abstract_tree, shardings_tree)


def abstract_params(cfg, mesh, *, dtype, param_dtype, runtime=None):
    """(graphdef, params as sharded ShapeDtypeStructs, abstract model) of the model on `mesh`, running
    per `runtime` (None: the family's default)."""
    fam = family_for(cfg)
    model = fam.abstract_model(cfg, dtype=dtype, param_dtype=param_dtype, mesh=mesh, runtime=runtime)
    graphdef, params = nnx.split(model, nnx.Param)
    return graphdef, _placed(params, fam.param_shardings(model, mesh)), model


def _placed(state, shardings: dict):
    """An abstract nnx.State with each leaf a ShapeDtypeStruct carrying its path's sharding."""
    flat = nnx.to_flat_state(state)
    for path, var in flat:
        v = var.get_value()
        var.set_value(jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=shardings[".".join(map(str, path))]))
    return nnx.from_flat_state(flat)


def _opt_state(optimizer, params, mesh):
    """The optimizer state of `params`, abstract: param-shaped subtrees sharded like the params,
    the rest (counters, hyperparameters) replicated."""
    abstract = jax.eval_shape(optimizer.init, params)
    pstruct = jax.tree.structure(params)
    replicated = NamedSharding(mesh, P())

    def is_param_tree(x):
        try:
            return jax.tree.structure(x) == pstruct
        except Exception:  # noqa: BLE001
            return False

    def place(sub):
        if is_param_tree(sub):
            return _with_shardings(sub, jax.tree.map(lambda p: p.sharding, params))
        return jax.ShapeDtypeStruct(sub.shape, sub.dtype, sharding=replicated)

    return jax.tree.map(place, abstract, is_leaf=is_param_tree)


def train_batch(config, mesh: Mesh, micro_batches: int = 0) -> dict:
    """The largest train batch a run of `config` builds, abstract: one episode per row
    (rollout.groups_per_step x group_size rows; packing only lowers the row count), or with
    `micro_batches` > 0 that many micro-batches (a packed bucket); L = train.max_tokens_per_row when
    packing, else rollout.max_target_length (the longest bucket); with train.logits = "policy",
    policy_at of P = L positions (the bound the trainer pads to)."""
    from prover_jax.training.step import abstract_batch, proximal_pass
    c = config
    rows = c.rollout.groups_per_step * c.rollout.group_size
    mb = c.train.micro_batch_size
    if rows % mb:
        raise ValueError(f"train.micro_batch_size {mb} does not divide the {rows} sequences of a step "
                         f"(rollout.groups_per_step x group_size)")
    cap = c.train.max_tokens_per_row
    L = cap if cap > 0 else c.rollout.max_target_length
    return abstract_batch(mesh, micro_batches or rows // mb, mb, L, kl=c.loss.kl_coef > 0,
                          prox=proximal_pass(c), packed=cap > 0,
                          policy=L if c.train.logits == "policy" else 0)


def _policy_params(config, mesh: Mesh):
    from prover_jax.training.build import model_runtime
    c = config
    runtime = model_runtime(c, mesh)
    graphdef, params, _ = abstract_params(model_config(c), mesh, dtype=DTYPES[c.model.dtype],
                                          param_dtype=DTYPES[c.model.param_dtype], runtime=runtime)
    return graphdef, params, runtime


def lora_params(config, mesh: Mesh):
    """Under model.lora: (graphdef, adapters, frozen base) of the adapted policy as sharded
    ShapeDtypeStructs (qwix's init forward traced, no arrays), else None."""
    from prover_jax.models.lora import LoraSpec, apply_lora, split_lora
    from prover_jax.training.build import model_runtime

    c = config
    spec = LoraSpec.from_config(c.model.lora)
    if spec is None:
        return None
    cfg = model_config(c)
    fam = family_for(cfg)
    runtime = model_runtime(c, mesh)  # apply_lora keeps it (qwix adapts a clone)
    model = nnx.eval_shape(lambda: apply_lora(fam.model_class(
        cfg, rngs=nnx.Rngs(0), dtype=DTYPES[c.model.dtype], param_dtype=DTYPES[c.model.param_dtype], mesh=mesh,
        runtime=runtime), spec))
    shardings = fam.param_shardings(model, mesh)
    graphdef, adapters, base = split_lora(model)
    return graphdef, _placed(adapters, shardings), _placed(base, shardings)


def per_chip_bytes(tree) -> float:
    """Bytes one chip holds of a tree of sharded ShapeDtypeStructs."""
    return float(sum(math.prod(x.sharding.shard_shape(x.shape)) * jnp.dtype(x.dtype).itemsize
                     for x in jax.tree.leaves(tree)))


def train_program(config, mesh: Mesh, micro_batches: int = 0) -> Program:
    """The update on `train_batch(config, mesh, micro_batches)`."""
    from prover_jax.training.optim import make_optimizer
    from prover_jax.training.step import TrainState

    c = config
    cfg = model_config(c)
    graphdef, params, runtime = _policy_params(c, mesh)
    frozen = None
    lora = lora_params(c, mesh)
    if lora is not None:  # the adapters are trained; the base is the step's frozen input
        graphdef, params, frozen = lora
    optimizer = make_optimizer(c.optim)
    replicated = NamedSharding(mesh, P())
    state = TrainState(params=params, opt_state=_opt_state(optimizer, params, mesh),
                       step=jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated))
    batch = train_batch(c, mesh, micro_batches)
    M, mb, L = batch["tokens"].shape
    step = update_program(c, mesh, graphdef, optimizer)  # the trainer's own (training.build)
    tokens = M * mb * L
    # forward 2N, backward 2N for the activations' gradients and 2N for the weights' (none for a frozen
    # base: LoRA's adapters are a rounding error); attention forward + backward 3x
    per_token = (6.0 if frozen is None else 4.0) * matmul_params(cfg) + 3.0 * attention_flops_per_token(cfg, L // 2)
    kernel = 0.0
    if runtime.attention in ("splash", "cudnn"):  # kernels: forward, backward (2x), the remat's forward again
        kernel = (3.0 + (runtime.remat != "none")) * full_attention_flops_per_token(cfg, L // 2) * tokens
    passes = c.train.ppo_epochs  # every epoch is one forward + backward over the batch
    args = (state, batch) if frozen is None else (state, batch, frozen)
    return Program("train_step", step.jitted(*args), args, mesh, tokens, per_token * tokens * passes,
                   kernel * passes, bucket=micro_batches)


def train_programs(config, mesh: Mesh) -> list[Program]:
    """The update as a run compiles it: once per packed micro-batch bucket (ascending) with
    train.max_tokens_per_row > 0, else once on the largest batch."""
    from prover_jax.training.assemble import packed_micro_batches
    if config.train.max_tokens_per_row <= 0:
        return [train_program(config, mesh)]
    return [train_program(config, mesh, m) for m in packed_micro_batches(config)]


def logprob_program(config, mesh: Mesh) -> Program:
    """The trainer's log-prob pass (training.build.logprob_pass) on `train_batch`'s rows."""

    c = config
    cfg = model_config(c)
    graphdef, params, runtime = _policy_params(c, mesh)
    pass_ = logprob_pass(c, graphdef, mesh)
    rows = pass_.rows(train_batch(c, mesh))
    M, mb, L = rows["tokens"].shape
    fn = pass_.program(rows)
    tokens = M * mb * L
    per_token = 2.0 * matmul_params(cfg) + attention_flops_per_token(cfg, L // 2)
    kernel = 0.0
    if runtime.attention in ("splash", "cudnn"):
        kernel = full_attention_flops_per_token(cfg, L // 2) * tokens
    params_bytes = per_chip_bytes(params)
    # the reference is a second copy of the policy, except where it is the frozen LoRA base itself
    second_copy = c.loss.kl_coef > 0 and not reference_is_base(c, lora=c.model.lora.rank > 0)
    return Program("logprob", fn, (params, rows), mesh, tokens, per_token * tokens, kernel,
                   params_bytes=params_bytes, resident_bytes=params_bytes if second_copy else 0.0)


def host_mesh(mesh: Mesh, tensor: int) -> Mesh:
    """The engine mesh of the first host of `mesh` (as the trainer builds it on that host)."""
    from prover_jax.distributed.arrays import engine_mesh
    return engine_mesh(mesh, tensor, devices=[mesh.devices.flat[0]])


def _under(tree, name: str) -> list:
    """The leaves of `tree` under a key `name`."""
    return [x for path, x in jax.tree_util.tree_flatten_with_path(tree)[0] if any(name in str(k) for k in path)]


def engine_programs(config, mesh: Mesh, fns) -> list[Program]:
    from prover_jax.sampling import Engine

    c, r = config, config.rollout
    cfg = model_config(c)
    emesh = host_mesh(mesh, c.mesh.tensor)
    compute = DTYPES[c.model.dtype]
    _, params, model = abstract_params(cfg, emesh, dtype=compute, param_dtype=compute)
    engine = Engine(model, max_concurrent_decodes=r.max_concurrent_decodes,
                    max_prefill_length=r.max_prefill_length, max_target_length=r.max_target_length,
                    mesh=emesh)
    out = []
    per_token = 2.0 * matmul_params(cfg)
    if "generate" in fns:
        programs = engine._programs
        state = _with_shardings(jax.eval_shape(programs.init_fn), programs.state_shardings)
        S = r.max_concurrent_decodes
        flops = S * (per_token + attention_flops_per_token(cfg, r.max_target_length // 2))
        rep = NamedSharding(emesh, P())
        table = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=rep), engine.no_stops)
        allowed = jax.ShapeDtypeStruct((S, engine.mask_words), jnp.int32, sharding=rep)  # token bitmasks
        # an untied embedding table: the step gathers one row per slot of it
        unread = 0.0 if cfg.tie_word_embeddings else per_chip_bytes(_under(params, "embed_tokens"))
        out.append(Program("generate", engine._generate, (params, state, table, 1, allowed), emesh, S, flops,
                           unread_bytes=unread))
    if "prefill" in fns:
        R, T = PREFILL_ROWS, r.max_prefill_length
        abstract = jax.eval_shape(lambda: model.init_cache(R, r.max_target_length, compute))  # DecodeModel
        cache = _with_shardings(abstract, tree_shardings(
            model.cache_axes(emesh.shape.get("tensor", 1)), abstract, emesh))
        rep = NamedSharding(emesh, P())
        sds = lambda shape, dt: jax.ShapeDtypeStruct(shape, dt, sharding=rep)  # noqa: E731
        args = (params, cache, sds((R, T), jnp.int32), sds((R,), jnp.int32), sds((R,), jnp.int32),
                sds((R,), jnp.int32), sds((R, 2), jnp.uint32), sds((R,), jnp.float32),
                sds((R,), jnp.int32), sds((R,), jnp.float32), sds((R, engine.mask_words), jnp.int32))
        lm_head = 2.0 * cfg.vocab_size * cfg.hidden_size  # logits of the last prompt token only
        flops = R * T * (per_token - lm_head + attention_flops_per_token(cfg, T // 2)) + R * lm_head
        out.append(Program("prefill", engine._prefill, args, emesh, R * T, flops))
    return out


def serves_judge(config) -> bool:
    s = config.judge.serve
    return bool(s.model or s.size)


def default_fns(config) -> tuple[str, ...]:
    """The programs a run of `config` compiles: the log-prob pass when it uses one, the judge's when
    it is served beside training."""
    skip = (() if serves_judge(config) else JUDGE_FNS) + (() if uses_logprob_pass(config) else ("logprob",))
    return tuple(f for f in FNS if f not in skip)


def judge_as_policy(config, host_devices: int):
    """A copy of `config` whose model and rollout engine are the served judge's (judge.serve), so
    the judge's engine programs are built as the policy's are."""
    s, c = config.judge.serve, config.copy_and_resolve_references()
    c.model.init, c.model.path, c.model.size = ("hf" if s.model else "random"), s.model, s.size
    c.model.family = DEFAULT_FAMILY  # judge.serve.size names a size of the default family
    c.model.dtype = s.dtype
    c.rollout.max_concurrent_decodes = s.max_concurrent_decodes
    c.rollout.max_prefill_length = min(s.max_prefill_length, s.max_target_length)
    c.rollout.max_target_length = s.max_target_length
    c.mesh.tensor = s.tensor or host_devices  # 0: every device of the host
    return c


def programs(config, devices, fns=None) -> list[Program]:
    """The config's programs for `devices` (a TPU slice's); the mesh must use all of them."""
    fns = default_fns(config) if fns is None else tuple(fns)
    unknown = sorted(set(fns) - set(FNS))
    if unknown:
        raise ValueError(f"unknown --fn {unknown}; expected some of {FNS}")
    if set(fns) & set(JUDGE_FNS) and not serves_judge(config):
        raise ValueError(f"--fn {sorted(set(fns) & set(JUDGE_FNS))}: the config serves no judge "
                         f"(set judge.serve.model or judge.serve.size)")
    if "logprob" in fns and not uses_logprob_pass(config):
        raise ValueError("--fn logprob: a run of this config has no log-prob pass (set loss.kl_coef > 0, or "
                         "rollout.off_policy_steps = 1 with loss.tis_cap > 0)")
    shape = (config.mesh.data, config.mesh.fsdp, config.mesh.tensor)
    fixed = math.prod(s for s in shape if s != -1)
    if (-1 in shape and len(devices) % fixed) or (-1 not in shape and fixed != len(devices)):
        raise ValueError(f"mesh (data, fsdp, tensor) = {shape} does not fit the slice's {len(devices)} "
                         f"chips: set config.mesh so that data * fsdp * tensor = {len(devices)}")
    mesh = make_mesh(shape, devices=devices)
    out = train_programs(config, mesh) if "train_step" in fns else []
    out += [logprob_program(config, mesh)] if "logprob" in fns else []
    out += engine_programs(config, mesh, fns)
    judge = [f[len("judge_"):] for f in fns if f in JUDGE_FNS]
    if judge:
        host = sum(d.process_index == devices[0].process_index for d in devices)
        for prog in engine_programs(judge_as_policy(config, host), mesh, judge):
            out.append(dataclasses.replace(prog, fn=f"judge_{prog.fn}"))
    return out
