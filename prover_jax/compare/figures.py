"""The figures of prover-compare's report: pure functions on run dicts (report.load_run's: "seed",
"evals" [{step, tokens, success, se}] sorted by step, "final_success", "final_se", ...).

    result = summarize({"prover": [run, ...], "grpo": [...]}, threshold=0.8)   # compare.json's numbers

Per run:
- AUC, the primary figure: the mean eval success over the run's evaluations after step 0 (every eval
  step > 0; with evals every eval_every steps, the area under the eval curve over the RL steps per
  unit length). A late collapse moves it by its share of the evals, not wholly, as it does the final
  success. Records that evaluated only at step 0 and the last step: the AUC is the final success.
- AUC gain: the AUC minus the same run's step-0 eval (after SFT, before RL).
- Steps to T: the first eval step (step 0 included) whose success is >= T (`threshold`, 0.8 by
  default); None when no eval reached it.
- Drawdown: the largest drop of an eval below the best eval up to it, max over eval points of
  (running max of success up to and including the point) - (its success); "collapsed" when the
  drawdown is more than COLLAPSE_DROP (0.10). "best" and "low" name that drop's best eval and the
  lowest eval after it ({step, success}).

Per method, over its runs (one per seed): mean +- the 95% CI half-width (t-distribution, n-1 dof); with
one seed, +- the run's own standard error (for the AUC: the mean of its evals' SEs, an upper bound on
the SE of their mean whatever their correlation). Paired over seeds (a seed fixes the task order and,
without --sft_seed, the SFT start): the RL gain and the AUC gain over each run's own start, and the differences to the
first method on the same seed (only seeds both have): final success, and AUC over the eval steps
after step 0 that both runs have (a run with fewer evals is compared on the common steps); mean +-
95% CI of the differences, which compare.json also lists seed by seed. Steps to T: the mean over the
runs that reached T, and how many of the runs with an eval did. Collapsed: how many of those runs.
"""

from __future__ import annotations

import math

import numpy as np

TIMES = ("rollout", "credit_wait", "update", "step")
COLLAPSE_DROP = 0.10  # a run "collapsed" when an eval lies more than this below the best eval up to it
THRESHOLD = 0.8  # steps to threshold: the first eval step whose success is >= this


def num(x):
    """x as a finite float ({"eval/success": p, ...}: p), else None."""
    if isinstance(x, dict):
        x = x.get("eval/success", x.get("success"))
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def mean_ci(values, single_se=None) -> dict:
    """{mean, pm, kind, n}: pm = the 95% CI half-width over the values (t, n-1 dof; kind "ci95"); one
    value: pm = `single_se` (kind "se"); none: mean None."""
    v = [float(x) for x in values if num(x) is not None]
    if not v:
        return {"mean": None, "pm": None, "kind": None, "n": 0}
    if len(v) == 1:
        return {"mean": v[0], "pm": single_se, "kind": "se", "n": 1}
    from scipy import stats
    half = float(stats.t.ppf(0.975, len(v) - 1) * np.std(v, ddof=1) / math.sqrt(len(v)))
    return {"mean": float(np.mean(v)), "pm": half, "kind": "ci95", "n": len(v)}


def mean(values):
    v = [float(x) for x in values if num(x) is not None]
    return float(np.mean(v)) if v else None


def at_budget(run: dict, budget: float):
    """(success, se) of the run's eval curve linearly interpolated at `budget` generated tokens."""
    if not run["evals"] or budget is None:
        return None, None
    xs = [e["tokens"] for e in run["evals"]]
    p = float(np.interp(budget, xs, [e["success"] for e in run["evals"]]))
    ses = [e["se"] for e in run["evals"]]
    return p, (float(np.interp(budget, xs, ses)) if all(s is not None for s in ses) else None)


def start(run: dict):
    """The run's step-0 eval success, None without one."""
    return next((e["success"] for e in run["evals"] if e["step"] == 0), None)


def after_start(run: dict) -> dict:
    """{step: success} of the run's evals after step 0."""
    return {e["step"]: e["success"] for e in run["evals"] if e["step"] > 0}


def auc(run: dict, steps=None):
    """Mean eval success over the run's evals after step 0 (only those at `steps` if given); None: none."""
    curve = after_start(run)
    v = [p for s, p in curve.items() if steps is None or s in steps]
    return float(np.mean(v)) if v else None


def auc_se(run: dict):
    """The mean of the SEs of the evals in the AUC: an upper bound on the SE of their mean."""
    ses = [e["se"] for e in run["evals"] if e["step"] > 0]
    return float(np.mean(ses)) if ses and all(s is not None for s in ses) else None


def auc_gain(run: dict):
    a, s0 = auc(run), start(run)
    return None if a is None or s0 is None else a - s0


def auc_vs(run: dict, base: dict):
    """The run's AUC minus `base`'s, both over the eval steps after step 0 that both have."""
    common = after_start(run).keys() & after_start(base).keys()
    return auc(run, common) - auc(base, common) if common else None


def final_vs(run: dict, base: dict):
    a, b = num(run["final_success"]), num(base["final_success"])
    return None if a is None or b is None else a - b


def steps_to(run: dict, threshold: float = THRESHOLD):
    """The first eval step whose success is >= `threshold`; None: never."""
    return next((e["step"] for e in run["evals"] if e["success"] >= threshold), None)


def drawdown(run: dict) -> dict:
    """{drawdown, collapsed, best, low}: the largest drop of an eval below the best eval up to it, that
    best eval and the drop's eval ({step, success}: the lowest after the best); None without evals."""
    evals = run["evals"]
    if not evals:
        return {"drawdown": None, "collapsed": False, "best": None, "low": None}
    peaks = np.maximum.accumulate([e["success"] for e in evals])
    drops = [round(float(peak - e["success"]), 9) for peak, e in zip(peaks, evals)]  # 0.9 - 0.6 = 0.3
    i = int(np.argmax(drops))
    best = next(e for e in evals if e["success"] == peaks[i])
    point = lambda e: {"step": e["step"], "success": e["success"]}  # noqa: E731
    return {"drawdown": drops[i], "collapsed": drops[i] > COLLAPSE_DROP, "best": point(best), "low": point(evals[i])}


def run_figures(run: dict, threshold: float = THRESHOLD) -> dict:
    """The per-run figures of compare.json's per_seed (the paired ones apart)."""
    return {"auc": auc(run), "auc_gain": auc_gain(run), "steps_to_threshold": steps_to(run, threshold),
            **drawdown(run)}


def paired(rs: list[dict], base: dict, diff) -> dict:
    """{seed: diff(run, the base run of its seed)} over the seeds both have where diff is defined."""
    pairs = {r["seed"]: diff(r, base[r["seed"]]) for r in rs if r["seed"] in base}
    return {s: d for s, d in pairs.items() if d is not None}


def reached(steps: list, threshold: float) -> dict:
    """{threshold, mean, reached, runs}: the mean steps to threshold over the runs (of `steps`, the
    evaluated runs') that reached it."""
    hit = [s for s in steps if s is not None]
    return {"threshold": threshold, "mean": mean(hit), "reached": len(hit), "runs": len(steps)}


def method_figures(rs: list[dict], base: dict | None, budget, threshold: float) -> dict:
    """One method's figures over its runs; `base`: {seed: run} of the first method (None: this is it)."""
    at = [at_budget(r, budget) for r in rs]
    per_run = [run_figures(r, threshold) for r in rs]
    evaluated = [f for r, f in zip(rs, per_run) if r["evals"]]
    vs_first = None if base is None else paired(rs, base, final_vs)
    auc_vs_first = None if base is None else paired(rs, base, auc_vs)
    return {
        "auc": mean_ci([f["auc"] for f in per_run], auc_se(rs[0]) if rs else None),
        "auc_gain": mean_ci([f["auc_gain"] for f in per_run]),
        "auc_vs_first": None if base is None else mean_ci(list(auc_vs_first.values())),
        "final_success": mean_ci([r["final_success"] for r in rs], rs[0]["final_se"] if rs else None),
        "rl_gain": mean_ci([r["final_success"] - s0 for r in rs
                            if (s0 := start(r)) is not None and num(r["final_success"]) is not None]),
        "vs_first": None if base is None else mean_ci(list(vs_first.values())),
        "success_at_budget": mean_ci([p for p, _ in at], at[0][1] if at else None),
        "steps_to_threshold": reached([f["steps_to_threshold"] for f in evaluated], threshold),
        "collapsed": {"count": sum(f["collapsed"] for f in evaluated), "runs": len(evaluated)},
        "policy_tokens_per_step": mean(r["policy_tokens_per_step"] for r in rs),
        "extra_token_frac": mean(r["extra_token_frac"] for r in rs),
        "time_per_step_s": {k: mean(r["time_per_step"][k] for r in rs) for k in TIMES},
        "judge_calls": mean(r["judge_calls"] for r in rs),
        "judge_cost_usd": mean(r["judge_cost_usd"] for r in rs),
        "acceptance_rate": mean(r["acceptance_rate"] for r in rs),
        "segment_len": mean(r["segment_len"] for r in rs),
        "per_seed": [{k: r[k] for k in ("seed", "folder", "steps", "total_tokens", "final_success", "evals")}
                     | {"success_at_budget": p, "vs_first": (vs_first or {}).get(r["seed"]),
                        "auc_vs_first": (auc_vs_first or {}).get(r["seed"])} | f
                     for r, (p, _), f in zip(rs, at, per_run)],
    }


def summarize(runs: dict[str, list[dict]], seeds_requested: int | None = None,
              threshold: float = THRESHOLD) -> dict:
    """Per method (in the order of `runs`), over its runs (one per seed): the numbers of compare.json.
    The matched budget is the fewest generated tokens any run reached (no run is extrapolated)."""
    with_evals = [r for rs in runs.values() for r in rs if r["evals"]]
    budget = min((r["total_tokens"] for r in with_evals), default=None)
    first = next(iter(runs), None)
    base = {r["seed"]: r for r in runs.get(first, [])}
    methods = {label: {"seeds_completed": len(rs), "seeds_requested": seeds_requested}
               | method_figures(rs, None if label == first else base, budget, threshold)
               for label, rs in runs.items()}
    return {"budget_tokens": budget, "threshold": threshold, "collapse_drop": COLLAPSE_DROP, "methods": methods}
