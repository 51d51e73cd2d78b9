"""Does a CPU train step sharded over two processes (gloo) hang when read back from jax's persistent
compilation cache?

    python bench/jax_cache_hang.py [--variant=plain|step|aot] [--timeout_s=90] [--cache_dir=DIR]

Starts 2 local processes (this file with --worker), each with 2 CPU devices, joined by
`jax.distributed.initialize` on 127.0.0.1 with gloo collectives, so one global mesh of 4 devices
on the axis 'data'. Each runs one train step of a tiny MLP, once: params replicated, batch sharded
on 'data', loss = mean((mlp(params, x) - y)^2), params <- params - lr * grad (the gradient's mean
over the batch is the cross-process all-reduce). Three runs, each under `timeout_s`:

    cold     persistent cache on, empty folder: compiles, process 0 writes the cache
    warm     the same folder: what finds its entry there reads it back
    off      persistent cache off: the control

Variants, in order of closeness to the trainer's step:
    plain    jax.jit(train_step) with shardings inferred from the arguments
    step     in/out shardings fixed, the state donated, the gradient a jax.lax.scan over 4 micro-batches
    aot      `step`, compiled ahead with jax.jit(...).lower(...).compile()

Prints one line per run (jax version, cache entries before, finished / timed_out / failed, wall
seconds, persistent-cache hits and last stage reached per process), then one JSON line with the runs
and "reproduced": true when warm hangs where cold and off finish. Worker logs (with a Python stack
dump of a hung process) are kept in the log_dir the JSON names.

Measured on 2 busy host cores, timeout 90 s (cold / warm / off):
    jax 0.12.1 (.venv312)  plain, step, aot: finished / timed_out / finished -> reproduced
    jax 0.10.2 (.venv)     plain, step, aot: finished / finished / finished  (4-7 s each)
In the warm run process 0 reads the step back (1 hit) and process 1 compiles it afresh (0 hits):
only process 0 writes the cache, and on CPU the cache key hashes each process's own topology
fingerprint, so the keys differ. Both then dispatch the step and block in the read of its result,
waiting on gloo. Under 0.12.1 it is the mix that hangs, checked by hand with the aot variant: the
two executables print the same HLO (metadata aside); with process 0's entry copied under process
1's key (found with JAX_DEBUG_LOG_MODULES=jax._src.cache_key) both read it back and the step
finishes; process 0 with the cache off and process 1 reading that copy back hangs again.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_enum("variant", "plain", ["plain", "step", "aot"], "Which train step (see the docstring).")
flags.DEFINE_integer("timeout_s", 90, "Seconds a run may take before its processes are killed.")
flags.DEFINE_string("cache_dir", "", "An empty folder for the persistent cache; a fresh temporary one if unset.")
flags.DEFINE_bool("control", True, "Also run with the persistent cache off.")
# worker-side flags, set by the launcher
flags.DEFINE_bool("worker", False, "Run as one of the processes (set by the launcher).")
flags.DEFINE_integer("process_id", 0, "This worker's process id.")
flags.DEFINE_string("coordinator", "", "HOST:PORT of process 0.")
flags.DEFINE_string("worker_cache_dir", "", "The persistent cache folder; empty: cache off.")

NUM_PROCESSES = 2
LOCAL_DEVICES = 2
BATCH, D_IN, D_HIDDEN, MICRO = 32, 16, 32, 4
LR = 0.1


def _worker() -> None:
    faulthandler.dump_traceback_later(max(FLAGS.timeout_s - 15, 5))  # where a hung process waits
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    hits = []
    jax.monitoring.register_event_listener(
        lambda event, **kw: hits.append(event) if event == "/jax/compilation_cache/cache_hits" else None)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if FLAGS.worker_cache_dir:
        jax.config.update("jax_compilation_cache_dir", FLAGS.worker_cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    else:
        jax.config.update("jax_enable_compilation_cache", False)
    jax.distributed.initialize(FLAGS.coordinator, NUM_PROCESSES, FLAGS.process_id,
                               initialization_timeout=60)
    mesh = Mesh(np.array(jax.devices()), ("data",))
    replicated, by_row = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))

    rng = np.random.default_rng(0)  # the same host values in every process
    host = {"w1_DxH": rng.normal(size=(D_IN, D_HIDDEN)) / np.sqrt(D_IN),
            "w2_H": rng.normal(size=(D_HIDDEN,)) / np.sqrt(D_HIDDEN),
            "x_BxD": rng.normal(size=(BATCH, D_IN)), "y_B": rng.normal(size=(BATCH,))}
    host = {k: v.astype(np.float32) for k, v in host.items()}

    def global_array(name, sharding):
        value = host[name]
        return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])

    params = {k: global_array(k, replicated) for k in ("w1_DxH", "w2_H")}
    batch = {k: global_array(k, by_row) for k in ("x_BxD", "y_B")}

    def loss_fn(params, batch):
        h_BxH = jnp.tanh(batch["x_BxD"] @ params["w1_DxH"])
        return jnp.mean((h_BxH @ params["w2_H"] - batch["y_B"]) ** 2)

    def plain_step(params, batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        return jax.tree.map(lambda p, g: p - LR * g, params, grads), {"loss": loss}

    def scan_step(params, batch):
        micro = jax.tree.map(lambda a: a.reshape(MICRO, a.shape[0] // MICRO, *a.shape[1:]), batch)
        micro = jax.lax.with_sharding_constraint(micro, NamedSharding(mesh, P(None, "data")))

        def accumulate(carry, mb):
            loss, grads = jax.value_and_grad(loss_fn)(params, mb)
            return jax.tree.map(jnp.add, carry, (loss, grads)), None

        zeros = (jnp.zeros(()), jax.tree.map(jnp.zeros_like, params))
        (loss, grads), _ = jax.lax.scan(accumulate, zeros, micro)
        new = jax.tree.map(lambda p, g: p - LR * g / MICRO, params, grads)
        return new, {"loss": loss / MICRO}

    if FLAGS.variant == "plain":
        step = jax.jit(plain_step)
    else:
        step = jax.jit(scan_step, in_shardings=(replicated, by_row),
                       out_shardings=(replicated, replicated), donate_argnums=0)
        if FLAGS.variant == "aot":
            step = step.lower(params, batch).compile()

    def report(**fields):
        print(json.dumps({"process": FLAGS.process_id, "cache_hits": len(hits), **fields}), flush=True)

    start = time.perf_counter()
    params, metrics = step(params, batch)  # compiled or read back, then dispatched
    report(stage="dispatched")
    loss = float(metrics["loss"])  # a hung step blocks here
    report(stage="done", loss=loss, step_s=round(time.perf_counter() - start, 2))
    faulthandler.cancel_dump_traceback_later()
    jax.distributed.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(name: str, cache_dir: str, log_dir: str) -> dict:
    """Starts the processes, waits up to timeout_s, kills their process groups past it."""
    entries = len(os.listdir(cache_dir)) if cache_dir else None
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={LOCAL_DEVICES}")
    coordinator = f"127.0.0.1:{_free_port()}"
    logs = [open(os.path.join(log_dir, f"{FLAGS.variant}_{name}_{i}.log"), "w+") for i in range(NUM_PROCESSES)]
    start = time.perf_counter()
    procs = [subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--worker", f"--process_id={i}",
         f"--coordinator={coordinator}", f"--worker_cache_dir={cache_dir}", f"--variant={FLAGS.variant}",
         f"--timeout_s={FLAGS.timeout_s}"],
        env=env, stdout=logs[i], stderr=subprocess.STDOUT, start_new_session=True)
        for i in range(NUM_PROCESSES)]
    deadline = start + FLAGS.timeout_s
    while time.perf_counter() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.2)
    timed_out = any(p.poll() is None for p in procs)
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    seconds = time.perf_counter() - start

    workers = []
    for log in logs:
        log.seek(0)
        text = log.read()
        log.close()
        rows = [json.loads(line) for line in text.splitlines() if line.startswith('{"process"')]
        workers.append(rows[-1] if rows else {"stage": "none", "tail": text.strip().splitlines()[-8:]})
    finished = (not timed_out and all(p.returncode == 0 for p in procs)
                and all(w["stage"] == "done" for w in workers))
    outcome = "timed_out" if timed_out else "finished" if finished else "failed"
    return {"run": name, "cache_entries_before": entries, "outcome": outcome, "seconds": round(seconds, 1),
            "returncodes": [p.returncode for p in procs], "workers": workers}


def main(argv):
    del argv
    if FLAGS.worker:
        return _worker()
    import jax

    cache_dir = FLAGS.cache_dir or tempfile.mkdtemp(prefix="jax_cache_hang_")
    os.makedirs(cache_dir, exist_ok=True)
    if os.listdir(cache_dir):
        raise SystemExit(f"--cache_dir={cache_dir} must be empty")
    log_dir = tempfile.mkdtemp(prefix="jax_cache_hang_logs_")
    runs = [("cold", cache_dir), ("warm", cache_dir)] + ([("off", "")] if FLAGS.control else [])
    results = []
    for name, folder in runs:
        r = _run(name, folder, log_dir)
        results.append(r)
        hits = [w.get("cache_hits") for w in r["workers"]]
        stages = [w["stage"] for w in r["workers"]]
        print(f"jax {jax.__version__} variant={FLAGS.variant} run={name}: cache entries before="
              f"{r['cache_entries_before']}, {r['outcome']} in {r['seconds']} s, cache hits per process={hits}, "
              f"last stage per process={stages}", flush=True)
    by_name = {r["run"]: r["outcome"] for r in results}
    reproduced = (by_name["cold"] == "finished" and by_name["warm"] == "timed_out"
                  and by_name.get("off", "finished") == "finished")
    print(json.dumps({"jax": jax.__version__, "variant": FLAGS.variant, "timeout_s": FLAGS.timeout_s,
                      "cache_dir": cache_dir, "log_dir": log_dir, "runs": results, "reproduced": reproduced}))


if __name__ == "__main__":
    app.run(main)
