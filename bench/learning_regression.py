"""The learning-regression probe: does GRPO lift training success on a fixed small task set from a
fixed weak start, and do its two broken variants (advantage sign flipped; sampler never given the
updated weights) not? Prints one JSON line per variant.

    python bench/learning_regression.py [--steps=10] [--lr=4e-4] [--tasks=4] [--wrong_copies=3] \
        [--sft_steps=200] [--episodes=16] [--aggregation=token-mean] [--words] \
        [--variants=grpo,flipped,frozen] [--workdir=DIR]

The probe (start, tasks, paired measurement) is tests/helpers/learning_probe.py, which the
`make test` regression test (tests/credit/test_learning_regression.py) runs with the defaults.
bench/LEARNING.md has what it measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

from helpers.learning_probe import VARIANTS, Probe, Run, task_seeds  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in dataclasses.fields(Probe):
        if f.type in ("bool", bool):
            p.add_argument(f"--{f.name}", action="store_true")
        else:
            p.add_argument(f"--{f.name}", type=type(f.default), default=f.default)
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {VARIANTS}")
    p.add_argument("--workdir", default="")
    a = p.parse_args()
    probe = Probe(**{f.name: getattr(a, f.name) for f in dataclasses.fields(Probe)})
    t0 = time.perf_counter()
    run = Run(probe, a.workdir or tempfile.mkdtemp(prefix="learning_regression_"))
    try:
        for v in a.variants.split(","):
            after, curve = run.play(v)
            print(json.dumps({"variant": v, "before": run.before, "after": after, "gain": after - run.before,
                              "batch_success": curve, **dataclasses.asdict(probe),
                              "task_seeds": task_seeds(run.trainer), "elapsed_s": round(time.perf_counter() - t0)}),
                  flush=True)
    finally:
        run.close()


if __name__ == "__main__":
    main()
