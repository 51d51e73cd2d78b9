"""Where a trainer's memory mappings come from: /proc/self/maps counted as one process builds a trainer,
compiles its programs and runs RL steps, split by kind, and what freeing the compiled programs returns.

    python bench/map_count.py [--workdir=runs/bench_map_count] [--steps=3] [--every=1] [--config=configs/demo.py]
                              [--trainers=1]

With --trainers=N, N trainers of the config are built in the one process (as bench/rl_step.py's variants
are) and each takes its RL steps in turn: the engines of one shape share their compiled programs
(sampling/programs.py), so every trainer after the first adds only its own update programs.

Each row: the stage, the mappings held (and the delta), the executable anonymous mappings (JIT code:
XLA:CPU maps each compiled program's kernels itself), the other anonymous ones and the file-backed ones.
The last line is one JSON object with every row. Linux only (/proc/self/maps).
"""

from __future__ import annotations

import collections
import gc
import json
import os
import shutil
import sys

from absl import app, flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", "runs/bench_map_count", "Run folder (deleted first).")
flags.DEFINE_string("config", "configs/demo.py", "Trainer config file[:its argument].")
flags.DEFINE_integer("steps", 3, "RL steps.")
flags.DEFINE_integer("every", 1, "A row after every this many RL steps (and after the first and the last).")
flags.DEFINE_integer("trainers", 1, "Trainers of the config built in this one process.")


def maps() -> dict[str, int]:
    """Mappings of this process by kind: exec_anon (r-x, no file: JIT code), anon (other, no file),
    file (backed by a file: libraries, mmapped data)."""
    kinds = collections.Counter()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            perms, path = parts[1], parts[5] if len(parts) > 5 else ""
            if path and not path.startswith("["):
                kinds["file"] += 1
            elif "x" in perms:
                kinds["exec_anon"] += 1
            else:
                kinds["anon"] += 1
    kinds["total"] = sum(kinds.values())
    return dict(kinds)


def main(argv):
    del argv
    rows = []

    def note(stage):
        m = maps()
        prev = rows[-1]["total"] if rows else 0
        rows.append({"stage": stage, **m, "delta": m["total"] - prev})
        print(f"{stage:<34} {m['total']:>7} ({m['total'] - prev:+6}) exec_anon {m.get('exec_anon', 0):>6} "
              f"anon {m.get('anon', 0):>6} file {m.get('file', 0):>5}", flush=True)

    note("start")
    import jax
    from prover_jax.training.config import load_config_file
    from prover_jax.training.trainer import Trainer
    jax.devices()
    note("jax imported, backend up")
    path, _, arg = FLAGS.config.partition(":")  # FILE[:ARG], as --config takes it
    c = load_config_file(path, arg or None)
    c.sft.steps = 0
    c.train.steps = FLAGS.steps
    c.train.loggers = ()
    shutil.rmtree(FLAGS.workdir, ignore_errors=True)
    many = FLAGS.trainers > 1
    trainers = []
    for i in range(FLAGS.trainers):
        trainers.append(Trainer(c, os.path.join(FLAGS.workdir, f"t{i}") if many else FLAGS.workdir))
        note(f"trainer {i + 1} built (sampler compiled)" if many else "trainer built (sampler compiled)")
    compiles = [0] * len(trainers)  # compilations since the last row, per trainer
    for k in range(FLAGS.steps):
        for i, t in enumerate(trainers):
            compiles[i] += int(t.rl_step()["compiles"])
            if k == 0 or (k + 1) % FLAGS.every == 0 or k + 1 == FLAGS.steps:
                note(f"after RL step {k + 1}" + (f" of trainer {i + 1}" if many else "") + f" ({compiles[i]} compiles)")
                compiles[i] = 0
    for t in trainers:
        t.evaluate(8)
    note("after an evaluation" + (" by each" if many else ""))
    for t in trainers:
        t.close()
    del t, trainers
    gc.collect()
    note("trainers closed" if many else "trainer closed")
    jax.clear_caches()
    gc.collect()
    note("jax.clear_caches()")
    print(json.dumps({"rows": rows, "max_map_count": int(open("/proc/sys/vm/max_map_count").read())}))


if __name__ == "__main__":
    app.run(main)
