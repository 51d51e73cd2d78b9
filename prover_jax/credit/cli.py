"""`prover-lab` (also `python -m prover_jax.credit.cli`): the credit lab's command line. Every credit
method against the exact per-turn advantage on a built-in env, without a model (`credit/lab.py` has the
setting, the truth and the metrics).

    prover-lab --methods=grpo,prover,prover:random --env=household --groups=8 --group_size=8 \
        --eps=0.4,0.6 --seed=0 [--set prover.k=4] [--strict]

Methods are credited with the credit and judge sections of the default run config
(`training.config.default_config`), `--set KEY=VALUE` overriding the credit section. Prints a table,
notes on skipped methods, the time, and last one JSON line: {method: {metric: value or null}}.
A bad argument (a --set key the credit section lacks, --eps outside [0, 1], ...) exits with status 2
and one line naming it.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time

import numpy as np

from prover_jax.credit import lab
from prover_jax.training.config import default_config


def set_override(config, assignment: str) -> None:
    """'prover.k=4' -> config.prover.k = 4 (Python literals, else the text). ValueError naming the
    assignment when it has no '=', names no existing field, or gives a value of another type."""
    key, eq, text = assignment.partition("=")
    if not eq:
        raise ValueError(f"--set {assignment!r}: expected KEY=VALUE, e.g. prover.k=4")
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = text
    *path, last = key.strip().split(".")
    for part in path:
        config = config.get(part) if hasattr(config, "get") else None
    if not hasattr(config, "get") or last not in config:
        raise ValueError(f"--set {assignment!r}: the credit config has no field {key.strip()!r}")
    try:
        config[last] = value
    except TypeError as e:
        raise ValueError(f"--set {assignment!r}: {e}") from None


def parse_args(argv):
    p = argparse.ArgumentParser(prog="prover-lab", description=lab.__doc__.split("\n")[0])
    csv = lambda kind: (lambda s: [kind(x) for x in s.split(",") if x.strip()])
    p.add_argument("--methods", type=csv(str), default=None,
                   help="credit methods, name[:judge]; default: every registered one (prover with both "
                        "judges) and 'exact'")
    p.add_argument("--env", default="household", choices=sorted(lab.ENV_PRESETS))
    p.add_argument("--env_kwargs", type=json.loads, default=None, help="JSON, updates the env's preset")
    p.add_argument("--groups", type=int, default=8, help="task groups per eps")
    p.add_argument("--group_size", type=int, default=8, help="episodes per task group (G)")
    p.add_argument("--eps", type=csv(float), default=[0.4, 0.6], help="policy: (1 - eps) expert + eps uniform")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--task_seed", type=int, default=0, help="first task seed; groups use the next ones")
    p.add_argument("--threshold", type=float, default=0.2, help="pivotal turns: |A| > threshold")
    p.add_argument("--judge", default="contrastive", help="judge of methods that need one (no ':judge')")
    p.add_argument("--tokens_per_turn", type=int, default=3)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="credit config override, e.g. --set prover.k=4 (repeatable)")
    p.add_argument("--strict", action="store_true", help="raise when a method fails instead of skipping it")
    args = p.parse_args(argv)
    for name in ("groups", "group_size", "tokens_per_turn"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if not args.eps or not all(0 <= e <= 1 for e in args.eps):
        p.error(f"--eps must be one or more values in [0, 1], got {args.eps}")
    if args.env_kwargs is not None and not isinstance(args.env_kwargs, dict):
        p.error(f"--env_kwargs must be a JSON object, got {args.env_kwargs!r}")
    for assignment in args.set:
        try:
            set_override(default_config().credit, assignment)
        except ValueError as e:
            p.error(str(e))
    args.methods = list(dict.fromkeys(args.methods or lab.default_methods()))
    args.eps = list(dict.fromkeys(args.eps))
    args.env_kwargs = {**lab.ENV_PRESETS[args.env], **(args.env_kwargs or {})}
    return args


def main(argv=None) -> dict:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    t0 = time.perf_counter()
    config = default_config()
    for assignment in args.set:
        set_override(config.credit, assignment)
    results, batches, notes = lab.run(args, config.credit, config.judge)
    print(lab.table(results, batches, args))
    for note in notes:
        print(f"note: {note}")
    print(f"time: {time.perf_counter() - t0:.1f} s")
    clean = lambda v: None if v is None or (isinstance(v, float) and np.isnan(v)) else v
    summary = {spec: {k: clean(per["all"][k]) for k in lab.METRICS} for spec, per in results.items()}
    print(json.dumps(summary), flush=True)
    return summary


def run() -> None:
    """The `prover-lab` console script (exit status 0; the summary is printed, not returned)."""
    main()


if __name__ == "__main__":
    run()
