"""Steady-state RL step time on the demo setting: credit `grpo` vs `prover`, in ONE process.

    python bench/rl_step.py [--workdir=runs/bench_rl_step] [--warmup=2] [--steps=4]
                            [--variants=grpo,prover,prover_openai] [--judge_latency_s=0.5]
    python bench/rl_step.py --smoke   # tiny sizes: checks the bench end to end (its times mean nothing)

The update is compiled for every length bucket when each variant starts (train.precompile).
A policy that produces mixed groups comes first: a short SFT warm start on the demo config
(--sft_steps), cached in WORKDIR/sft and reused by later runs. Every variant then starts from that
checkpoint (a copy of WORKDIR/sft in WORKDIR/<variant>); the variants take turns, one RL step each
per round, --warmup untimed rounds (compiles, caches) then --steps timed ones:
    grpo           credit grpo
    prover         credit prover, contrastive judge
    prover_openai  credit prover, the openai judge against a scripted OpenAI-compatible endpoint on
                   localhost that answers every call after --judge_latency_s (cache off)
    *_packed       (e.g. grpo_packed) the same, updating on packed rows with policy-token logits
    *_nospec       (prover_nospec) the same without speculative judging (credit.prover.speculate off)
    *_ctx          (prover_ctx) the same with per-turn caches kept for continuations
                   (rollout.context_budget_mb=2048)
Then the driver's host overhead per decode step: the wall time of 32 requests of 64 tokens through
the driver (fixed length, no stop), less the time of their one batched prefill alone, per decode
step, minus the time of the jitted generate step alone (chained steps, one block at the end), all
at the demo's 32 slots; at the config's decode steps per call and at 4 (the `_4` keys).

Prints a table and, last, one JSON line: load_before and load_after (the 1-minute load average when
the bench starts and when it ends); grpo_step_s; prover_step_s (contrastive) and prover_over_grpo
(means over the timed steps; _median: of medians; _paired: the median, min and max over rounds of the
ratio of the two steps of one round; _ci95: a 95% bootstrap interval of the ratio of means, rounds
resampled), the same for prover_nospec and prover_openai; eligible_frac
(groups in the band, timed ProVer steps),
rollout_tokens_per_s (policy tokens over rollout time, grpo steps), decode_host_overhead_ms,
decode_step_ms, plus per variant the mean, median, min and max step time, the policy tokens and the tokens
prefilled (prompt tokens the driver prefilled: episodes, turns, continuations) per step,
the continuations' policy tokens per policy token of the batch (extra_token_frac) and the mean of every
time/* entry.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from judge_endpoint import start_endpoint  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", "runs/bench_rl_step", "Bench folder (the SFT checkpoint is cached here).")
flags.DEFINE_integer("sft_steps", 1200, "SFT warm-start steps of the cached policy.")
flags.DEFINE_integer("warmup", 2, "Untimed RL steps per variant.")
flags.DEFINE_integer("steps", 4, "Timed RL steps per variant.")
flags.DEFINE_list("variants", ["grpo", "prover", "prover_openai"], "Variants to time.")
flags.DEFINE_float("judge_latency_s", 0.5, "Latency of every call to the scripted judge endpoint.")
flags.DEFINE_multi_string("override", [], "A config override key=value, repeatable; the value is JSON for non-string "
                          "fields (e.g. --override=rollout.row_buckets=[8,32] --override=train.logits=policy).")
flags.DEFINE_bool("keep_host_memory", True, "glibc malloc keeps freed memory for reuse "
                  "(distributed.keep_host_memory), as the trainer and the demo do.")
flags.DEFINE_bool("smoke", False, "Seconds, not minutes: 10 SFT steps, 1 timed step per variant of 2 tasks x 2 "
                  "episodes, no precompile or sampler warm-up, 8-token decode probes, in WORKDIR/smoke (the cached "
                  "policy is untouched). Checks that the bench runs; its times mean nothing.")

DECODE_TOKENS = 64  # tokens per request of the decode-overhead probe (--smoke: 8)


def smoke_flags() -> None:
    """--smoke: the sizes of a run that only checks the bench end to end."""
    global DECODE_TOKENS
    FLAGS.sft_steps, FLAGS.warmup, FLAGS.steps, DECODE_TOKENS = 10, 0, 1, 8
    FLAGS.judge_latency_s = 0.0
    FLAGS.override = list(FLAGS.override) + [
        "rollout.groups_per_step=2", "rollout.group_size=2", "train.precompile=false", "rollout.warmup=false"]


def demo_config():
    from configs.demo import get_config
    c = get_config()
    c.judge.name = "contrastive"
    c.train.checkpoint_every = 10 ** 6
    c.train.precompile = True  # every length bucket compiled at start: no update compiles in the timed steps
    for item in FLAGS.override:
        key, value = item.split("=", 1)
        node = c
        *path, leaf = key.split(".")
        for p in path:
            node = node[p]
        node[leaf] = type(node[leaf])(json.loads(value) if not isinstance(node[leaf], str) else value)
    return c


def sft_policy(root: str) -> str:
    """WORKDIR/sft: the demo's tokenizer and model after --sft_steps of SFT (built once)."""
    from prover_jax.training.trainer import Trainer
    path = os.path.join(root, "sft")
    marker = os.path.join(path, "sft_done.json")
    if os.path.exists(marker) and json.load(open(marker)).get("sft_steps") == FLAGS.sft_steps:
        return path
    shutil.rmtree(path, ignore_errors=True)
    c = demo_config()
    c.credit.method = "grpo"
    c.sft.steps = FLAGS.sft_steps
    trainer = Trainer(c, path)
    try:
        out = trainer.run_sft(progress=True)
        trainer.save()
    finally:
        trainer.close()
    json.dump({"sft_steps": FLAGS.sft_steps, **out}, open(marker, "w"))
    return path


PACKED_MICRO_BATCH = 4  # packed rows per micro-batch (the row count is rounded up to it)


def variant_config(name: str, base_url: str):
    """The demo config of variant `name`; a `_packed` suffix (grpo_packed, prover_packed) adds packed
    rows of rollout.max_target_length tokens, PACKED_MICRO_BATCH rows per micro-batch, and the vocab
    projection at the policy tokens only (train.logits = policy)."""
    c = demo_config()
    c.sft.steps = FLAGS.sft_steps
    c.train.steps = 10 ** 6
    if name.endswith("_ctx"):
        name = name[:-len("_ctx")]
        c.rollout.context_budget_mb = 2048.0
    if name.endswith("_nospec"):
        name = name[:-len("_nospec")]
        c.credit.prover.speculate = False
    if name.endswith("_packed"):
        name = name[:-len("_packed")]
        c.train.max_tokens_per_row = c.rollout.max_target_length
        c.train.micro_batch_size = PACKED_MICRO_BATCH
        c.train.logits = "policy"
    if name == "grpo":
        c.credit.method = "grpo"
    elif name == "prover":
        c.credit.method = "prover"
    elif name == "prover_openai":
        c.credit.method = "prover"
        c.judge.name = "openai"
        c.judge.openai.base_url = base_url
        c.judge.openai.cache = False
        c.judge.openai.api_key_env = ""
        c.judge.openai.timeout_s = 30.0
    else:
        raise ValueError(f"unknown variant {name!r}; choose from grpo, prover, prover_openai (each with "
                         "optional _packed, _nospec and _ctx suffixes, in that order)")
    return c


def memory_maps() -> tuple[int, int] | None:
    """(mappings this process holds, vm.max_map_count), or None off Linux."""
    try:
        with open("/proc/self/maps") as f:
            held = sum(1 for _ in f)
        with open("/proc/sys/vm/max_map_count") as f:
            return held, int(f.read())
    except OSError:
        return None


def check_map_headroom(held_before: list[int], left: int) -> None:
    """Before the next of `left` trainers (held_before: the mappings held before each trainer built so
    far, then now): each trainer's compiled programs hold memory mappings, and past vm.max_map_count
    XLA's compiler fails ("Cannot allocate memory") and the process crashes. Raises a clear error
    instead when another trainer like the last, and its steps (+20%), would not fit."""
    maps = memory_maps()
    if maps is None or len(held_before) < 2 or not left:
        return
    held, limit = maps
    each = held - held_before[-2]
    if held + 1.2 * each > limit:
        raise RuntimeError(
            f"--variants: {len(held_before) - 1 + left} trainers in one process need about "
            f"{held + 1.2 * each * left:.0f} memory mappings (the last trainer took {each}; {held} held now), over "
            f"vm.max_map_count={limit}. Time fewer variants per run, or raise the limit "
            f"(sysctl -w vm.max_map_count=262144).")


def time_variants(names, sft_dir: str, root: str, base_url: str) -> dict:
    """All variants' trainers at once, stepped in turn (round r: every variant's step r), so
    compilation, caches and any drift of the machine fall on all of them alike."""
    import numpy as np

    from prover_jax.training.trainer import Trainer
    trainers = {}
    held_before = []  # memory mappings held before each trainer (check_map_headroom)
    try:
        for k, name in enumerate(names):
            held_before.append((memory_maps() or (0, 0))[0])
            check_map_headroom(held_before, len(names) - k)
            path = os.path.join(root, name)
            shutil.rmtree(path, ignore_errors=True)
            shutil.copytree(sft_dir, path)
            trainers[name] = Trainer(variant_config(name, base_url), path)
            if not trainers[name].restored or not trainers[name].sft_done:
                raise RuntimeError(f"{path}: the SFT checkpoint was not restored")
        rows = {name: [] for name in names}
        walls = {name: [] for name in names}
        prefilled = {name: [] for name in names}
        for i in range(FLAGS.warmup + FLAGS.steps):
            for name, trainer in trainers.items():
                t0, p0 = time.perf_counter(), trainer.run.driver.stats["prefill_tokens"]
                row = trainer.rl_step()
                wall = time.perf_counter() - t0
                print(f"  {name} step {i + 1}{' (warm-up)' if i < FLAGS.warmup else ''}: {wall:.2f} s, "
                      f"success {row['success_rate']:.2f}, eligible {row.get('prover/eligible_groups', 0):.0f}, "
                      f"compiles {row.get('compiles', float('nan'))}", flush=True)
                if i >= FLAGS.warmup:
                    rows[name].append(row)
                    walls[name].append(wall)
                    prefilled[name].append(trainer.run.driver.stats["prefill_tokens"] - p0)
    finally:
        for trainer in trainers.values():
            trainer.close()
    out = {}
    for name in names:
        r, w = rows[name], walls[name]
        G = trainers[name].config.rollout.groups_per_step
        out[name] = {
            "step_s": float(np.mean(w)), "step_median_s": float(np.median(w)), "step_min_s": min(w),
            "steps_s": list(w),
            "step_max_s": max(w),
            "policy_tokens": float(np.mean([x["policy_tokens"] for x in r])),
            "prefill_tokens": float(np.mean(prefilled[name])),
            "extra_token_frac": float(np.mean([x.get("prover/extra_token_frac", 0.0) for x in r])),
            "eligible_frac": float(np.mean([x.get("prover/eligible_groups", 0.0) / G for x in r])),
            "success_rate": float(np.mean([x["success_rate"] for x in r])),
            "rollout_tokens_per_s": float(sum(x["policy_tokens"] for x in r)
                                          / max(sum(x["time/rollout_s"] for x in r), 1e-9)),
            "compiles": float(np.mean([x.get("compiles", -1) for x in r])),
            "batch_fill": float(np.mean([x.get("batch_fill", 0.0) for x in r])),
            **{k: float(np.mean([x[k] for x in r])) for k in r[0] if k.startswith("time/")}}
    maps = memory_maps()
    if maps:
        print(f"memory mappings held: {maps[0]} (vm.max_map_count {maps[1]}; before each trainer: {held_before})")
    return out


def decode_overhead(sft_dir: str, steps_per_call: int = 1) -> dict:
    """Per decode step at 32 busy slots: driver wall time vs the jitted generate step alone."""
    import jax
    import numpy as np

    from prover_jax.sampling import Driver, Request, SamplingParams
    from prover_jax.training.trainer import Trainer
    c = variant_config("grpo", "")
    trainer = Trainer(c, sft_dir)
    try:
        r = c.rollout
        engine = trainer.run.engine
        kw = {"steps_per_call": steps_per_call} if steps_per_call != 1 else {}  # (1 also runs older drivers)
        driver = Driver(engine, params=trainer.run.driver.params, **kw)
        S, N = r.max_concurrent_decodes, DECODE_TOKENS
        prompts = np.random.default_rng(0).integers(3, 500, (S, 32))
        reqs = [Request(p.tolist(), SamplingParams(temperature=1.0), max_new_tokens=N, seed=i)
                for i, p in enumerate(prompts)]
        driver.run(reqs)  # compile
        best_driver = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            driver.run(reqs)
            dt = time.perf_counter() - t0
            best_driver = min(best_driver, dt)
        params = driver.params
        best_prefill = float("inf")  # the driver's one batched prefill of the 32 prompts, alone
        for _ in range(3):
            t0 = time.perf_counter()
            jax.block_until_ready(engine.prefill_batch(
                params=params, padded_tokens=prompts, true_lengths=[prompts.shape[1]] * S,
                samplers=[SamplingParams(temperature=1.0)] * S, rngs=list(range(S)), num_samples=[1] * S,
                existing_prefixes=[None] * S).token_N)
            best_prefill = min(best_prefill, time.perf_counter() - t0)
        state = engine.init_decode_state()
        prefix, _ = engine.prefill_multisampling(params=params, padded_tokens=prompts[0], num_samples=S,
                                                 sampler=SamplingParams(temperature=1.0), rng=0)
        state = engine.bulk_insert(prefix, state, list(range(S)))
        state, res = engine.generate(params, state)
        jax.block_until_ready(res.tokens)
        best_step = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(N - 1):
                state, res = engine.generate(params, state)
            jax.block_until_ready(res.tokens)
            best_step = min(best_step, (time.perf_counter() - t0) / (N - 1))
    finally:
        trainer.close()
    best_driver = (best_driver - best_prefill) / (N - 1)  # N - 1 decode steps after the prefill's token
    return {"decode_step_ms": 1e3 * best_step, "driver_step_ms": 1e3 * best_driver,
            "decode_host_overhead_ms": 1e3 * max(best_driver - best_step, 0.0)}


def decode_overheads(sft_dir: str) -> dict:
    """decode_overhead at the config's steps per call, and at 4 (suffixed _4)."""
    from prover_jax.sampling import Driver
    out = decode_overhead(sft_dir, demo_config().rollout.get("decode_steps_per_call", 1))
    if "steps_per_call" not in inspect.signature(Driver).parameters:  # an older driver: one step per call
        return out
    out.update({f"{k}_4": v for k, v in decode_overhead(sft_dir, 4).items() if k != "decode_step_ms"})
    return out


def main(argv):
    import numpy as np

    from prover_jax.distributed import keep_host_memory
    del argv
    if FLAGS.keep_host_memory:
        keep_host_memory()
    import jax
    from absl import logging
    logging.set_verbosity(logging.WARNING)
    jax.config.update("jax_platforms", "cpu")
    if FLAGS.smoke:
        smoke_flags()
    root = os.path.abspath(os.path.join(FLAGS.workdir, "smoke") if FLAGS.smoke else FLAGS.workdir)
    os.makedirs(root, exist_ok=True)
    load_before = os.getloadavg()
    print(f"load before: {load_before}", flush=True)
    server, base_url = start_endpoint(FLAGS.judge_latency_s)
    try:
        sft_dir = sft_policy(root)
        results = time_variants(FLAGS.variants, sft_dir, root, base_url)
        overhead = decode_overheads(sft_dir)
    finally:
        server.shutdown()
    load_after = os.getloadavg()
    print(f"load after: {load_after}")
    print(f"{'variant':<15}{'step_s':>8}{'min':>7}{'max':>7}{'elig':>6}{'rollout':>9}{'judge':>7}"
          f"{'verify':>8}{'update':>8}")
    for name, r in results.items():
        print(f"{name:<15}{r['step_s']:8.2f}{r['step_min_s']:7.2f}{r['step_max_s']:7.2f}{r['eligible_frac']:6.2f}"
              f"{r.get('time/rollout_s', 0):9.2f}{r.get('time/judge_s', 0):7.2f}{r.get('time/verify_s', 0):8.2f}"
              f"{r.get('time/update_s', 0):8.2f}")
    out = {"load_before": load_before[0], "load_after": load_after[0]}  # 1-minute averages
    g = results.get("grpo")
    for name in ("prover", "prover_nospec", "prover_ctx", "prover_openai"):
        if name in results:
            out[f"{name}_step_s"] = results[name]["step_s"]
            if g:
                out[f"{name}_over_grpo"] = results[name]["step_s"] / g["step_s"]
                out[f"{name}_over_grpo_median"] = results[name]["step_median_s"] / g["step_median_s"]
                # paired: the two steps of each round (a machine's drift falls on both), median and range
                rounds = [p / q for p, q in zip(results[name]["steps_s"], g["steps_s"])]
                out[f"{name}_over_grpo_paired"] = [float(np.median(rounds)), min(rounds), max(rounds)]
                out[f"{name}_over_grpo_ci95"] = ratio_interval(results[name]["steps_s"], g["steps_s"])
    if g:
        out["grpo_step_s"] = g["step_s"]
        out["rollout_tokens_per_s"] = g["rollout_tokens_per_s"]
    for name in ("grpo", "prover"):  # packed vs one episode per row: the update's time and the batch fill
        packed = results.get(f"{name}_packed")
        if packed and name in results:
            out[f"{name}_packed_step_s"] = packed["step_s"]
            out[f"{name}_packed_update_over_unpacked"] = (packed.get("time/update_s", 0)
                                                          / max(results[name].get("time/update_s", 0), 1e-9))
    prover = [results[n] for n in ("prover", "prover_openai") if n in results]
    if prover:
        out["eligible_frac"] = sum(r["eligible_frac"] for r in prover) / len(prover)
    out.update(overhead)
    out["variants"] = results
    print(json.dumps(out))


def ratio_interval(num_s, den_s, resamples: int = 2000) -> list[float]:
    """95% bootstrap interval of mean(num) / mean(den) over rounds (each round's two steps resampled
    together, seed 0)."""
    import numpy as np

    num, den = np.asarray(num_s), np.asarray(den_s)
    idx = np.random.default_rng(0).integers(0, len(num), (resamples, len(num)))
    ratios = num[idx].mean(1) / den[idx].mean(1)
    return [float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))]


if __name__ == "__main__":
    app.run(main)
