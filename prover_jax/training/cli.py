"""`prover-train`: SFT warm start + GRPO / ProVer RL from a config file; resumable.

    prover-train --config=configs/demo.py --workdir=/tmp/run [--config.train.steps=20]
    prover-train --config=/tmp/run/config.json --workdir=/tmp/run2   # the same run again (W/config.json)
                 [--export_hf=DIR] [--eval_only] [--noprogress] [--third_party_logs]
    # one process per host of a pod (TPU pods need none of the three flags: auto-detected)
    prover-train --config=C --workdir=gs://bucket/run --coordinator_address=HOST0:8476
                 --num_processes=2 --process_id=I

Re-running the same command after an interruption resumes from the last checkpoint in
WORKDIR/checkpoints. Writes WORKDIR/metrics.jsonl (one line per optimizer step, one per evaluation),
the same scalars to train.loggers (TensorBoard event files in WORKDIR/tensorboard/ by default; wandb, trackio),
WORKDIR/summary.json and WORKDIR/progress.png; prints a progress bar with the live figures, then the
summary as JSON and a short block of the figures that matter. Third-party INFO logging (orbax, jax,
absl, ...) is off: --third_party_logs brings it back (prover_jax/training/logs.py).
"""

from __future__ import annotations

import json
import os
import sys

from absl import app, flags
from ml_collections import config_flags

from prover_jax.training.logs import quiet_third_party

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Trainer config file (see configs/).", lock_config=True)
flags.DEFINE_string("workdir", None, "Run folder: checkpoints, metrics, tokenizer, plots.")
flags.DEFINE_string("export_hf", None, "Export the final policy as an HF folder here.")
flags.DEFINE_bool("eval_only", False, "Only evaluate the current policy (greedy, held-out seeds).")
flags.DEFINE_bool("progress", True, "Show a progress bar with live figures.")
flags.DEFINE_string("coordinator_address", None, "Multi-process runs: HOST:PORT of process 0's "
                    "coordinator (Cloud TPU pods: leave unset, everything is auto-detected).")
flags.DEFINE_integer("num_processes", None, "Multi-process runs: how many processes (hosts).")
flags.DEFINE_integer("process_id", None, "Multi-process runs: this process's index, 0 .. N-1.")
flags.DEFINE_integer("distributed_timeout_s", 100, "A process whose peers stop answering for this "
                     "long exits with an error (instead of hanging).")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if FLAGS.config is None or FLAGS.workdir is None:
        raise app.UsageError("--config and --workdir are required")
    quiet_third_party(FLAGS.third_party_logs)
    from prover_jax import distributed
    from prover_jax.training.run import summary_block, train

    distributed.initialize(FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id,
                           heartbeat_timeout_s=FLAGS.distributed_timeout_s)
    summary = train(FLAGS.config, FLAGS.workdir, FLAGS.export_hf, FLAGS.eval_only, FLAGS.progress)
    print(json.dumps(summary, indent=1))
    if "success_after_rl" in summary and distributed.is_primary():
        print(summary_block(summary))


def json_config_argv(argv: list[str]) -> list[str]:
    """`--config=W/config.json` (a run folder's resolved config) read through `json_config.py`, so
    ml_collections' config-file flag takes it like a Python config file."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "json_config.py")
    out = list(argv)
    for i, a in enumerate(out):
        if a.startswith("--config=") and a.endswith(".json"):
            out[i] = f"--config={here}:{a[len('--config='):]}"
        elif a == "--config" and i + 1 < len(out) and out[i + 1].endswith(".json"):
            out[i + 1] = f"{here}:{out[i + 1]}"
    return out


def run(argv=None):
    app.run(main, argv=json_config_argv(sys.argv if argv is None else argv))


if __name__ == "__main__":
    run()
