"""The RL trainer: tasks -> rollouts -> propose/verify -> credit -> update -> checkpoint.

    trainer = Trainer(config, workdir)       # workdir: a local folder, file://... or gs://...
    trainer.run()            # SFT warm start (optional), then config.train.steps RL steps; resumable

One step: the grain task iterator yields `groups_per_step` task seeds (the same on every process);
each process plays its contiguous share of the groups, `group_size` times each, on its own env pool
and its own engine (local devices); its credit method (ProVer: judge + verification continuations)
turns its groups into per-token advantages; the sequences of all processes form ONE global batch
and one jitted `train_step` updates the weights on the global mesh; the new weights are copied onto
every host's engine (no recompilation). Episode names (uids), hence every sampling seed, derive from
the number of task batches drawn and the episode's global index, so a resumed run, or the same run on
another number of hosts, plays the same tasks with the same seeds.

Every `checkpoint_every` steps an orbax checkpoint (asynchronous; every process writes its shards)
stores the train state, the task iterator position, the batch counter and the SFT flag; re-running
the same command restores it and continues with the batch that would have come next.

W/metrics.jsonl has one JSON object per optimizer step (`step` counts completed updates from 1),
merged over processes and written by process 0 only. An update whose loss or gradient is not finite
is skipped (weights and optimizer untouched) and logged with "applied": false under the step number
it would have had; the next batch tries again, and MAX_SKIPS_IN_A_ROW skips in a row stop the run.
"""

from __future__ import annotations

import json
import time
from typing import Any

import grain
import jax
import jax.numpy as jnp
from absl import logging
from flax import nnx

from prover_jax import distributed as dist
from prover_jax.convert.orbax_io import MODEL_DIR
from prover_jax.credit import COMMON_METRICS, RolloutVerifier, credit_class, make_credit
from prover_jax.credit.pipeline import StepPipeline
from prover_jax.envs.pool import EnvPool
from prover_jax.judges import make_judge
from prover_jax.models import qwen3_5
from prover_jax.rollout import Rollout, RolloutConfig
from prover_jax.sampling import Driver, SamplingParams
from prover_jax.sharding import make_mesh
from prover_jax.training import build, evaluation, sft
from prover_jax.training.build import mesh_devices, mesh_shape, model_runtime
from prover_jax.training import assemble, dynamic
from prover_jax.training.batch import padded_length
from prover_jax.training.loss import check_sampling
from prover_jax.training.checkpoints import Checkpoints
from prover_jax.training.metrics import CompileCounter, episode_metrics, merge_rows
from prover_jax.training.optim import make_optimizer, with_configured_hyperparams
from prover_jax.training.step import abstract_batch, grpo_objective, init_train_state, make_train_step
from prover_jax.training.workdir import append_line, read_lines, save_folder, workdir_path

MAX_SKIPS_IN_A_ROW = 5
# cumulative over the run, in every row as total/<name> and in checkpoints
SPENDING = ("policy_tokens", "credit/extra_policy_tokens", "judge/calls", "judge/cost_usd", "critic/calls",
            "critic/cost_usd")


class Trainer:
    def __init__(self, config, workdir: str):
        c = self.config = config
        self.root = workdir_path(workdir)
        self.workdir = str(self.root)
        self.primary = dist.is_primary()
        if self.primary:
            self.root.mkdir(parents=True, exist_ok=True)
        dist.check_layout(num_processes=dist.process_count(), num_devices=jax.device_count(),
                          mesh=mesh_shape(c), groups_per_step=c.rollout.groups_per_step)
        self.mesh = make_mesh(mesh_shape(c), devices=mesh_devices(c))
        self.tokenizer = build.tokenizer(c, self.root, self.primary)
        model = build.model(c, self.mesh, self.tokenizer)
        model.runtime = model_runtime(c, self.mesh)
        self.policy, trainable = build.policy(c, self.mesh, model)
        if self.primary:
            build.write_model_dir(self.root / MODEL_DIR, model, self.tokenizer, self.policy.lora, c.model.path)
        self.graphdef = self.policy.graphdef
        self.optimizer = make_optimizer(c.optim)
        self.state = dist.globalize(init_train_state(model, self.optimizer, params=trainable), self.mesh)
        self.train_step = make_train_step(self.graphdef, grpo_objective(c.loss), self.optimizer, mesh=self.mesh,
                                          logprob_chunk=c.train.logprob_chunk or None, epochs=c.train.ppo_epochs,
                                          mini_batches=c.train.mini_batches)
        # the KL reference is the policy RL starts from (after SFT), taken at the first RL step and
        # checkpointed once in W/reference, so a resumed run keeps the same reference; under LoRA
        # without SFT it is the frozen base itself (no copy)
        base_is_ref = self.policy.lora is not None and c.sft.steps == 0
        self.ref_params = self.policy.frozen if base_is_ref and c.loss.kl_coef > 0 else None
        self.ref_ckpts = (Checkpoints(self.root / "reference", keep=1) if c.loss.kl_coef > 0 and not base_is_ref
                          else None)
        if c.train.logits not in ("all", "policy"):
            raise ValueError(f"train.logits: unknown value {c.train.logits!r}; expected all or policy")
        if 0 < c.train.max_tokens_per_row < c.rollout.max_target_length:
            raise ValueError(f"train.max_tokens_per_row = {c.train.max_tokens_per_row} is below "
                             f"rollout.max_target_length = {c.rollout.max_target_length}: a packed row must hold the "
                             "longest episode (or set train.max_tokens_per_row = 0, one episode per row)")
        if c.train.precompile:
            self._precompile()

        r = c.rollout
        check_sampling(r)
        plain = self.policy.weights(self.state.params)
        self.engine, self.sync = build.engine(c, self.mesh, nnx.merge(self.policy.plain, plain), plain)
        eos = set(model.config.eos_ids) | {self.tokenizer.convert_tokens_to_ids(c_) for c_ in ("<|im_end|>",)
                                          if c_ in self.tokenizer.get_vocab()}
        self.driver = Driver(self.engine, params=self.sync(plain), eos_ids=sorted(eos),
                             tokenizer=self.tokenizer, steps_per_call=r.decode_steps_per_call)
        sampling = SamplingParams(temperature=r.temperature, top_k=r.top_k, top_p=r.top_p)
        self.rollout = Rollout(self.driver, self.tokenizer, self.rollout_config(sampling))
        self.greedy = Rollout(self.driver, self.tokenizer, self.rollout_config(SamplingParams()))
        self.group_lo, self.group_hi = dist.share(r.groups_per_step)
        local_groups = self.group_hi - self.group_lo
        n_train = local_groups * r.group_size
        env_kw = self.env_kwargs()
        self.pool = EnvPool(c.env.name, n_train, env_kw, processes=c.env.processes)
        if r.warmup:
            logging.info("compiled the sampler's shapes in %.0f s", self.driver.warmup(self.pool.prompt.stop_strings))
        dynamic.check_mode(r.dynamic_sampling, r.max_draws)
        self.needs = credit_class(c.credit.method).needs(c.credit, groups=local_groups, group_size=r.group_size)
        self.verify_pool = (EnvPool(c.env.name, self.needs.verify_envs, env_kw, processes=c.env.processes)
                            if self.needs.verifier else None)
        self.judge_server = (build.serve_judge(c.judge, self.workdir)
                             if self.needs.judge and (c.judge.serve.model or c.judge.serve.size) else None)
        served = {"api_key": self.judge_server.api_key} if self.judge_server else {}  # its per-run key
        self.judge = make_judge(c.judge.name, c.judge, workdir=self.workdir, **served) if self.needs.judge else None
        deps = {"judge": self.judge,
                "verifier": RolloutVerifier(self.rollout, self.verify_pool) if self.verify_pool else None,
                "critic": self._critic() if self.needs.critic else None}
        self.credit = make_credit(c.credit.method, c.credit, seed=c.seed,
                                  **{k: v for k, v in deps.items() if v is not None})
        self.pipeline = StepPipeline(self.rollout, self.pool, self.credit,
                                     verify_pool=self.verify_pool if c.credit.overlap else None,
                                     judge_timeout_s=c.judge.timeout_s, judge_workers=c.judge.max_concurrency,
                                     speculate=c.credit.prover.speculate)

        # tasks: train seeds in a shuffled order, groups_per_step per step (resumable iterator);
        # evaluation plays eval-split tasks (negative seeds, see envs.base), never a train task.
        evaluation.check_task_config(c)
        self.task_splits = self._task_splits()
        tasks = grain.MapDataset.range(c.env.train_seed_start,
                                       c.env.train_seed_start + (c.env.train_tasks or 1_000_000))
        self.tasks = iter(tasks.shuffle(seed=c.seed).repeat().batch(r.groups_per_step))
        self.batches_drawn = 0  # task batches taken from the iterator: the base of episode uids
        self.off_policy = int(r.off_policy_steps)
        if self.off_policy not in (0, 1):
            raise ValueError(f"rollout.off_policy_steps must be 0 or 1, got {r.off_policy_steps}")
        self._prefetched = None  # off-policy: the next step's batch, played during this update
        self._tasks_before = None
        self.sft_done = c.sft.steps == 0
        self.skipped_in_a_row = 0
        self.metrics_path = self.root / "metrics.jsonl"
        self.ckpts = Checkpoints(self.root / "checkpoints", c.train.keep_checkpoints)
        # what the run has spent, over every step ever played (a step lost to a restart included)
        self.totals = dict.fromkeys(SPENDING, 0.0)
        self.restored = self._restore()
        self.compiles = CompileCounter()

    # Set-up.
    def length_buckets(self) -> list[int]:
        """Every padded batch length a run can use: multiples of train.length_multiple, capped at
        rollout.max_target_length."""
        c = self.config
        return sorted({padded_length(n, c.train.length_multiple, c.rollout.max_target_length)
                       for n in range(1, c.rollout.max_target_length + 1, c.train.length_multiple)})

    def _precompile(self) -> None:
        """Compiles the update for every batch shape now, so no RL step waits on a compile: every
        length bucket, or with packed rows every micro-batch count at train.max_tokens_per_row."""
        c = self.config
        M = -(-c.rollout.groups_per_step * c.rollout.group_size // c.train.micro_batch_size)
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                                self.state)
        cap = c.train.max_tokens_per_row
        shapes = ([(m, cap) for m in range(1, M + 1)] if cap > 0 else [(M, L) for L in self.length_buckets()])
        t0 = time.perf_counter()
        n = self.train_step.precompile(abstract, [abstract_batch(self.mesh, m, c.train.micro_batch_size, L,
                                                                 kl=c.loss.kl_coef > 0, packed=cap > 0)
                                                  for m, L in shapes], frozen=self.policy.frozen)
        logging.info("compiled the update for %d batch shapes [M, L] %s in %.0f s", n, shapes,
                     time.perf_counter() - t0)

    def _critic(self):
        from prover_jax.credit.critic import make_critic
        c = self.config
        return make_critic(c.credit.critic, env_name=c.env.name, env_kwargs=self.env_kwargs(), workdir=self.workdir)

    def env_kwargs(self) -> dict:
        return build.env_kwargs(self.config)

    def rollout_config(self, sampling: SamplingParams) -> RolloutConfig:
        return build.rollout_config(self.config, sampling)

    # Checkpoints.
    def _meta(self) -> dict:
        tasks, drawn = self.tasks.get_state(), self.batches_drawn
        if self._prefetched is not None:  # a resumed run plays the prefetched batch again
            tasks, drawn = self._tasks_before
        return {"tasks": tasks, "sft_done": self.sft_done, "step": self.step, "batches_drawn": drawn,
                "totals": self.totals}

    def save(self) -> None:
        """Starts an asynchronous save of this step (the previous save is finished first)."""
        self.ckpts.save(self.step, self.state, self._meta())

    def _restore(self) -> bool:
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                                self.state)
        found = self.ckpts.restore(abstract, on_corrupt=self.config.train.on_corrupt_checkpoint)
        if found is None:
            return False
        self.state, meta, step = found
        self._configured_hyperparams()
        self.tasks.set_state(meta["tasks"])
        self.sft_done = meta["sft_done"]
        self.batches_drawn = int(meta.get("batches_drawn", meta.get("step", step)))
        self.totals.update(meta.get("totals", {}))
        self.driver.update_params(self.sync(self.policy.weights(self.state.params)))
        if self.ref_ckpts is not None and self.ref_ckpts.manager.latest_step() is not None:
            abstract_params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                                           self.policy.weights(self.state.params))
            self.ref_params = self.ref_ckpts.restore(abstract_params, on_corrupt="error")[0]
        # metrics of steps after the checkpoint were not kept in the state: drop them (what those
        # steps spent, judge calls and sampled tokens, stays in the totals)
        lines = read_lines(self.metrics_path) if self.metrics_path.exists() else []
        rows = [json.loads(line) for line in lines]
        for row in rows:
            if row.get("step", 0) > step and "success_rate" in row:
                for k in SPENDING:
                    self.totals[k] += float(row.get(k, 0.0))
        if self.primary and rows:
            kept = [line for line, row in zip(lines, rows) if row.get("step", 0) <= step]
            self.metrics_path.write_text("".join(line + "\n" for line in kept))
        logging.info("resumed from %s at step %d", self.ckpts.directory, step)
        return True

    def _configured_hyperparams(self) -> None:
        """A restored optimizer state trains with the configured hyperparameters, not the stored ones."""
        updates = getattr(self.state.opt_state, "count", self.step)  # optimizer updates (PPO epochs: > RL steps)
        opt_state, changed = with_configured_hyperparams(self.state.opt_state, self.config.optim, int(updates))
        for name, (stored, configured) in changed.items():
            logging.warning("optim.%s: the checkpoint in %s was trained at %g; resuming at the configured %g",
                            name, self.ckpts.directory, stored, configured)
        self.state = self.state.replace(opt_state=opt_state)

    # Steps.
    @property
    def step(self) -> int:
        return int(self.state.step)

    def _collect(self) -> tuple[dynamic.Selected, float]:
        """The next task batch (with rollout.dynamic_sampling = refill, batches) played and credited
        with the driver's current weights, and what of it is trained on: (Selected, wall seconds)."""
        r = self.config.rollout
        G = r.group_size
        t0 = time.perf_counter()
        self._tasks_before = (self.tasks.get_state(), self.batches_drawn)
        draws = []
        while not draws or dynamic.wants_more(draws, r.dynamic_sampling, r.max_draws, r.groups_per_step):
            seeds = [int(s) for s in next(self.tasks)]
            base = self.batches_drawn * len(seeds) * G
            self.batches_drawn += 1
            lo, hi = self.group_lo, self.group_hi
            trajs, credit = self.pipeline.run([s for s in seeds[lo:hi] for _ in range(G)],
                                              [base + g * G + j for g in range(lo, hi) for j in range(G)], G)
            draws.append(dynamic.Draw(seeds, trajs, credit, lo, G))
        return dynamic.select(draws, r.dynamic_sampling, r.groups_per_step), time.perf_counter() - t0

    def rl_step(self) -> dict[str, Any]:
        """One optimizer step. With rollout.off_policy_steps = 1 the batch was played (and credited)
        with the previous weights during the previous step's update, and the next one is played now,
        while this update computes; the loss's ratio is against the behaviour log-probs."""
        c = self.config
        t_step = time.perf_counter()
        if self._prefetched is not None:
            (chosen, _), self._prefetched = self._prefetched, None
        else:
            chosen, _ = self._collect()
        t0 = time.perf_counter()
        seeds, played, credit = chosen.seeds, chosen.played, chosen.credit
        trajs, rows, batch, overlong = assemble.train_batch(c, self.mesh, chosen)
        if c.loss.kl_coef > 0:
            if self.ref_params is None:  # the first RL step of the run: the policy RL starts from
                self.ref_params = jax.tree.map(jnp.copy, self.policy.weights(self.state.params))
                self.ref_ckpts.save(self.step, self.ref_params, {"step": self.step})
            batch["ref_logprobs"] = self._ref_logprobs(batch, self.ref_params)
        if self.off_policy and c.loss.tis_cap > 0:
            batch["prox_logprobs"] = self._ref_logprobs(batch, self.policy.weights(self.state.params))
        before = self.step
        if self.off_policy and self.sync.identity:  # the update donates the buffers the engine reads
            self.driver.update_params(jax.tree.map(jnp.copy, self.driver.params))
        self.state, m = self.train_step(self.state, batch, self.policy.frozen)  # dispatched; computes while the next batch plays
        overlap_s = 0.0
        if self.off_policy:
            self._prefetched = self._collect()
            overlap_s = self._prefetched[1]
        self.driver.update_params(self.sync(self.policy.weights(self.state.params)))
        m = {k: float(v) for k, v in jax.device_get(m).items()}
        update_s = time.perf_counter() - t0 - overlap_s
        if self.step == before:  # non-finite loss or gradient: update skipped, nothing applied
            self.skipped_in_a_row += 1
            if self.skipped_in_a_row >= MAX_SKIPS_IN_A_ROW:
                raise FloatingPointError(f"{MAX_SKIPS_IN_A_ROW} updates in a row had a non-finite loss or "
                                         "gradient; stopping (the last checkpoint is intact)")
        else:
            self.skipped_in_a_row = 0
        row = {"step": before + 1, "applied": self.step > before, "tasks": seeds, **episode_metrics(played),
               "trained_episodes": len(trajs), **m, "overlong_penalty": overlong,
               "batch_fill": float(rows["valid"].mean()),  # real tokens / batch positions (this process's rows)
               "time/update_s": update_s, "time/step_s": time.perf_counter() - t_step,
               "compiles": self.compiles.take()}
        row.setdefault("kl", 0.0)
        # every row of a run has the same keys: the method's declared metrics, 0 when it had nothing
        row.update(dict.fromkeys(COMMON_METRICS + self.needs.metrics + dynamic_metrics(c), 0.0))
        row.update(credit.metrics)
        row.update(chosen.metrics)
        row = merge_rows(dist.allgather_json(row))
        for k in SPENDING:
            self.totals[k] += float(row.get(k, 0.0))
            row[f"total/{k}"] = self.totals[k]
        return row

    def _ref_logprobs(self, batch, params):
        """Log-probs [M, mb, L] of the batch under `params` (the reference or proximal policy),
        sharded like the batch."""
        from prover_jax.training.step import LOGPROB_KEYS, make_batch_logprob_fn
        if not hasattr(self, "_logprob_fn"):
            self._logprob_fn = make_batch_logprob_fn(
                self.policy.plain, logprob_chunk=self.config.train.logprob_chunk or None,
                out_sharding=batch["tokens"].sharding)
        return self._logprob_fn(params, {k: batch[k] for k in LOGPROB_KEYS if k in batch})

    def _task_splits(self) -> dict:
        return evaluation.task_splits(self.pool, self.config.env.name)

    def eval_task_count(self, episodes: int | None = None) -> int:
        return evaluation.eval_task_count(self.config, self.task_splits, episodes)

    def evaluate(self, episodes: int | None = None) -> dict[str, float]:
        """Greedy success and score on held-out eval tasks (`evaluation.evaluate`)."""
        return evaluation.evaluate(self.greedy, self.pool, self.eval_task_count(episodes))

    def run_sft(self, progress: bool = False, demos: list | None = None) -> dict:
        """The SFT warm start (sft.warm_start) on `demos`, by default the demonstrator's episodes."""
        out = sft.warm_start(self, self.config.sft, progress=progress, demos=demos)
        self.sft_done = True
        self.driver.update_params(self.sync(self.policy.weights(self.state.params)))
        return out

    def log(self, row: dict) -> None:
        if self.primary:
            append_line(self.metrics_path, json.dumps(row))

    def export_hf(self, out_dir: str) -> None:
        """The current policy as an HF folder (local or gs://): arrays gathered from all processes,
        written by process 0; the others wait until it is complete."""
        params = self.policy.weights(self.state.params)
        if dist.process_count() > 1:
            from jax.experimental import multihost_utils
            params = jax.tree.map(lambda x: multihost_utils.process_allgather(x, tiled=True), params)
        if self.primary:
            model = nnx.merge(self.policy.plain, params)

            def write(folder):
                qwen3_5.save_hf(model, folder)
                self.tokenizer.save_pretrained(folder)

            save_folder(write, workdir_path(out_dir))
        dist.barrier("export_hf")

    def close(self) -> None:
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


def dynamic_metrics(config) -> tuple[str, ...]:
    return dynamic.METRICS if config.rollout.dynamic_sampling != "off" else ()
