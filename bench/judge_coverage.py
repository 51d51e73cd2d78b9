"""Judges against the oracle judge on the credit-hard setting, without a model: how often each judge's
proposal is the pivot, and how often ProVer's verification accepts it.

    python bench/judge_coverage.py [--config=configs/credit_hard.py] [--tasks=300] [--k=4,8] [--out=F.json]

Probe policy (stationary, what the SFT start imitates): at each state, the demonstrator's command under
each set of faults, weighted by the chance the config's shares give that set (env.kwargs demo_*), with
`--eps` of it spread uniformly over the admissible commands (`lab_truth` plays it, `PolicyVerifier`
continues it). For each task one group of `--group_size` episodes; in each group with success rate in
ProVer's band (credit.band_low, credit.band_high) the shortest success is judged by every judge.
Per judge:
  valid         share of the groups with a valid proposal
  hit_oracle    share of the valid proposals whose turn is the oracle judge's (over groups where the
                oracle proposes one)
  hit_pivot     share of the valid proposals whose first turn is a right choice at some pivot (+1)
  accept@K      share of the valid proposals with delta = mean(R_post) - mean(R_pre) > --threshold over
                K continuations of the probe policy from each boundary (0: ProVer's positive variant)
The last line is the JSON record (also written to --out).
"""

from __future__ import annotations

import itertools
import json
import os
import sys

import numpy as np
from absl import app, flags

from prover_jax.credit import lab_truth as lt
from prover_jax.credit.common import eligible, shortest_success
from prover_jax.credit.prover import delta_estimate
from prover_jax.credit.verify import PolicyVerifier
from prover_jax.envs import make
from prover_jax.envs.base import pivot_labels
from prover_jax.envs.household.demonstrator import FAULTS, Faults, faulty_command, idle_command
from prover_jax.judges import make_judge
from prover_jax.training.config import load_config_file

FLAGS = flags.FLAGS
flags.DEFINE_string("config", os.path.join(os.path.dirname(__file__), "..", "configs", "credit_hard.py"),
                    "Trainer config file whose env (household) and credit band are probed.")
flags.DEFINE_integer("tasks", 300, "Training tasks, one group each.")
flags.DEFINE_integer("group_size", 8, "Episodes per group.")
flags.DEFINE_float("eps", 0.05, "Share of the probe policy spread uniformly over the admissible commands.")
flags.DEFINE_string("k", "4,8", "Continuations per boundary for the acceptance rates.")
flags.DEFINE_string("judges", "oracle,contrastive,contrastive:earliest,contrastive:with_done,random",
                    "Judges: NAME[:OPTION...] (judge_of: contrastive:earliest, :latest, :shared, :with_done, "
                    ":ignore=F1+F2).")
flags.DEFINE_integer("seed", 0, "Sampling seed.")
flags.DEFINE_integer("max_segment_turns", 0, "Longest segment a judge may propose (0: credit.prover's).")
flags.DEFINE_float("threshold", 0.0, "A proposal is accepted when delta > this (ProVer's threshold variant; 0: positive).")
flags.DEFINE_string("out", None, "Write the JSON record here too.")


def probe_policy(env, kwargs: dict, eps: float):
    """pi(a|s) = (1 - eps) [idle * 1[a = idle(s)] + (1 - idle) sum_F P(F) 1[a = faulty(s, F)]]
    + eps / |A(s)|; F over the subsets of the faults the config draws (each with its share)."""
    shares = {"confused": kwargs.get("demo_confusion", 0.0), **{f: kwargs.get(f"demo_{f}", 0.0) for f in FAULTS[1:]}}
    types = kwargs.get("demo_scorch_types")
    sets = []
    for chosen in itertools.product((False, True), repeat=len(FAULTS)):
        p = float(np.prod([shares[f] if c else 1 - shares[f] for f, c in zip(FAULTS, chosen)]))
        if p > 0:
            sets.append((p, Faults(**{f: 1.0 for f, c in zip(FAULTS, chosen) if c}, scorch_types=types)))
    idle = float(kwargs.get("demo_idle", 0.0))

    def policy(obs: str, info: dict) -> dict[str, float]:
        layout, state = env.layout, env.snapshot()
        adm = info["admissible"]
        out = {a: eps / len(adm) for a in adm}
        if idle > 0:
            a = idle_command(layout, state)
            out[a] = out.get(a, 0.0) + (1 - eps) * idle
        for p, faults in sets:
            a = faulty_command(layout, state, faults.of(layout))
            if a is not None:
                out[a] = out.get(a, 0.0) + (1 - eps) * (1 - idle) * p
        return out

    return policy


def judge_of(spec: str, config, kwargs: dict):
    """NAME, or contrastive with ':'-separated options: earliest | latest | shared (the departure chosen),
    with_done (`done` compared, the earliest departure: the judge before its fix), ignore=F1+F2 (these
    snapshot fields also left out of state equality)."""
    name, *options = spec.split(":")
    if name == "oracle":
        return make_judge("oracle", config.judge, env_name="household", env_kwargs=kwargs)
    kw = {}
    for option in options:
        if option in ("earliest", "latest", "shared"):
            kw["choice"] = option
        elif option == "with_done":
            kw.update(choice="earliest", ignore_fields=("turn", "note"))
        elif option.startswith("ignore="):
            kw["ignore_fields"] = tuple(config.judge.contrastive.ignore_fields) + tuple(option[7:].split("+"))
        else:
            raise app.UsageError(f"--judges: unknown option {option!r} in {spec!r}")
    return make_judge(name, config.judge, **kw)


def main(argv):
    config = load_config_file(FLAGS.config)
    if config.env.name != "household":
        raise app.UsageError(f"{FLAGS.config}: env.name is {config.env.name!r}; the probe plays household")
    kwargs = config.env.kwargs.to_dict()
    env, verify_env, rules = (make("household", **kwargs) for _ in range(3))
    policy = probe_policy(env, kwargs, FLAGS.eps)
    verifier = PolicyVerifier(verify_env, probe_policy(verify_env, kwargs, FLAGS.eps), seed=FLAGS.seed + 1)
    ks = [int(k) for k in FLAGS.k.split(",")]
    specs = FLAGS.judges.split(",")
    judges = {s: judge_of(s, config, kwargs) for s in specs}
    rng, uids = np.random.default_rng(FLAGS.seed), itertools.count()
    counts = {s: {"valid": 0, "oracle_groups": 0, "hit_oracle": 0, "hit_pivot": 0, **{f"accept@{k}": 0 for k in ks}}
              for s in specs}
    groups = mixed = 0
    for task in range(config.env.train_seed_start, config.env.train_seed_start + FLAGS.tasks):
        group = lt.play_group(env, policy, task, FLAGS.group_size, rng, uids)
        groups += 1
        if not eligible(np.asarray([t.success for t in group], float), config.credit.band_low, config.credit.band_high):
            continue
        mixed += 1
        i = shortest_success(group)
        success, failures = group[i], [t for t in group if not t.success]
        labels = pivot_labels(rules, success)
        longest = FLAGS.max_segment_turns or config.credit.prover.max_segment_turns
        proposals = {s: j.propose(success, failures, max_segment_turns=longest, rng=rng) for s, j in judges.items()}
        oracle = proposals.get("oracle")
        for s, p in proposals.items():
            if not p.ok:
                continue
            c = counts[s]
            c["valid"] += 1
            l, r = p.segment
            if oracle is not None and oracle.ok:
                c["oracle_groups"] += 1
                c["hit_oracle"] += oracle.segment[0] in range(l, r + 1)
            c["hit_pivot"] += labels[l] is not None and labels[l][0] > 0
            for k in ks:
                pre, post = verifier.run([(success, l, k), (success, r + 1, k)])
                c[f"accept@{k}"] += delta_estimate(pre, post) > FLAGS.threshold
    table = {}
    for s, c in counts.items():
        v = c["valid"]
        table[s] = {"valid": v / mixed if mixed else None,
                    "hit_oracle": c["hit_oracle"] / c["oracle_groups"] if c["oracle_groups"] else None,
                    "hit_pivot": c["hit_pivot"] / v if v else None,
                    **{f"accept@{k}": c[f"accept@{k}"] / v if v else None for k in ks}}
    record = {"config": os.path.relpath(FLAGS.config), "tasks": FLAGS.tasks, "groups_in_band": mixed,
              "group_size": FLAGS.group_size, "eps": FLAGS.eps, "seed": FLAGS.seed, "threshold": FLAGS.threshold,
              "max_segment_turns": FLAGS.max_segment_turns or config.credit.prover.max_segment_turns, "judges": table}
    cols = ["valid", "hit_oracle", "hit_pivot"] + [f"accept@{k}" for k in ks]
    print(f"{mixed} of {groups} groups in the band ({config.credit.band_low}, {config.credit.band_high})")
    print("| judge | " + " | ".join(cols) + " |\n" + "|---" * (len(cols) + 1) + "|")
    for s, row in table.items():
        print(f"| {s} | " + " | ".join("-" if row[k] is None else f"{row[k]:.2f}" for k in cols) + " |")
    line = json.dumps(record)
    if FLAGS.out:
        os.makedirs(os.path.dirname(os.path.abspath(FLAGS.out)), exist_ok=True)
        with open(FLAGS.out, "w") as f:
            f.write(line + "\n")
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(app.run(main))
