"""The RL trainer: tasks -> rollouts -> propose/verify -> credit -> update -> checkpoint.

    trainer = Trainer(config, workdir)   # workdir: a local folder, file://... or gs://...; resumes
    trainer.run_sft(); trainer.rl_step(); trainer.save(); trainer.evaluate()   # run.train drives these
    trainer.run                          # the built pieces (wiring.Run): mesh, policy, engine, pools, credit

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

import jax
import jax.numpy as jnp
from absl import logging
from flax import nnx

from prover_jax import distributed as dist
from prover_jax.credit import COMMON_METRICS
from prover_jax.models import save_hf
from prover_jax.rollout import Rollout
from prover_jax.sampling import SamplingParams
from prover_jax.training import assemble, dynamic, episodes, evaluation, sft
from prover_jax.training.build import rollout_config
from prover_jax.training.checkpoints import restore_reference
from prover_jax.training.metrics import CompileCounter, episode_metrics, merge_rows
from prover_jax.training.optim import with_configured_hyperparams
from prover_jax.training.wiring import abstract, build
from prover_jax.training.workdir import append_line, read_rows, save_folder, workdir_path, write_atomic

MAX_SKIPS_IN_A_ROW = 5
# cumulative over the run, in every row as total/<name> and in checkpoints
SPENDING = ("policy_tokens", "credit/extra_policy_tokens", "judge/calls", "judge/cost_usd", "critic/calls",
            "critic/cost_usd")


class Trainer:
    """The loop over a built run (`wiring.build`): the train state, the task position and what the
    run has spent; `rl_step`, `run_sft`, `evaluate`, `save` (restore at start), `export_hf`."""

    def __init__(self, config, workdir: str):
        self.config = config
        self.run = run = build(config, workdir)
        self.state = run.initial_state
        # the KL reference is the policy RL starts from (after SFT), taken at the first RL step and
        # checkpointed once in W/reference, so a resumed run keeps the same reference; under LoRA
        # without SFT it is the frozen base itself, no copy (wiring.build then keeps no W/reference)
        self.ref_params = run.policy.frozen if config.loss.kl_coef > 0 and run.ref_ckpts is None else None
        self.batches_drawn = 0  # task batches taken from the iterator: the base of episode uids
        self.off_policy = int(config.rollout.off_policy_steps)
        self._prefetched = None  # off-policy: the next step's batch, played during this update
        self._tasks_before = None
        self.sft_done = config.sft.steps == 0
        self.skipped_in_a_row = 0
        # what the run has spent, over every step ever played (a step lost to a restart included)
        self.totals = dict.fromkeys(SPENDING, 0.0)
        self.restored = self._restore()
        self.compiles = CompileCounter()

    def _publish(self) -> None:
        """The engine decodes from the current weights (copied over, no recompile)."""
        self.run.driver.update_params(self.run.sync(self.run.policy.weights(self.state.params)))

    # Checkpoints.
    def _meta(self) -> dict:
        tasks, drawn = self.run.tasks.get_state(), self.batches_drawn
        if self._prefetched is not None:  # a resumed run plays the prefetched batch again
            tasks, drawn = self._tasks_before
        return {"tasks": tasks, "sft_done": self.sft_done, "step": self.step, "batches_drawn": drawn,
                "totals": self.totals}

    def save(self) -> None:
        """Starts an asynchronous save of this step (the previous save is finished first)."""
        self.run.ckpts.save(self.step, self.state, self._meta())

    def _restore(self) -> bool:
        """Continues from the latest checkpoint, if any: state, task position, totals; the KL reference
        saved in W/reference, if any (a run killed before its first checkpoint included); metrics rows of
        later steps (all training rows when there is no checkpoint) are dropped, what they spent stays
        in the totals."""
        run = self.run
        found = run.ckpts.restore(abstract(self.state), on_corrupt=self.config.train.on_corrupt_checkpoint)
        step = 0
        if found is not None:
            self.state, meta, step = found
            self._configured_hyperparams()
            run.tasks.set_state(meta["tasks"])
            self.sft_done = meta["sft_done"]
            self.batches_drawn = int(meta.get("batches_drawn", meta.get("step", step)))
            self.totals.update(meta.get("totals", {}))
            self._publish()
            logging.info("resumed from %s at step %d", run.ckpts.directory, step)
        if run.ref_ckpts is not None:
            self.ref_params = restore_reference(run.ref_ckpts, abstract(run.policy.weights(self.state.params)),
                                                step)
        rows = read_rows(run.metrics_path)
        for row in rows:
            if row.get("step", 0) > step and "success_rate" in row:
                for k in SPENDING:
                    self.totals[k] += float(row.get(k, 0.0))
        if run.primary and run.metrics_path.exists():
            kept = [json.dumps(row) + "\n" for row in rows if row.get("step", 0) <= step]
            write_atomic(run.metrics_path, "".join(kept))
        return found is not None

    def _configured_hyperparams(self) -> None:
        """A restored optimizer state trains with the configured hyperparameters, not the stored ones."""
        updates = getattr(self.state.opt_state, "count", self.step)  # optimizer updates (PPO epochs: > RL steps)
        opt_state, changed = with_configured_hyperparams(self.state.opt_state, self.config.optim, int(updates))
        for name, (stored, configured) in changed.items():
            logging.warning("optim.%s: the checkpoint in %s was trained at %g; resuming at the configured %g",
                            name, self.run.ckpts.directory, stored, configured)
        self.state = self.state.replace(opt_state=opt_state)

    # Steps.
    @property
    def step(self) -> int:
        return int(self.state.step)

    def _collect(self) -> tuple[dynamic.Selected, float]:
        """The next task batch (with rollout.dynamic_sampling = refill, batches) played and credited
        with the driver's current weights, and what of it is trained on: (Selected, wall seconds)."""
        run, r = self.run, self.config.rollout
        G, lo, hi = r.group_size, run.group_lo, run.group_hi
        t0 = time.perf_counter()
        self._tasks_before = (run.tasks.get_state(), self.batches_drawn)
        draws = []
        while not draws or dynamic.wants_more(draws, r.dynamic_sampling, r.max_draws, r.groups_per_step):
            seeds = [int(s) for s in next(run.tasks)]
            base = self.batches_drawn * len(seeds) * G
            self.batches_drawn += 1
            trajs, credit = run.pipeline.run([s for s in seeds[lo:hi] for _ in range(G)],
                                             [base + g * G + j for g in range(lo, hi) for j in range(G)], G)
            draws.append(dynamic.Draw(seeds, trajs, credit, lo, G))
        return (dynamic.select(draws, r.dynamic_sampling, r.groups_per_step, run.needs.merge),
                time.perf_counter() - t0)

    def rl_step(self) -> dict[str, Any]:
        """One optimizer step. With rollout.off_policy_steps = 1 the batch was played (and credited)
        with the previous weights during the previous step's update, and the next one is played now,
        while this update computes (not in step train.steps, the last); the loss's ratio is against the
        behaviour log-probs."""
        c, run = self.config, self.run
        if self.skipped_in_a_row >= MAX_SKIPS_IN_A_ROW:  # checked here, so the last skipped step is logged
            raise FloatingPointError(f"{MAX_SKIPS_IN_A_ROW} updates in a row had a non-finite loss or "
                                     "gradient; stopping (the last checkpoint is intact)")
        t_step = time.perf_counter()
        self.compiles.take()  # the step's own compilations only (not SFT's or an evaluation's)
        if self._prefetched is not None:
            (chosen, _), self._prefetched = self._prefetched, None
        else:
            chosen, _ = self._collect()
        t0 = time.perf_counter()
        trained, rows, batch, figures = assemble.train_batch(c, run.mesh, chosen)
        if c.train.dump_episodes:  # the records of the episodes as played and credited, before the update
            episodes.write(run.root, f"step_{self.step + 1}", episodes.step_records(
                trained.groups, trained.advantages, chosen.credit.notes, run.tokenizer, c.train.dump_episodes,
                trained.uids), c.train.dump_episodes)
        if c.loss.kl_coef > 0:
            if self.ref_params is None:  # the first RL step of the run: the policy RL starts from
                self.ref_params = jax.tree.map(jnp.copy, run.policy.weights(self.state.params))
                run.ref_ckpts.save(self.step, self.ref_params, {"step": self.step})
            batch["ref_logprobs"] = self._logprobs(batch, self.ref_params)
        if self.off_policy and c.loss.tis_cap > 0:
            batch["prox_logprobs"] = self._logprobs(batch, run.policy.weights(self.state.params))
        before = self.step
        if self.off_policy and run.sync.identity:  # the update donates the buffers the engine reads
            run.driver.update_params(jax.tree.map(jnp.copy, run.driver.params))
        # dispatched: the update computes while the next batch plays (off-policy)
        self.state, m = run.train_step(self.state, batch, run.policy.frozen)
        overlap_s = 0.0
        if self.off_policy and before + 1 < c.train.steps:  # a next step follows (self.step would wait)
            self._prefetched = self._collect()
            overlap_s = self._prefetched[1]
        self._publish()
        m = {k: float(v) for k, v in jax.device_get(m).items()}
        update_s = time.perf_counter() - t0 - overlap_s
        self._count_skips(applied=self.step > before)
        row = {"step": before + 1, "applied": self.step > before, "tasks": chosen.seeds,
               **episode_metrics(chosen.played), "trained_episodes": trained.episodes, **m, **figures,
               "batch_fill": float(rows["valid"].mean()),  # real tokens / batch positions (this process's rows)
               "time/update_s": update_s, "time/step_s": time.perf_counter() - t_step,
               "compiles": self.compiles.take()}
        row.setdefault("kl", 0.0)
        # every row of a run has the same keys: the method's declared metrics, 0 when it had nothing
        row.update(dict.fromkeys(COMMON_METRICS + run.needs.metrics + dynamic_metrics(c), 0.0))
        row.update(chosen.credit.metrics)
        row.update(chosen.metrics)
        row = merge_rows(dist.allgather_json(row), run.needs.merge)
        for k in SPENDING:
            self.totals[k] += float(row.get(k, 0.0))
            row[f"total/{k}"] = self.totals[k]
        return row

    def _count_skips(self, applied: bool) -> None:
        """A non-finite loss or gradient skips the update (nothing applied); after MAX_SKIPS_IN_A_ROW in a
        row, the next `rl_step` raises FloatingPointError (their rows are all returned, hence logged)."""
        self.skipped_in_a_row = 0 if applied else self.skipped_in_a_row + 1

    def _logprobs(self, batch, params):
        """Log-probs [M, mb, L] of the batch under `params` (the reference or proximal policy),
        sharded like the batch (`run.logprob_pass`, compiled ahead with train.precompile)."""
        return self.run.logprob_pass(params, batch)

    # Evaluation, SFT, output.
    def eval_task_count(self, episodes: int | None = None) -> int:
        return evaluation.eval_task_count(self.config, self.run.task_splits, episodes)

    def evaluate(self, count: int | None = None) -> dict[str, float]:
        """Greedy success and score on `count` held-out eval tasks (`evaluation.evaluate`), and with
        train.eval_samples = k the sampled success and pass@k (`evaluation.evaluate_sampled`); with
        train.dump_episodes = N, the first N greedy episodes go to W/episodes/eval_<step>.jsonl."""
        n, played = self.config.train.dump_episodes, []
        tasks = self.eval_task_count(count)
        row = evaluation.evaluate(self.run.greedy, self.run.pool, tasks, played if n else None)
        if self.config.train.eval_samples:
            row.update(evaluation.evaluate_sampled(self._eval_rollout(), self.run.pool, tasks,
                                                   int(self.config.train.eval_samples)))
        if n:
            episodes.write(self.run.root, f"eval_{self.step}", episodes.eval_records(played, self.run.tokenizer, n),
                           n)
        return row

    def _eval_rollout(self):
        """Episodes sampled at train.eval_temperature (the rollout's top_k / top_p) on the policy's driver."""
        c, r = self.config, self.config.rollout
        sampling = SamplingParams(temperature=float(c.train.eval_temperature), top_k=r.top_k, top_p=r.top_p)
        return Rollout(self.run.driver, self.run.tokenizer, rollout_config(c, sampling, tokenizer=self.run.tokenizer))

    def run_sft(self, progress: bool = False, demos: list | None = None) -> dict:
        """The SFT warm start (sft.warm_start) on `demos`, by default the demonstrator's episodes."""
        params, out = sft.warm_start(self.run, self.state.params, self.config.sft, progress=progress, demos=demos)
        self.state = self.state.replace(params=params)
        self.sft_done = True
        self._publish()
        return out

    def log(self, row: dict) -> None:
        if self.run.primary:
            append_line(self.run.metrics_path, json.dumps(row))

    def export_hf(self, out_dir: str) -> None:
        """The current policy as an HF folder (local or gs://): arrays gathered from all processes,
        written by process 0; the others wait until it is complete."""
        run = self.run
        params = run.policy.weights(self.state.params)
        if dist.process_count() > 1:
            from jax.experimental import multihost_utils
            params = jax.tree.map(lambda x: multihost_utils.process_allgather(x, tiled=True), params)
        if run.primary:
            model = nnx.merge(run.policy.plain, params)

            def write(folder):
                save_hf(model, folder)
                run.tokenizer.save_pretrained(folder)

            save_folder(write, workdir_path(out_dir))
        dist.barrier("export_hf")

    def close(self) -> None:
        self.run.close()


def dynamic_metrics(config) -> tuple[str, ...]:
    return dynamic.METRICS if config.rollout.dynamic_sampling != "off" else ()
