"""Everything a run is built from, before its first step, as one frozen record.

    run = build(config, workdir)      # mesh, tokenizer, policy, programs, engine, pools, credit, tasks
    trainer = Trainer(config, workdir)  # the loop over it (trainer.run is this record)

`build` reads the config top-down and builds in this order: the mesh and the process layout; the
tokenizer; the policy (model, LoRA split, runtime) and its initial train state; the update program;
the engine, its weight copy and the driver with the sampled and greedy rollouts; the env pools (then
the update compiled for every batch shape with train.precompile: the family's turn limit bounds the
policy tokens of a row); what the credit method needs (`Needs`: judge,
verification pool, critic) and the method itself; the step pipeline; the task iterator and splits;
the checkpoint managers. Nothing here runs a step or reads a checkpoint (the Trainer restores).
The pieces are the `build` module's functions of the config; this module only orders and records them.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any, Iterator

import grain
import jax
from absl import logging
from flax import nnx

from prover_jax import distributed as dist
from prover_jax.convert.orbax_io import MODEL_DIR
from prover_jax.credit import CreditMethod, Needs, RolloutVerifier, credit_class, make_credit
from prover_jax.credit.pipeline import StepPipeline
from prover_jax.envs.pool import EnvPool
from prover_jax.judges import make_judge, needs_env
from prover_jax.rollout import Rollout
from prover_jax.sampling import Driver, Engine, SamplingParams
from prover_jax.sharding import make_mesh
from prover_jax.training import build as pieces
from prover_jax.training import dynamic, evaluation, sft
from prover_jax.training.assemble import packed_micro_batches
from prover_jax.training.batch import padded_length, policy_widths
from prover_jax.training.checkpoints import Checkpoints
from prover_jax.training.loss import check_sampling
from prover_jax.training.optim import make_optimizer
from prover_jax.training.logprobs import LogprobPass
from prover_jax.training.step import TrainState, abstract_batch, init_train_state, proximal_pass
from prover_jax.training.workdir import workdir_path


@dataclasses.dataclass(frozen=True)
class Run:
    """The built pieces of a run. Attributes are never reassigned; the Trainer owns what changes
    (the train state, the task iterator's position, totals).

    root / workdir: the run folder (epath.Path / its text); primary: this process writes shared files.
    policy: how the trained params make the model (`build.Policy`); initial_state: the TrainState RL
    (or SFT) starts from; train_step: the jitted update; logprob_pass: the reference / proximal
    log-prob pass (`logprobs.LogprobPass`, None when the loss takes neither); group_lo / group_hi: this
    process's groups.
    sync: the train -> engine weight copy; rollout / greedy: sampled (rollout.temperature ...) and
    greedy episodes over `driver`; verify_pool: the credit method's continuations' envs (or None).
    tasks: the resumable grain iterator of task-seed batches; task_splits: train / eval task counts.
    """

    config: Any
    root: pathlib.Path
    primary: bool
    mesh: jax.sharding.Mesh
    tokenizer: Any
    policy: pieces.Policy
    initial_state: TrainState
    train_step: Any
    logprob_pass: LogprobPass | None
    engine: Engine
    sync: dist.WeightSync
    driver: Driver
    rollout: Rollout
    greedy: Rollout
    group_lo: int
    group_hi: int
    pool: EnvPool
    verify_pool: EnvPool | None
    needs: Needs
    judge: Any
    judge_server: Any
    credit: CreditMethod
    pipeline: StepPipeline
    tasks: Iterator
    task_splits: dict
    ckpts: Checkpoints
    ref_ckpts: Checkpoints | None

    @property
    def workdir(self) -> str:
        return str(self.root)

    @property
    def metrics_path(self):
        return self.root / "metrics.jsonl"

    @property
    def graphdef(self):
        """What the train step merges the trained params (and policy.frozen) into."""
        return self.policy.graphdef

    def close(self) -> None:
        """Stops the judge (and its server), the env pools and the checkpoint writers."""
        if self.judge is not None:
            self.judge.close()
        if self.judge_server is not None:
            self.judge_server.stop()
        self.pool.close()
        if self.verify_pool is not None:
            self.verify_pool.close()
        self.ckpts.close()
        if self.ref_ckpts is not None:
            self.ref_ckpts.close()


def check(config) -> None:
    """Config errors found before anything is built (each names its field)."""
    c = config
    if c.train.logits not in ("all", "policy"):
        raise ValueError(f"train.logits: unknown value {c.train.logits!r}; expected all or policy")
    if 0 < c.train.max_tokens_per_row < c.rollout.max_target_length:
        raise ValueError(f"train.max_tokens_per_row = {c.train.max_tokens_per_row} is below "
                         f"rollout.max_target_length = {c.rollout.max_target_length}: a packed row must hold the "
                         "longest episode (or set train.max_tokens_per_row = 0, one episode per row)")
    if int(c.rollout.off_policy_steps) not in (0, 1):
        raise ValueError(f"rollout.off_policy_steps must be 0 or 1, got {c.rollout.off_policy_steps}")
    # counts the loop divides by (checkpoint_every, ...) or keeps (keep_checkpoints = 0 deletes every checkpoint)
    for field, least in (("micro_batch_size", 1), ("length_multiple", 1), ("checkpoint_every", 1),
                         ("keep_checkpoints", 1), ("eval_every", 0)):
        if int(c.train[field]) < least:
            raise ValueError(f"train.{field} = {c.train[field]} must be >= {least}")
    sft.check_config(c.sft)
    make_optimizer(c.optim)  # optim.* errors now, not once the model is built
    check_sampling(c.rollout)
    dynamic.check_mode(c.rollout.dynamic_sampling, c.rollout.max_draws)
    evaluation.check_task_config(c)


def abstract(tree):
    """ShapeDtypeStructs of `tree`'s arrays, with their shardings (what compiles and restores read)."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)


def length_buckets(config) -> list[int]:
    """Every padded batch length a run can use: multiples of train.length_multiple, capped at
    rollout.max_target_length."""
    c = config
    return sorted({padded_length(n, c.train.length_multiple, c.rollout.max_target_length)
                   for n in range(1, c.rollout.max_target_length + 1, c.train.length_multiple)})


def precompile(config, mesh, train_step, state: TrainState, frozen, max_policy_tokens: int | None = None,
               logprob_pass: LogprobPass | None = None) -> None:
    """Compiles the update for every batch shape now, so no RL step waits on a compile: every
    length bucket, or with packed rows every micro-batch bucket (`assemble.packed_micro_batches`) at
    train.max_tokens_per_row; with the
    batch keys the trainer's batches carry (ref_logprobs with a KL term, prox_logprobs off-policy
    with loss.tis_cap), and with train.logits = policy each policy_at width (`batch.policy_widths`) of
    rows holding up to `max_policy_tokens` policy tokens (None: up to the row's length). The same
    shapes for `logprob_pass` on params laid out like the state's (not under LoRA: merged weights)."""
    c = config
    M = -(-c.rollout.groups_per_step * c.rollout.group_size // c.train.micro_batch_size)
    cap = c.train.max_tokens_per_row
    rows = [(m, cap) for m in packed_micro_batches(c)] if cap > 0 else [(M, L) for L in length_buckets(c)]
    shapes = [(m, L, P) for m, L in rows for P in
              (policy_widths(L, max_policy_tokens or L) if c.train.logits == "policy" else [0])]
    t0 = time.perf_counter()
    batches = [abstract_batch(mesh, m, c.train.micro_batch_size, L, kl=c.loss.kl_coef > 0, prox=proximal_pass(c),
                              packed=cap > 0, policy=P) for m, L, P in shapes]
    n = train_step.precompile(abstract(state), batches, frozen=frozen)
    if logprob_pass is not None and frozen is None:
        n += logprob_pass.precompile(abstract(state.params), batches)
    logging.info("compiled the update for %d batch shapes [M, L, P] %s in %.0f s", n, shapes, time.perf_counter() - t0)


def build(config, workdir: str) -> Run:
    """Builds every piece of a run (see the module docstring for the order)."""
    c = config
    check(c)
    root, primary = workdir_path(workdir), dist.is_primary()
    if primary:
        root.mkdir(parents=True, exist_ok=True)
    dist.check_layout(num_processes=dist.process_count(), num_devices=jax.device_count(),
                      mesh=pieces.mesh_shape(c), groups_per_step=c.rollout.groups_per_step)
    mesh = make_mesh(pieces.mesh_shape(c), devices=pieces.mesh_devices(c))

    # the policy and its update
    tokenizer = pieces.tokenizer(c, root, primary)
    model = pieces.model(c, mesh, tokenizer)  # built running per pieces.model_runtime
    policy, trainable = pieces.policy(c, mesh, model)
    if primary:
        pieces.write_model_dir(root / MODEL_DIR, model, tokenizer, policy.lora, c.model.path)
    optimizer = make_optimizer(c.optim)
    state = dist.globalize(init_train_state(model, optimizer, params=trainable), mesh)
    train_step = pieces.update_program(c, mesh, policy.graphdef, optimizer)
    logprob_pass = pieces.logprob_pass(c, policy.plain, mesh)

    # sampling: this host's engine decodes from a copy of the train weights
    r = c.rollout
    plain = policy.weights(state.params)
    engine, sync = pieces.engine(c, mesh, nnx.merge(policy.plain, plain), plain)
    driver = Driver(engine, params=sync(plain), eos_ids=pieces.eos_ids(c, model, tokenizer), tokenizer=tokenizer,
                    steps_per_call=r.decode_steps_per_call)
    # this process plays groups [lo, hi) of every step
    lo, hi = dist.share(r.groups_per_step)
    needs = credit_class(c.credit.method).needs(c.credit, groups=hi - lo, group_size=r.group_size)
    sampling = SamplingParams(temperature=r.temperature, top_k=r.top_k, top_p=r.top_p)
    rollout = Rollout(driver, tokenizer,
                      pieces.rollout_config(c, sampling, keep_contexts=needs.contexts, tokenizer=tokenizer))
    greedy = Rollout(driver, tokenizer, pieces.rollout_config(c, SamplingParams(), tokenizer=tokenizer))

    # envs and credit
    env_kw = pieces.env_kwargs(c)
    pool = EnvPool(c.env.name, (hi - lo) * r.group_size, env_kw, processes=c.env.processes)
    if needs.several_turns and (r.max_turns or pool.prompt.max_turns) < 2:
        pool.close()
        raise ValueError(f"credit.method={c.credit.method} credits parts of an episode between its turns; env "
                         f"{c.env.name!r} (env.name) plays one turn per episode: use grpo, budget_grpo or critic")
    if c.train.precompile:  # a row's policy tokens: its episodes' turns x max_action_tokens at most
        turns = r.max_turns or pool.prompt.max_turns
        precompile(c, mesh, train_step, state, policy.frozen, logprob_pass=logprob_pass,
                   max_policy_tokens=None if c.train.max_tokens_per_row > 0 else turns * r.max_action_tokens)
    if r.warmup:
        logging.info("compiled the sampler's shapes in %.0f s", driver.warmup(pool.prompt.stop_strings))
    verify_pool = (EnvPool(c.env.name, needs.verify_envs, env_kw, processes=c.env.processes)
                   if needs.verifier else None)
    judge_server = (pieces.serve_judge(c.judge, str(root))
                    if needs.judge and (c.judge.serve.model or c.judge.serve.size) else None)
    served = {"api_key": judge_server.api_key} if judge_server else {}  # its per-run key
    judge_env = {"env_name": c.env.name, "env_kwargs": env_kw} if needs.judge and needs_env(c.judge.name) else {}
    judge = make_judge(c.judge.name, c.judge, workdir=str(root), **served, **judge_env) if needs.judge else None
    deps = {"judge": judge, "verifier": RolloutVerifier(rollout, verify_pool) if verify_pool else None,
            "critic": _critic(c, env_kw, str(root)) if needs.critic else None}
    credit = make_credit(c.credit.method, c.credit, seed=c.seed, **{k: v for k, v in deps.items() if v is not None})
    pipeline = StepPipeline(rollout, pool, credit, verify_pool=verify_pool if c.credit.overlap else None,
                            judge_timeout_s=c.judge.timeout_s, judge_workers=c.judge.max_concurrency,
                            speculate=True)  # where the method allows it (OverlapCredit.speculates)

    # tasks: train seeds in a shuffled order, groups_per_step per step (resumable iterator);
    # evaluation plays eval-split tasks (negative seeds, see envs.base), never a train task
    task_splits = evaluation.task_splits(pool, c.env.name)
    seeds = grain.MapDataset.range(c.env.train_seed_start, c.env.train_seed_start + (c.env.train_tasks or 1_000_000))
    tasks = iter(seeds.shuffle(seed=c.seed).repeat().batch(r.groups_per_step))

    # checkpoints; the KL reference is checkpointed once, in W/reference (unless it is the LoRA base)
    base_is_ref = pieces.reference_is_base(c, lora=policy.lora is not None)
    ref_ckpts = Checkpoints(root / "reference", keep=1) if c.loss.kl_coef > 0 and not base_is_ref else None
    return Run(config=c, root=root, primary=primary, mesh=mesh, tokenizer=tokenizer, policy=policy,
               initial_state=state, train_step=train_step, logprob_pass=logprob_pass, engine=engine, sync=sync,
               driver=driver, rollout=rollout, greedy=greedy, group_lo=lo, group_hi=hi, pool=pool, verify_pool=verify_pool,
               needs=needs, judge=judge, judge_server=judge_server, credit=credit, pipeline=pipeline, tasks=tasks,
               task_splits=task_splits, ckpts=Checkpoints(root / "checkpoints", c.train.keep_checkpoints),
               ref_ckpts=ref_ckpts)


def _critic(config, env_kwargs: dict, workdir: str):
    from prover_jax.credit.critic import make_critic
    return make_critic(config.credit.critic, env_name=config.env.name, env_kwargs=env_kwargs, workdir=workdir)
