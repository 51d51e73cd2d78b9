"""The decode step's dense matmuls alone, under each dot kernel XLA:CPU offers, against torch's.

    python bench/cpu_dots.py [--rows=16] [--hidden=512] [--ffn=1536] [--layers=8] [--rounds=5]
    python bench/cpu_dots.py --smoke        # tiny shapes, one round: checks that every row runs

A decode step of bench-small is ~85% matmuls of 16 rows against its weights (`decode_profile.py`).
This times those matmuls without the rest: `layers` MLP blocks, x + (silu(x Wg) * (x Wu)) Wd, fp32,
as one jitted program per XLA:CPU dot kernel (chosen per program with `compiler_options`, as the
engine would): YNNPACK (the default) and XLA's own dots (Eigen); and the same blocks in
torch (its default GEMM, all cores). The kernels take turns for `rounds` rounds; each figure is the
median of `calls` calls per round, then the median over rounds (min-max across rounds alongside).
Prints one JSON line: ms per call, GFLOP/s (2 x rows x weights per call) and GB/s of weights read.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_integer("rows", 16, "Rows of x (slots decoding at once).")
flags.DEFINE_integer("hidden", 512, "x's width (bench-small: 512).")
flags.DEFINE_integer("ffn", 1536, "The MLP's inner width (bench-small: 1536).")
flags.DEFINE_integer("layers", 8, "MLP blocks per call.")
flags.DEFINE_integer("rounds", 5, "Rounds in which every kernel takes a turn.")
flags.DEFINE_integer("calls", 20, "Timed calls per kernel and round.")
flags.DEFINE_bool("smoke", False, "Tiny shapes, one round of 3 calls.")

# XLA:CPU's dot kernels, as per-program compiler options (DebugOptions fields)
KERNELS = {
    "xla_ynnpack": {},
    "xla_eigen": {"xla_cpu_experimental_ynn_fusion_type": ""},
}
# (oneDNN dots, xla_cpu_use_onednn with its fusion type DOT, died of SIGILL on a Zen 4 host; XNNPACK's
# fusion type left the dots as XLA's own in jaxlib 0.10.2)


def timed(fn, calls: int) -> float:
    ts = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def jax_runner(weights, x, options):
    import jax

    def blocks(x, weights):
        for g, u, d in weights:
            x = x + (jax.nn.silu(x @ g) * (x @ u)) @ d * 1e-3
        return x

    weights, x = jax.device_put((weights, x))  # on the device once, as the engine's weights are
    compiled = jax.jit(blocks, compiler_options=options or None).lower(x, weights).compile()
    kinds = sorted(set(re.findall(r'"kind":"(__\w+)"', compiled.as_text()))) or ["xla dot"]  # what the dots became
    compiled(x, weights).block_until_ready()
    return (lambda: compiled(x, weights).block_until_ready()), kinds


def torch_runner(weights, x):
    import torch
    tw = [tuple(torch.from_numpy(w) for w in layer) for layer in weights]
    tx = torch.from_numpy(x)

    def run():
        with torch.no_grad():
            y = tx
            for g, u, d in tw:
                y = y + (torch.nn.functional.silu(y @ g) * (y @ u)) @ d * 1e-3
        return y

    run()
    return run


def main(_):
    import numpy as np
    if FLAGS.smoke:
        rows, hidden, ffn, layers, rounds, calls = 4, 64, 128, 2, 1, 3
    else:
        rows, hidden, ffn, layers, rounds, calls = (FLAGS.rows, FLAGS.hidden, FLAGS.ffn, FLAGS.layers,
                                                    FLAGS.rounds, FLAGS.calls)
    rng = np.random.default_rng(0)
    weights = [tuple((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
                     for shape in ((hidden, ffn), (hidden, ffn), (ffn, hidden))) for _ in range(layers)]
    x = rng.standard_normal((rows, hidden)).astype(np.float32)
    runners, kinds = {}, {}
    for name, opts in KERNELS.items():
        runners[name], kinds[name] = jax_runner(weights, x, opts)
    runners["torch"], kinds["torch"] = torch_runner(weights, x), ["torch"]
    seconds = {name: [] for name in runners}
    for _ in range(rounds):
        for name, run in runners.items():
            seconds[name].append(timed(run, calls))
    n_weights = layers * 3 * hidden * ffn
    out = {"rows": rows, "hidden": hidden, "ffn": ffn, "layers": layers, "rounds": rounds, "calls": calls,
           "load": os.getloadavg()[0], "cpus": os.cpu_count(), "kernels": {}}
    for name, ss in seconds.items():
        s = statistics.median(ss)
        out["kernels"][name] = {"compiled_as": kinds[name], "ms": s * 1e3, "ms_min_max": [min(ss) * 1e3, max(ss) * 1e3],
                                "gflop_s": 2 * rows * n_weights / s / 1e9, "weight_gb_s": 4 * n_weights / s / 1e9}
    print(json.dumps(out))


if __name__ == "__main__":
    app.run(main)
