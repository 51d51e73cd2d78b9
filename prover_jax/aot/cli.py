"""`prover-aot`: compile a config's programs for a TPU slice on this (CPU) host and report what the
TPU compiler says about them, one JSON line per program.

    prover-aot --config=configs/qwen3_5.py:2B,alfworld,v6e-8 [--fn=train_step,generate,prefill]
               [--topology=v6e-8]      # default: config.accelerator
               [--bytes_by_op=N]       # each row: the N jax ops with the most HBM bytes
               [--fill=bench/results/packing_fill/qwen3_5_2b_alfworld_scripted.jsonl]  # real tokens

Fields: per_device_gib = argument + output - aliased + temporary bytes per chip (memory_analysis);
fits = per_device_gib <= hbm_gib; headroom = 1 - per_device / hbm. With a judge served beside training
(judge.serve), judge_generate / judge_prefill are its engine's programs; logprob is the reference /
proximal log-prob pass (compiled by default when the config uses one). With either, a last `together`
row adds up what one chip holds at once (`together`'s docstring). flops_per_device = the jaxpr's
matmul flops (loops counted per iteration) / chips; xla_flops_per_device is the compiler's own count,
which counts a loop body once (loop_factor = their ratio). bytes_accessed_per_device = HBM bytes read
and written per chip, from the optimised HLO with while bodies times their trip counts (hlo_bytes;
arrays the compiler keeps in VMEM left out); the compiler's own (loops once, VMEM included) beside it
as xla_bytes_accessed_per_device. collective_bytes_per_device = what the collectives move per chip.
estimated_s = roofline max(flops / peak, bytes / HBM bandwidth, collective bytes / ICI bandwidth)
(`bound` says which: compute, memory or interconnect);
the compiler's optimal_seconds beside it only when positive. Pallas kernels (splash attention) give
no flop count: their analytic flops are added (kernel_flops_per_device). estimated_mfu = model_flops (analytic
6 N T + attention, 4 N T + attention with a frozen base (LoRA: no weight gradients), per chip) /
(estimated_s x peak). For generate, hbm_floor_s = the argument bytes a step reads (weights + cache +
state, once per step; an untied embedding table, of which it gathers a row per slot, left out:
unread_gib) / HBM bandwidth.

Packed rows (train.max_tokens_per_row > 0): one train_step row per micro-batch bucket (`bucket`: its
micro-batch count, `rows`), then a `train_buckets` row with the bucket list, each bucket's compile_s
and compile_s_total. --fill (a `bench/packing_fill.py --scripted` record, one step per line) adds
each train_step row's fill, real_tokens_per_step and s_per_1k_real_tokens = estimated_s / (real tokens
per step / 1000), and to `train_buckets` the steps' micro-batch counts before and after bucketing,
their padding_waste and the distribution's s_per_1k_real_tokens (prover_jax.aot.fill).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time


def analyse(prog, compiled, hlo_text: str, chip, n_devices: int, compile_s: float, counted: dict,
            by_op: int = 0) -> dict:
    from prover_jax.aot.chips import GIB
    from prover_jax.aot.hlo_bytes import bytes_accessed
    mem = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = (cost[0] if isinstance(cost, (list, tuple)) else cost) or {}
    per_device = (mem.argument_size_in_bytes + mem.output_size_in_bytes - mem.alias_size_in_bytes
                  + mem.temp_size_in_bytes)
    xla_flops = float(cost.get("flops", 0.0))
    kernel = prog.kernel_flops if counted["pallas_calls"] and not counted["pallas_flops"] else 0.0
    flops = (counted["flops"] + kernel) / n_devices
    loop_factor = flops / xla_flops if xla_flops > 0 and flops > xla_flops else 1.0
    hbm = bytes_accessed(hlo_text, by_op=by_op)
    bytes_ = hbm["bytes"]
    times = {"compute": flops / chip.peak_flops, "memory": bytes_ / chip.hbm_bandwidth,
             "interconnect": hbm["collective_bytes"] / chip.ici_bandwidth}
    est = max(times.values())
    out = {
        "fn": prog.fn, "mesh": dict(zip(prog.mesh.axis_names, map(int, prog.mesh.devices.shape))),
        "per_device_gib": round(per_device / GIB, 3), "hbm_gib": round(chip.hbm_bytes / GIB, 1),
        "fits": per_device <= chip.hbm_bytes, "headroom": round(1 - per_device / chip.hbm_bytes, 3),
        "argument_gib": round(mem.argument_size_in_bytes / GIB, 3),
        "temp_gib": round(mem.temp_size_in_bytes / GIB, 3),
        "flops_per_device": flops, "xla_flops_per_device": xla_flops, "loop_factor": round(loop_factor, 2),
        "while_loops_uncounted": counted["while_loops"],
        "bytes_accessed_per_device": bytes_, "xla_bytes_accessed_per_device": float(cost.get("bytes accessed", 0.0)),
        "unknown_trip_counts": hbm["unknown_trip_counts"],
        "collective_bytes_per_device": hbm["collective_bytes"],
        "estimated_s": est, "bound": max(times, key=times.get),
        "estimated_mfu": round(prog.model_flops / n_devices / (est * chip.peak_flops), 4) if est else None,
        "model_flops_per_device": prog.model_flops / n_devices, "kernel_flops_per_device": kernel / n_devices,
        "tokens_per_s_per_chip": round(prog.tokens / n_devices / est, 1) if est else None,
        "compile_s": round(compile_s, 1),
    }
    if prog.bucket:
        out["bucket"] = prog.bucket
        out["rows"] = prog.bucket * prog.args[1]["tokens"].shape[1]
    if by_op:
        out["bytes_by_op"] = hbm["by_op"]
    opt = cost.get("optimal_seconds")
    if opt is not None and opt > 0:
        out["optimal_seconds"] = opt
    if prog.fn == "logprob":
        out["params_gib"] = round(prog.params_bytes / GIB, 6)
        out["resident_gib"] = round(prog.resident_bytes / GIB, 6)
    if prog.fn == "generate":
        out["unread_gib"] = round(prog.unread_bytes / GIB, 6)  # e.g. an untied embedding: rows gathered
        out["hbm_floor_s"] = (mem.argument_size_in_bytes - prog.unread_bytes) / chip.hbm_bandwidth
        out["vs_floor"] = round(est / out["hbm_floor_s"], 2) if out["hbm_floor_s"] else None
    return out


def run(config, topology: str, fns, hlo_dir: str = "", by_op: int = 0, fill: str = "") -> list[dict]:
    """Compiles each program for `topology`; returns their report dicts (also on stdout as JSON).
    With `hlo_dir`, each compiled program's HLO text is written there as FN.hlo.txt; with by_op > 0,
    each row's bytes_by_op lists the by_op jax ops that read and write the most HBM bytes; with `fill`,
    a packing_fill record, the train_step rows' seconds per 1k real tokens (prover_jax.aot.fill)."""
    from prover_jax.aot.chips import parse_slice, slice_devices
    from prover_jax.aot.fill import buckets_row, read_steps, train_row_figures
    from prover_jax.aot.flops import count
    from prover_jax.aot.programs import programs

    s = parse_slice(topology)
    devices = slice_devices(s)
    steps = read_steps(fill, config) if fill else None
    rows = []
    for prog in programs(config, devices, fns):
        n = prog.mesh.devices.size
        t0 = time.perf_counter()
        traced = prog.jitted.trace(*prog.args)
        counted = count(traced.jaxpr)
        try:
            compiled = traced.lower().compile()
        except Exception as e:  # noqa: BLE001 - e.g. the compiler's own out-of-memory: report it
            text = str(e).splitlines()[0][:500] if str(e) else ""
            row = {"fn": prog.fn, "topology": s.name, "fits": False, "error": f"{type(e).__name__}: {text}",
                   "compile_s": round(time.perf_counter() - t0, 1), **({"bucket": prog.bucket} if prog.bucket else {})}
            oom = re.search(r"required for (.+?) \(([\d.]+)G\) exceeds available HBM \(([\d.]+)G\)", text)
            if oom:  # the TPU compiler refuses programs over HBM and says by how much
                row.update(what_exceeds=oom.group(1), required_gib=float(oom.group(2)),
                           hbm_gib=float(oom.group(3)))
        else:
            compile_s = time.perf_counter() - t0
            text = compiled.as_text()  # megabytes for a real model: rendered once
            if hlo_dir:
                os.makedirs(hlo_dir, exist_ok=True)
                name = f"{prog.fn}_{prog.bucket}" if prog.bucket else prog.fn
                with open(os.path.join(hlo_dir, f"{name}.hlo.txt"), "w") as f:
                    f.write(text)
            row = dict(fn=prog.fn, topology=s.name, **{k: v for k, v in analyse(
                prog, compiled, text, s.chip, n, compile_s, counted, by_op).items() if k != "fn"})
        row["libtpu_init_args"] = os.environ.get("LIBTPU_INIT_ARGS", "")  # the compiler flags it ran under
        if prog.fn == "train_step" and steps:
            row.update(train_row_figures(config, row, steps))
        print(json.dumps(row), flush=True)
        rows.append(row)
    for row in (buckets_row(config, rows, steps, fill), together(rows, s.name)):
        if row is not None:
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def together(rows: list[dict], topology: str) -> dict | None:
    """What one chip of the first host holds at once, when the run has more than the train step and
    the rollout engine on it (a judge served beside training, or a log-prob pass):

        peak = max(update, logprob pass) + generate's arguments (the engine's resident weights and state)
               + judge_generate's peak
        update = train_step's peak + the reference params (held all run with loss.kl_coef > 0)
        logprob pass = its peak - the params it scores + train_step's arguments + the reference params

    None without train_step, generate and one of judge_generate / logprob."""
    by = {r["fn"]: r for r in sorted((r for r in rows if "per_device_gib" in r), key=lambda r: r["per_device_gib"])}
    if not {"train_step", "generate"} <= set(by) or not {"judge_generate", "logprob"} & set(by):
        return None
    train, parts = by["train_step"], {}
    peak = parts["train_step"] = train["per_device_gib"]
    if "logprob" in by:
        lp = by["logprob"]
        parts["reference_resident"] = lp["resident_gib"]
        parts["logprob_pass"] = round(lp["per_device_gib"] - lp["params_gib"] + train["argument_gib"], 3)
        peak = max(peak, parts["logprob_pass"]) + lp["resident_gib"]
    parts["generate_resident"] = by["generate"]["argument_gib"]
    gib = peak + parts["generate_resident"]
    if "judge_generate" in by:
        parts["judge_generate"] = by["judge_generate"]["per_device_gib"]
        gib += parts["judge_generate"]
    hbm = train["hbm_gib"]
    return {"fn": "together", "topology": topology, "per_device_gib": round(gib, 3), "hbm_gib": hbm,
            "fits": gib <= hbm, "headroom": round(1 - gib / hbm, 3), "parts_gib": parts}


def main(argv=None):
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the TPU is only a compile target here
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")  # no TPU VM metadata to probe
    from absl import app, flags
    from ml_collections import config_flags

    from prover_jax.aot.programs import FNS
    flags.DEFINE_string("fn", "", f"comma-separated, some of {', '.join(FNS)} (default: those a run of "
                        f"the config compiles; the judge's when judge.serve sets one)")
    flags.DEFINE_string("topology", "", "TPU slice, e.g. v6e-8, v5p-16 (default: config.accelerator)")
    flags.DEFINE_string("hlo_dir", "", "write each compiled program's HLO text to this folder")
    flags.DEFINE_string("fill", "", "a `bench/packing_fill.py --scripted` record: each train_step row's "
                        "s_per_1k_real_tokens over its steps' real tokens, and packed, the buckets' padding waste")
    flags.DEFINE_integer("bytes_by_op", 0, "> 0: each row lists this many jax ops with the most HBM bytes "
                         "(bytes_by_op: [op, bytes] pairs, loop trip counts included)", lower_bound=0)
    config_flags.DEFINE_config_file("config", None, "a prover config file[:args]", lock_config=False)
    FLAGS = flags.FLAGS

    def _main(_):
        import jax

        config = FLAGS.config
        if config is None:
            raise app.UsageError("--config is required")
        topology = FLAGS.topology or config.get("accelerator") or ""
        if not topology:
            raise app.UsageError("no --topology and the config sets no accelerator")
        # no persistent compilation cache (JAX_COMPILATION_CACHE_DIR): an executable for chips this
        # host lacks cannot be loaded back from it, and compile_s is the compiler's own time
        jax.config.update("jax_enable_compilation_cache", False)
        try:
            run(config, topology, [f.strip() for f in FLAGS.fn.split(",") if f.strip()] or None, FLAGS.hlo_dir,
                FLAGS.bytes_by_op, FLAGS.fill)
        except (ValueError, RuntimeError) as e:
            print(f"prover-aot: {e}", file=sys.stderr)
            sys.exit(2)

    app.run(_main, argv=argv)


if __name__ == "__main__":
    main()
