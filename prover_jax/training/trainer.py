"""The RL trainer: tasks -> rollouts -> propose/verify -> credit -> update -> checkpoint.

    trainer = Trainer(config, workdir)
    trainer.run()            # SFT warm start (optional), then config.train.steps RL steps; resumable

One step: the grain task iterator yields `groups_per_step` task seeds; every task is played
`group_size` times by the current policy (one fork per group, extension per turn); the credit method
turns the groups into per-token advantages (ProVer: judge + verification continuations); one jitted
`train_step` updates the weights; the engine samples with the new weights from the next step on (no
recompilation). Every `checkpoint_every` steps an orbax checkpoint stores the train state (params,
optimizer, step), the task iterator position, the SFT flag and the judge's accounting; re-running the
same command restores it and continues with the batch that would have come next.

W/metrics.jsonl has one JSON object per optimizer step (`step` counts completed updates from 1). An
update whose loss or gradient is not finite is skipped (weights and optimizer untouched) and logged
with "applied": false under the step number it would have had; the next batch tries again, and
MAX_SKIPS_IN_A_ROW skips in a row stop the run.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from flax import nnx

from prover_jax.convert.orbax_io import load_checkpoint
from prover_jax.credit import RolloutVerifier, make_credit
from prover_jax.envs.pool import EnvPool
from prover_jax.judges import make_judge
from prover_jax.models import qwen3_5
from prover_jax.rollout import Rollout, RolloutConfig, env_corpus, load_tokenizer, train_tokenizer
from prover_jax.sampling import Driver, Engine, SamplingParams
from prover_jax.sharding import make_mesh
from prover_jax.training import sft
from prover_jax.training.batch import pack
from prover_jax.training.step import init_train_state, make_optimizer, make_train_step

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
MAX_SKIPS_IN_A_ROW = 5
REPORTED_CREDIT_METRICS = ("prover/eligible_groups", "prover/proposals", "prover/valid_proposals",
                           "prover/accepted", "prover/acceptance_rate", "prover/segment_len",
                           "prover/delta_mean", "prover/extra_token_frac", "judge/calls", "judge/cost_usd",
                           "time/judge_s", "time/verify_s")


def maybe_initialize_distributed() -> None:
    """jax.distributed.initialize() on multi-host pods (TPU pods set these; single hosts skip)."""
    if os.environ.get("PROVER_DISTRIBUTED") == "1" or os.environ.get("TPU_WORKER_HOSTNAMES", "").count(","):
        jax.distributed.initialize()


def mesh_shape(config) -> tuple[int, int, int]:
    return (config.mesh.data, config.mesh.fsdp, config.mesh.tensor)


def mesh_devices(config) -> list:
    """All devices, or the first prod(mesh) of them when the mesh is fully specified and smaller
    (e.g. a one-device CPU demo on a host that exposes several)."""
    shape, devices = mesh_shape(config), jax.devices()
    if -1 not in shape and int(np.prod(shape)) < len(devices):
        logging.warning("mesh %s uses %d of %d devices", shape, int(np.prod(shape)), len(devices))
        return devices[:int(np.prod(shape))]
    return devices


class Trainer:
    def __init__(self, config, workdir: str):
        self.config, self.workdir = config, os.path.abspath(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        c = config
        self.mesh = make_mesh(mesh_shape(c), devices=mesh_devices(c))
        self.tokenizer = self._tokenizer()
        model = self._model()
        self.graphdef, _ = nnx.split(model)
        self.optimizer = make_optimizer(c.optim)
        self.state = init_train_state(model, self.optimizer)
        self.train_step = make_train_step(self.graphdef, c.loss, self.optimizer, mesh=self.mesh,
                                          logprob_chunk=c.train.logprob_chunk or None)
        self.ref_params = (jax.tree.map(jnp.copy, self.state.params) if c.loss.kl_coef > 0 else None)

        r = c.rollout
        self.engine = Engine(model, max_concurrent_decodes=r.max_concurrent_decodes,
                             max_prefill_length=r.max_prefill_length, max_target_length=r.max_target_length,
                             mesh=self.mesh)
        eos = set(model.config.eos_ids) | {self.tokenizer.convert_tokens_to_ids(c_) for c_ in ("<|im_end|>",)
                                          if c_ in self.tokenizer.get_vocab()}
        self.driver = Driver(self.engine, params=self.state.params, eos_ids=sorted(eos),
                             decode_fn=self.tokenizer.decode)
        sampling = SamplingParams(temperature=r.temperature, top_k=r.top_k, top_p=r.top_p)
        self.rollout = Rollout(self.driver, self.tokenizer, self.rollout_config(sampling))
        self.greedy = Rollout(self.driver, self.tokenizer, self.rollout_config(SamplingParams()))
        n_train = r.groups_per_step * r.group_size
        env_kw = self.env_kwargs()
        self.pool = EnvPool(c.env.name, n_train, env_kw, processes=c.env.processes)
        n_verify = min(2 * r.groups_per_step * c.credit.prover.k, max(n_train, c.credit.prover.k))
        self.verify_pool = (EnvPool(c.env.name, n_verify, env_kw, processes=c.env.processes)
                            if c.credit.method == "prover" else None)
        self.judge = make_judge(c.judge.name, c.judge, workdir=self.workdir)
        verifier = RolloutVerifier(self.rollout, self.verify_pool) if self.verify_pool else None
        self.credit = make_credit(c.credit.method, c.credit, judge=self.judge, verifier=verifier, seed=c.seed)

        # tasks: train seeds in a shuffled order, groups_per_step per step (resumable iterator).
        tasks = grain.MapDataset.range(c.env.train_seed_start, c.env.train_seed_start + 1_000_000)
        self.tasks = iter(tasks.shuffle(seed=c.seed).batch(r.groups_per_step))
        self.sft_done = c.sft.steps == 0
        self.skipped_in_a_row = 0
        self.metrics_path = os.path.join(self.workdir, "metrics.jsonl")
        self.ckpt = ocp.CheckpointManager(
            os.path.join(self.workdir, "checkpoints"),
            options=ocp.CheckpointManagerOptions(max_to_keep=c.train.keep_checkpoints, create=True))
        self.restored = self._restore()

    # Set-up.
    def env_kwargs(self) -> dict:
        """config.env.kwargs as a plain dict (the pool's and the tokenizer corpus's env kwargs)."""
        kw = self.config.env.kwargs
        return dict(kw.to_dict() if hasattr(kw, "to_dict") else kw)

    def rollout_config(self, sampling: SamplingParams) -> RolloutConfig:
        r = self.config.rollout
        return RolloutConfig(sampling=sampling, max_action_tokens=r.max_action_tokens,
                             max_turns=r.max_turns or None, seed=self.config.seed,
                             system_prompt=r.system_prompt or None)

    def _tokenizer(self):
        c = self.config
        if c.model.init in ("hf", "checkpoint"):
            return load_tokenizer(c.model.path)
        path = os.path.join(self.workdir, "tokenizer")
        if os.path.exists(os.path.join(path, "tokenizer.json")):
            return load_tokenizer(path)
        r = self.rollout_config(SamplingParams())
        corpus = env_corpus(c.env.name, range(c.tokenizer.corpus_seeds), self.env_kwargs(),
                            system_prompt=r.system_prompt, max_turns=r.max_turns, template=r.template)
        tok = train_tokenizer(corpus, vocab_size=c.tokenizer.vocab_size, phrases=c.tokenizer.phrases)
        tok.save_pretrained(path)
        return tok

    def _model(self):
        c = self.config
        dtype, pdtype = DTYPES[c.model.dtype], DTYPES[c.model.param_dtype]
        if c.model.init == "hf":
            return qwen3_5.load_hf(c.model.path, dtype=pdtype, mesh=self.mesh, compute_dtype=dtype)
        if c.model.init == "checkpoint":
            return load_checkpoint(c.model.path, mesh=self.mesh)
        if c.model.init != "random":
            raise ValueError(f"model.init must be random | hf | checkpoint, got {c.model.init!r}")
        cfg = qwen3_5.CONFIGS[c.model.size]
        if len(self.tokenizer) > cfg.vocab_size:
            raise ValueError(f"tokenizer has {len(self.tokenizer)} tokens; model {c.model.size!r} only "
                             f"{cfg.vocab_size}")
        model = qwen3_5.Qwen3_5(cfg, rngs=nnx.Rngs(c.seed), dtype=dtype, param_dtype=pdtype)
        return qwen3_5.shard_model(model, self.mesh)

    # Checkpoints.
    def _meta(self) -> dict:
        return {"tasks": self.tasks.get_state(), "sft_done": self.sft_done,
                "step": int(self.state.step)}

    def save(self) -> None:
        step = int(self.state.step)
        self.ckpt.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(self.state),
                                                     meta=ocp.args.JsonSave(self._meta())), force=True)
        self.ckpt.wait_until_finished()

    def _restore(self) -> bool:
        step = self.ckpt.latest_step()
        if step is None:
            return False
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, self.state)
        out = self.ckpt.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract),
                                                              meta=ocp.args.JsonRestore()))
        self.state = out.state
        self.tasks.set_state(out.meta["tasks"])
        self.sft_done = out.meta["sft_done"]
        self.driver.update_params(self.state.params)
        # metrics of steps after the checkpoint were not kept in the state: drop them
        if os.path.exists(self.metrics_path):
            with open(self.metrics_path) as f:
                rows = [line for line in f if line.strip() and json.loads(line).get("step", 0) <= step]
            with open(self.metrics_path, "w") as f:
                f.writelines(rows)
        logging.info("resumed from %s at step %d", self.ckpt.directory, step)
        return True

    # Steps.
    @property
    def step(self) -> int:
        return int(self.state.step)

    def rl_step(self) -> dict[str, Any]:
        c = self.config
        G = c.rollout.group_size
        seeds = [int(s) for s in next(self.tasks)]
        t0 = time.perf_counter()
        trajs = self.rollout.run(self.pool, [s for s in seeds for _ in range(G)])
        rollout_s = time.perf_counter() - t0
        groups = [trajs[g * G:(g + 1) * G] for g in range(len(seeds))]
        credit = self.credit.assign(groups)
        t0 = time.perf_counter()
        flat_adv = [a for group in credit.advantages for a in group]
        batch = pack(trajs, flat_adv, c.train.micro_batch_size, length_multiple=c.train.length_multiple,
                     max_length=c.rollout.max_target_length)
        if self.ref_params is not None:
            batch["ref_logprobs"] = self._ref_logprobs(batch)
        before = self.step
        self.state, m = self.train_step(self.state, batch)
        self.driver.update_params(self.state.params)
        m = {k: float(v) for k, v in jax.device_get(m).items()}
        update_s = time.perf_counter() - t0
        if self.step == before:  # non-finite loss or gradient: update skipped, nothing applied
            self.skipped_in_a_row += 1
            if self.skipped_in_a_row >= MAX_SKIPS_IN_A_ROW:
                raise FloatingPointError(f"{MAX_SKIPS_IN_A_ROW} updates in a row had a non-finite loss or "
                                         "gradient; stopping (the last checkpoint is intact)")
        else:
            self.skipped_in_a_row = 0
        row = {"step": before + 1, "applied": self.step > before, "tasks": seeds, "success_rate": float(np.mean([t.success for t in trajs])),
               "score": float(np.mean([t.score for t in trajs])),
               "turns": float(np.mean([t.num_turns for t in trajs])),
               "policy_tokens": int(sum(t.num_policy_tokens for t in trajs)),
               "invalid_action_frac": _invalid_frac(trajs), **m,
               "time/rollout_s": rollout_s, "time/update_s": update_s}
        row.setdefault("kl", 0.0)
        row.update(dict.fromkeys(REPORTED_CREDIT_METRICS, 0.0))  # every run reports these, grpo too
        row.update(credit.metrics)
        return row

    def _ref_logprobs(self, batch):
        from prover_jax.training.step import make_logprob_fn
        if not hasattr(self, "_logprob_fn"):
            self._logprob_fn = make_logprob_fn(self.graphdef)
        M = batch["tokens"].shape[0]
        return np.stack([np.asarray(self._logprob_fn(self.ref_params, batch["tokens"][m], batch["valid"][m]))
                         for m in range(M)])

    def evaluate(self, episodes: int | None = None) -> float:
        """Greedy success rate on the held-out seeds 0 .. eval_episodes - 1."""
        n = episodes or self.config.train.eval_episodes
        seeds = list(range(min(n, self.config.env.eval_seeds)))
        wins = []
        for i in range(0, len(seeds), self.pool.num_envs):
            wins += [t.success for t in self.greedy.run(self.pool, seeds[i:i + self.pool.num_envs])]
        return float(np.mean(wins))

    def run_sft(self, progress: bool = False) -> dict:
        out = sft.warm_start(self, self.config.sft, progress=progress)
        self.sft_done = True
        self.driver.update_params(self.state.params)
        return out

    def log(self, row: dict) -> None:
        with open(self.metrics_path, "a") as f:
            f.write(json.dumps(row) + "\n")

    def export_hf(self, out_dir: str) -> None:
        model = nnx.merge(self.graphdef, self.state.params)
        qwen3_5.save_hf(model, out_dir)
        self.tokenizer.save_pretrained(out_dir)

    def close(self) -> None:
        self.pool.close()
        if self.verify_pool is not None:
            self.verify_pool.close()
        self.ckpt.close()


def _invalid_frac(trajs) -> float:
    turns = [turn for t in trajs for turn in t.turns]
    return float(np.mean([not turn.valid for turn in turns])) if turns else 0.0
