"""prover-compare's report figures on hand-made run folders: AUC (and paired over seeds), steps to a
threshold, collapse flags, and the markdown that prints them; each number worked out by hand."""

import json
import math
import os

import numpy as np
import pytest
from scipy import stats

from prover_jax.compare import figures, report

from helpers.markdown import md_table


def run(tmp_path, name, seed, curve, se=0.05):
    """A run folder with RL steps 1 .. the last eval step (100 policy tokens each) and evals
    {step: success} (each with standard error `se`), loaded as the report loads it."""
    folder = str(tmp_path / name / f"seed{seed}")
    os.makedirs(folder)
    last = max(curve)
    rows = [{"step": s, "success_rate": 0.5, "policy_tokens": 100} for s in range(1, last + 1)]
    rows += [{"step": s, "eval/success": p, "eval/success_se": se} for s, p in curve.items()]
    with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    with open(os.path.join(folder, "summary.json"), "w") as f:
        json.dump({"success_after_rl": curve[last]}, f)
    return report.load_run(folder, seed)


def ci95(values):
    v = np.asarray(values, float)
    return v.mean(), stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v))


def test_auc_steps_to_threshold_and_drawdown_of_one_run(tmp_path):
    r = run(tmp_path, "a", 0, {0: 0.2, 10: 0.5, 20: 0.9})
    assert figures.auc(r) == pytest.approx(0.7)  # (0.5 + 0.9) / 2: step 0 is not in it
    assert figures.auc_gain(r) == pytest.approx(0.5)
    assert figures.auc(r, {10}) == pytest.approx(0.5) and figures.auc(r, set()) is None
    assert [figures.steps_to(r, t) for t in (0.1, 0.5, 0.8, 0.95)] == [0, 10, 20, None]
    assert figures.steps_to(r) == 20  # the default threshold, 0.8
    assert figures.drawdown(r) == {"drawdown": 0.0, "collapsed": False, "best": {"step": 0, "success": 0.2},
                                   "low": {"step": 0, "success": 0.2}}
    only_start = run(tmp_path, "b", 0, {0: 0.4})
    assert figures.auc(only_start) is None and figures.auc_gain(only_start) is None


@pytest.mark.parametrize("curve, drawdown, collapsed, best, low", [
    ({0: 0.2, 10: 0.9, 20: 0.6}, 0.3, True, (10, 0.9), (20, 0.6)),
    ({0: 0.2, 10: 0.5, 20: 0.45}, 0.05, False, (10, 0.5), (20, 0.45)),
    ({0: 0.75, 10: 0.65, 20: 0.7}, 0.1, False, (0, 0.75), (10, 0.65)),  # exactly 0.10: not more than it
    ({0: 0.5, 10: 0.8, 20: 0.75, 30: 0.9, 40: 0.5, 50: 0.45, 60: 0.7}, 0.45, True, (30, 0.9), (50, 0.45)),
])
def test_collapse(tmp_path, curve, drawdown, collapsed, best, low):
    got = figures.drawdown(run(tmp_path, "a", 0, curve))
    assert got["drawdown"] == pytest.approx(drawdown) and got["collapsed"] is collapsed
    assert (got["best"]["step"], got["best"]["success"]) == best and (got["low"]["step"], got["low"]["success"]) == low
    assert figures.COLLAPSE_DROP == 0.10


def test_paired_auc_over_seeds_and_common_steps(tmp_path):
    base = [run(tmp_path, "grpo", s, c) for s, c in enumerate([
        {0: 0.2, 10: 0.5, 20: 0.9}, {0: 0.3, 10: 0.4, 20: 0.6}, {0: 0.1, 10: 0.6, 20: 0.7}])]
    other = [run(tmp_path, "prover", s, c) for s, c in enumerate([
        {0: 0.2, 10: 0.6, 20: 0.9}, {0: 0.3, 10: 0.7, 20: 0.9},
        {0: 0.1, 10: 0.5}])]  # seed 2 evaluated only up to step 10: compared with grpo's step 10 alone
    result = report.summarize({"grpo": base, "prover": other}, seeds_requested=3, threshold=0.8)
    g, p = result["methods"]["grpo"], result["methods"]["prover"]
    # AUC per run: grpo 0.7, 0.5, 0.65; prover 0.75, 0.8, 0.5
    assert [s["auc"] for s in g["per_seed"]] == pytest.approx([0.7, 0.5, 0.65])
    assert [s["auc"] for s in p["per_seed"]] == pytest.approx([0.75, 0.8, 0.5])
    for m, aucs in ((g, [0.7, 0.5, 0.65]), (p, [0.75, 0.8, 0.5])):
        mean, half = ci95(aucs)
        assert m["auc"]["mean"] == pytest.approx(mean) and m["auc"]["pm"] == pytest.approx(half)
        assert m["auc"]["kind"] == "ci95" and m["auc"]["n"] == 3
    # paired: 0.75 - 0.7, 0.8 - 0.5, and seed 2 on step 10 only: 0.5 - 0.6
    diffs = [0.05, 0.3, -0.1]
    assert [s["auc_vs_first"] for s in p["per_seed"]] == pytest.approx(diffs)
    mean, half = ci95(diffs)
    assert p["auc_vs_first"]["mean"] == pytest.approx(mean) and p["auc_vs_first"]["pm"] == pytest.approx(half)
    assert g["auc_vs_first"] is None and [s["auc_vs_first"] for s in g["per_seed"]] == [None] * 3
    # AUC gain over each run's own step 0: prover 0.55, 0.5, 0.4
    mean, half = ci95([0.55, 0.5, 0.4])
    assert p["auc_gain"]["mean"] == pytest.approx(mean) and p["auc_gain"]["pm"] == pytest.approx(half)
    # steps to 0.8: grpo 20, never, never; prover 20, 20, never
    assert [s["steps_to_threshold"] for s in p["per_seed"]] == [20, 20, None]
    assert p["steps_to_threshold"] == {"threshold": 0.8, "mean": 20.0, "reached": 2, "runs": 3}
    assert g["steps_to_threshold"] == {"threshold": 0.8, "mean": 20.0, "reached": 1, "runs": 3}
    # every curve rises: none collapsed
    assert g["collapsed"] == p["collapsed"] == {"count": 0, "runs": 3}
    assert result["threshold"] == 0.8 and result["collapse_drop"] == 0.10
    one = report.summarize({"grpo": base[:1]})["methods"]["grpo"]["auc"]  # one seed: the mean of its SEs
    assert one == {"mean": pytest.approx(0.7), "pm": pytest.approx(0.05), "kind": "se", "n": 1}


def test_markdown_and_json(tmp_path):
    base = [run(tmp_path, "grpo", s, c) for s, c in enumerate([{0: 0.2, 10: 0.9, 20: 0.6}, {0: 0.3, 10: 0.5, 20: 0.4}])]
    other = [run(tmp_path, "prover", s, c)
             for s, c in enumerate([{0: 0.2, 10: 0.8, 20: 0.9}, {0: 0.4, 10: 0.6, 20: 0.9}])]
    runs = {"grpo": base, "prover": other}
    result = report.summarize(runs, seeds_requested=2, threshold=0.85)
    paths = report.write_report(result, runs, str(tmp_path / "out"), title="t")
    md = open(paths["md"]).read()
    header = md.splitlines()[2]
    assert header.startswith("| method | seeds | AUC | Δ AUC vs grpo | Δ AUC per seed | AUC gain "
                             "| final eval success |")
    assert "| steps to 0.85 | collapsed |" in header
    rows = md_table(md)
    g, p = rows["grpo"], rows["prover"]
    # AUC: grpo 0.75, 0.45 (seed 1 fell exactly 0.10: not collapsed); prover 0.85, 0.75; Δ 0.1, 0.3
    mean, half = ci95([0.75, 0.45])
    assert g["AUC"] == f"{mean:.3f} ± {half:.3f}"
    mean, half = ci95([0.1, 0.3])
    assert p["Δ AUC vs grpo"] == f"+{mean:.3f} ± {half:.3f}" and g["Δ AUC vs grpo"] == "-"
    assert p["Δ AUC per seed"] == "s0 +0.100, s1 +0.300" and g["Δ AUC per seed"] == "-"
    mean, half = ci95([0.85 - 0.2, 0.75 - 0.4])
    assert p["AUC gain"] == f"+{mean:.3f} ± {half:.3f}"
    assert g["steps to 0.85"] == "10.0 (1 of 2)" and p["steps to 0.85"] == "20.0 (2 of 2)"
    assert g["collapsed"] == "1 of 2" and p["collapsed"] == "0 of 2"
    assert "- AUC, the primary figure" in md and "- Δ AUC vs grpo: the run's AUC minus grpo's" in md
    flagged = md.split("## Runs that fell > 10 points from their best evaluation\n")[1].strip().splitlines()
    assert flagged == ["- `grpo` seed 0: best eval 0.900 at step 10, then 0.600 at step 20 (drawdown 0.300)"]
    saved = json.load(open(paths["json"]))
    assert saved["threshold"] == 0.85 and saved["collapse_drop"] == 0.10
    s0 = saved["methods"]["grpo"]["per_seed"][0]
    assert s0["collapsed"] is True and s0["drawdown"] == pytest.approx(0.3) and s0["auc"] == pytest.approx(0.75)
    assert s0["best"] == {"step": 10, "success": 0.9} and s0["low"] == {"step": 20, "success": 0.6}
    assert saved["methods"]["prover"]["per_seed"][1]["auc_vs_first"] == pytest.approx(0.3)
    assert saved["methods"]["prover"]["auc"]["mean"] == pytest.approx(0.8)
    # no collapsed run: no section
    calm = report.markdown(report.summarize({"prover": other}))
    assert "## Runs that fell" not in calm and md_table(calm)["prover"]["steps to 0.8"] == "15.0 (2 of 2)"
