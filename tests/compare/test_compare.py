"""prover-compare: method specs, the report on synthetic run folders (CI and matched-budget numbers
worked out by hand), and end to end on a tiny config (2 methods x 2 seeds x 2 RL steps, SFT once)."""

import json
import math
import os
import re
import shutil
import subprocess
import sys

import pytest

from prover_jax.compare import methods as methods_lib
from prover_jax.compare import report
from prover_jax.training.config import default_config

from helpers import demo_config
from helpers.markdown import md_table

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = demo_config.PATH + ":compare"  # the trainer tests' config, evaluated after every step
CREDIT = ["grpo", "prover", "gigpo"]
JUDGES = ["contrastive", "openai", "random"]


def parse(text):
    return methods_lib.parse_methods(text, default_config(), credit_names=CREDIT, judge_names=JUDGES)


def test_method_specs():
    got = parse("grpo,prover:judge=random,k=4,gigpo:gamma=0.9,credit.gigpo.std=true,prover:loss.kl_coef=0.1")
    assert [m.spec for m in got] == ["grpo", "prover:judge=random,k=4", "gigpo:gamma=0.9,credit.gigpo.std=true",
                                     "prover:loss.kl_coef=0.1"]
    assert got[1].overrides == (("judge.name", "random"), ("credit.prover.k", "4"))
    assert got[1].slug == "prover+judge=random+k=4" and got[0].slug == "grpo"
    assert got[2].overrides == (("credit.gigpo.gamma", "0.9"), ("credit.gigpo.std", "true"))
    assert got[1].all_overrides()[0] == ("credit.method", "prover")
    assert [m.shares_sft for m in got] == [True, True, True, False]  # only credit.* / judge.* keep the shared SFT
    cfg = methods_lib.apply_overrides(default_config(), got[2].all_overrides())
    assert cfg.credit.method == "gigpo" and cfg.credit.gigpo.gamma == 0.9 and cfg.credit.gigpo.std is True
    assert methods_lib.split_top("a=(1,2),b=[3,4],c='x,y'") == ["a=(1,2)", "b=[3,4]", "c='x,y'"]


@pytest.mark.parametrize("text, message", [
    ("grpo,nosuch", "unknown credit method 'nosuch'"),
    ("prover:judge=oracle", "unknown judge 'oracle'"),
    ("prover:nokey=1", "no config field 'nokey'"),
    ("prover:k=four", "credit.prover.k"),
    ("prover:seed=3", "set by --seeds"),
    ("prover,prover", "would share the run folder"),
    ("prover:k", "is not KEY=VALUE"),
    ("", "empty"),
])
def test_bad_method_specs(text, message):
    with pytest.raises(ValueError, match=message):
        parse(text)


def write_run(folder, train, evals=(), summary=None, garbage=False):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
        for row in list(train) + list(evals):
            f.write(json.dumps(row) + "\n")
        if garbage:
            f.write('{"step": 9, "success_ra')  # a line cut short by a crash
    with open(os.path.join(folder, "summary.json"), "w") as f:
        json.dump(summary or {}, f)
    return folder


def new_style(folder, final):
    """4 steps of 100 policy + 50 extra tokens (cumulated 150, 300, 450, 600); evals at steps 0, 2, 4;
    step 1 has 2 valid proposals, 1 accepted, segments of 1.5 turns; step 4's wall time includes a
    pause (350 s) that the per-step median ignores."""
    train = [{"step": s, "success_rate": 0.5, "policy_tokens": 100, "credit/extra_policy_tokens": 50,
              "prover/valid_proposals": 2 if s == 1 else 0, "prover/accepted": 1 if s == 1 else 0,
              "prover/segment_len": 1.5 if s == 1 else 0.0, "judge/calls": 2, "judge/cost_usd": 0.01,
              "time/rollout_s": 1.0, "time/credit_wait_s": 0.5, "time/update_s": 2.0, "time/step_s": 350.0 if s == 4 else 3.5}
             for s in range(1, 5)]
    evals = [{"step": s, "eval/success": p, "eval/success_se": 0.05, "eval/episodes": 32}
             for s, p in ((0, 0.1), (2, 0.4), (4, final))]
    return write_run(folder, train, evals, {"success_after_rl": final}, garbage=True)


def old_style(folder, before, after):
    """2 steps of 200 policy tokens, no extra-token / credit-wait / prover keys, no eval rows: the
    evals come from summary.json only."""
    train = [{"step": s, "success_rate": 0.2, "policy_tokens": 200, "time/rollout_s": 4.0, "time/update_s": 1.0}
             for s in (1, 2)]
    return write_run(folder, train, (), {"success_before_rl": before, "success_after_rl": after})


def figures(cell):
    """The numbers a cell prints: "0.600 ± 0.248 (SE)" -> [0.6, 0.248], "2/3" -> [2, 3], "-" -> []."""
    return [float(x) for x in re.findall(r"(?<![\w.])[-+]?\d+(?:\.\d+)?", cell.replace(",", ""))]


def test_report_numbers(tmp_path):
    runs = {"new": [report.load_run(new_style(str(tmp_path / f"new{s}"), p), s) for s, p in enumerate((0.5, 0.6, 0.7))],
            "old": [report.load_run(old_style(str(tmp_path / f"old{s}"), 0.25, p), s, eval_episodes=16)
                    for s, p in enumerate((0.5, 0.75))],
            "one": [report.load_run(new_style(str(tmp_path / "one"), 0.6), 0)]}
    r0 = runs["new"][0]
    assert [(e["step"], e["tokens"]) for e in r0["evals"]] == [(0, 0.0), (2, 300.0), (4, 600.0)]
    assert r0["steps"] == 4 and r0["total_tokens"] == 600 and r0["extra_token_frac"] == 0.5
    assert r0["acceptance_rate"] == 0.5 and r0["segment_len"] == 1.5
    old = runs["old"][1]
    assert [(e["step"], e["tokens"], e["success"]) for e in old["evals"]] == [(0, 0.0, 0.25), (2, 400.0, 0.75)]
    assert old["final_se"] == pytest.approx(math.sqrt(0.75 * 0.25 / 16))  # binomial over eval_episodes
    assert old["extra_token_frac"] == 0 and old["acceptance_rate"] is None
    assert old["time_per_step"]["credit_wait"] is None and old["time_per_step"]["rollout"] == 4.0

    result = report.summarize(runs, seeds_requested=3)
    assert result["budget_tokens"] == 400  # the fewest tokens any run reached (the old runs')
    new, old, one = (result["methods"][k] for k in ("new", "old", "one"))
    # final: 0.5, 0.6, 0.7 -> mean 0.6, sd 0.1, t(0.975, 2) = 4.302653 -> 4.302653 * 0.1 / sqrt(3)
    assert new["final_success"]["mean"] == pytest.approx(0.6)
    assert new["final_success"]["pm"] == pytest.approx(0.248414, abs=1e-6)
    # at 400 tokens: between (300, 0.4) and (600, final): 0.4 + (final - 0.4) / 3
    at = [0.4 + (f - 0.4) / 3 for f in (0.5, 0.6, 0.7)]
    assert [s["success_at_budget"] for s in new["per_seed"]] == pytest.approx(at)
    assert new["success_at_budget"]["pm"] == pytest.approx(4.302653 * (0.1 / 3) / math.sqrt(3), abs=1e-6)
    # old: 0.5, 0.75 at their last step (= 400 tokens); t(0.975, 1) = 12.706205
    assert old["success_at_budget"]["mean"] == pytest.approx(0.625)
    assert old["final_success"]["pm"] == pytest.approx(12.706205 * 0.25 / math.sqrt(2) / math.sqrt(2), abs=1e-5)
    assert one["final_success"] == {"mean": 0.6, "pm": 0.05, "kind": "se", "n": 1}  # one seed: its own SE
    # paired: RL gain = final - step 0 (new: 0.4, 0.5, 0.6; old: 0.25, 0.5 from summary.json's before)
    assert new["rl_gain"]["mean"] == pytest.approx(0.5) and new["rl_gain"]["pm"] == pytest.approx(0.248414, abs=1e-6)
    assert old["rl_gain"]["mean"] == pytest.approx(0.375)
    assert old["rl_gain"]["pm"] == pytest.approx(12.706205 * 0.176777 / math.sqrt(2), abs=1e-5)
    # vs the first method on the same seed: old 0.5 - 0.5, 0.75 - 0.6; one 0.6 - 0.5 (one pair: no interval)
    assert new["vs_first"] is None
    assert old["vs_first"]["mean"] == pytest.approx(0.075)
    assert [s["vs_first"] for s in old["per_seed"]] == pytest.approx([0.0, 0.15])  # the pairs themselves
    assert [s["vs_first"] for s in new["per_seed"]] == [None] * 3
    assert old["vs_first"]["pm"] == pytest.approx(12.706205 * 0.106066 / math.sqrt(2), abs=1e-5)
    assert one["vs_first"]["mean"] == pytest.approx(0.1) and one["vs_first"]["pm"] is None
    assert new["time_per_step_s"] == {"rollout": 1.0, "credit_wait": 0.5, "update": 2.0, "step": 3.5}
    assert new["judge_calls"] == 8 and new["judge_cost_usd"] == pytest.approx(0.04)
    assert old["acceptance_rate"] is None and old["segment_len"] is None and old["seeds_completed"] == 2

    paths = report.write_report(result, runs, str(tmp_path / "out"), title="t", failures=["x/seed1: exit code 1"])
    md = open(paths["md"]).read()
    rows = md_table(md)
    assert list(rows) == ["new", "old", "one"]
    new, old, one = rows["new"], rows["old"], rows["one"]
    # the figures worked out above, as printed (3 decimals; 2 for fractions and times)
    assert new["seeds"] == "3/3" and figures(new["final eval success"]) == pytest.approx([0.6, 0.248414], abs=5e-4)
    assert figures(new["success @ 400 tokens"]) == pytest.approx(
        [sum(at) / 3, 4.302653 * (0.1 / 3) / math.sqrt(3)], abs=5e-4)
    spent = ("policy tokens/step", "extra-token frac", "rollout s/step", "credit wait s/step", "update s/step",
             "step s/step", "judge calls", "judge $", "acceptance", "segment len")
    assert [figures(new[k]) for k in spent] == [[100], [0.5], [1.0], [0.5], [2.0], [3.5], [8], [0.04], [0.5], [1.5]]
    assert old["seeds"] == "2/3" and figures(old["final eval success"]) == pytest.approx([0.625, 1.588276], abs=5e-4)
    assert figures(old["success @ 400 tokens"])[0] == 0.625 and figures(old["policy tokens/step"]) == [200]
    assert figures(new["RL gain"]) == pytest.approx([0.5, 0.248414], abs=5e-4) and new["Δ vs new"] == "-"
    assert figures(old["Δ vs new"]) == pytest.approx([0.075, 0.952965], abs=5e-4)
    assert figures("-0.028 ± 0.092") == [-0.028, 0.092] and figures("2/3") == [2, 3]
    assert one["Δ vs new"] == "+0.100" and new["Δ per seed"] == "-"
    assert old["Δ per seed"] == "s0 +0.000, s1 +0.150" and one["Δ per seed"] == "s0 +0.100"
    assert [old[k] for k in spent[1:5]] == ["0.00", "4.00", "-", "1.00"]
    assert old["acceptance"] == old["segment len"] == "-"
    assert one["seeds"] == "1/3" and one["final eval success"] == "0.600 ± 0.050 (SE)"  # one seed: its own SE
    assert md.split("## Failed runs\n")[1].strip().splitlines() == ["- `x/seed1: exit code 1`"]
    saved = json.load(open(paths["json"]))
    assert saved["budget_tokens"] == 400 and saved["methods"]["old"]["acceptance_rate"] is None
    assert os.path.getsize(paths["png"]) > 1000


def test_fewer_paired_seeds_are_named_and_spend_is_the_running_total(tmp_path):
    """A baseline that lost a seed: Δ is over the seeds both have, and says so. A skipped update is not
    a step; a resumed run's spend is its last row's running total (dropped steps spent too)."""
    base = [report.load_run(new_style(str(tmp_path / f"g{s}"), p), s) for s, p in ((0, 0.6), (1, 0.7))]
    other = [report.load_run(new_style(str(tmp_path / f"p{s}"), p), s) for s, p in ((0, 0.62), (1, 0.74), (2, 0.4))]
    rows = md_table(report.markdown(report.summarize({"grpo": base, "prover": other})))
    assert rows["prover"]["seeds"] == "3" and "(2 of 3 seeds)" in rows["prover"]["Δ vs grpo"]
    assert "of" not in rows["prover"]["RL gain"]
    train = [{"step": 1, "success_rate": 0.5, "policy_tokens": 10, "judge/calls": 1, "total/judge/calls": 5},
             {"step": 1, "success_rate": 0.5, "policy_tokens": 10, "applied": False, "judge/calls": 1,
              "total/judge/calls": 6},
             {"step": 2, "success_rate": 0.5, "policy_tokens": 10, "judge/calls": 1, "total/judge/calls": 7}]
    run = report.load_run(write_run(str(tmp_path / "resumed"), train), 0)
    assert run["steps"] == 2 and run["judge_calls"] == 7
    from prover_jax.training.run import _totals
    t = _totals(train, headline=())
    assert t["rl_steps"] == 2 and t["judge_calls"] == 7


def test_report_empty_and_missing(tmp_path):
    """A folder with no files, a run with no eval at all: no crash, "-" where nothing is defined."""
    empty = report.load_run(str(tmp_path / "missing"), 0)
    assert empty["evals"] == [] and empty["final_success"] is None and empty["policy_tokens_per_step"] is None
    result = report.summarize({"a": [empty], "b": []})
    assert result["budget_tokens"] is None and result["methods"]["b"]["final_success"]["mean"] is None
    rows = md_table(report.markdown(result))
    assert [r["seeds"] for r in rows.values()] == ["1", "0"] and "success @ - tokens" in rows["b"]
    # "-" where nothing is defined; the empty run did spend something: nothing (0 judge calls)
    defined = {label: {k for k, v in row.items() if v != "-"} for label, row in rows.items()}
    assert defined == {"a": {"method", "seeds", "judge calls", "judge $"}, "b": {"method", "seeds"}}, rows
    assert figures(rows["a"]["judge calls"]) == figures(rows["a"]["judge $"]) == [0.0]
    report.plot({"a": [empty], "b": []}, str(tmp_path / "p.png"))


def compare(tmp_path, *args, timeout=900):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "-m", "prover_jax.compare.cli", f"--config={TINY}", *args],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)


def test_cli_bad_method_fails_before_any_run(tmp_path):
    out = compare(tmp_path, "--methods=grpo,nosuch", f"--workdir={tmp_path / 'w'}")
    assert out.returncode != 0 and "unknown credit method 'nosuch'" in out.stderr
    assert not (tmp_path / "w").exists()


def test_report_only_se_of_old_records_with_uncapped_eval_seeds(tmp_path):
    """env.eval_seeds = 0 (the default) means no cap: an old record without SEs gets the binomial SE
    over train.eval_episodes, not none."""
    w = tmp_path / "w"
    old_style(str(w / "grpo" / "seed0"), 0.25, 0.75)
    out = compare(tmp_path, "--methods=grpo", "--seeds=1", f"--workdir={w}", "--report_only",
                  "--config.train.steps=2", "--config.env.eval_seeds=0", "--config.train.eval_episodes=16")
    assert out.returncode == 0, out.stderr[-3000:]
    final = json.load(open(w / "compare.json"))["methods"]["grpo"]["final_success"]
    assert final["pm"] == pytest.approx(math.sqrt(0.75 * 0.25 / 16))


def test_one_sft_start_for_every_seed(tmp_path):
    """--sft_seed=0: seed 1 resumes from seed 0's SFT checkpoint (no SFT of its own) and still plays its
    own tasks (the task order follows config.seed)."""
    w = tmp_path / "w"
    out = compare(tmp_path, "--methods=grpo", "--seeds=2", "--sft_seed=0", f"--workdir={w}")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert sorted(p.name for p in (w / "_sft").iterdir()) == ["seed0"]
    for s in (0, 1):
        summary = json.load(open(w / "grpo" / f"seed{s}" / "summary.json"))
        assert summary["sft_shared_from"] == str(w / "_sft" / "seed0")
    rows = [[json.loads(line) for line in open(w / "grpo" / f"seed{s}" / "metrics.jsonl")] for s in (0, 1)]
    tasks = [[r["tasks"] for r in seed_rows if "tasks" in r] for seed_rows in rows]
    assert tasks[0] and tasks[0] != tasks[1]
    assert "every seed from seed 0's SFT start" in open(w / "compare.md").read()


def test_end_to_end(tmp_path):
    w = tmp_path / "w"
    out = compare(tmp_path, "--methods=grpo,prover", "--seeds=2", "--parallel=2", f"--workdir={w}",
                  "--config.train.eval_every=1")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    starts = re.findall(r"\[start\]\s+(\S+)", out.stdout)  # seed by seed, each SFT just before its seed's runs
    assert starts.index("_sft/seed0") < starts.index("grpo/seed0") < starts.index("_sft/seed1"), starts
    assert starts.index("prover/seed0") < starts.index("_sft/seed1") < starts.index("grpo/seed1"), starts
    for slug in ("grpo", "prover"):
        for s in (0, 1):
            log = open(w / slug / f"seed{s}" / "run.log").read()
            assert "--config.train.eval_every=1" in log and f"--config.seed={s}" in log
            assert "resumed from" in log and "at step 0" in log  # started from the shared SFT checkpoint
    assert (w / "_sft" / "seed1" / "checkpoints" / "0").is_dir()
    saved = json.load(open(w / "compare.json"))
    assert list(saved["methods"]) == ["grpo", "prover"] and saved["failed"] == []
    for m in saved["methods"].values():
        assert m["seeds_completed"] == 2 and m["final_success"]["kind"] == "ci95"
        assert [len(s["evals"]) for s in m["per_seed"]] == [3, 3]  # steps 0, 1, 2
    assert saved["budget_tokens"] > 0 and os.path.getsize(w / "compare.png") > 1000
    table = md_table(open(w / "compare.md").read())
    for label, m in saved["methods"].items():  # the table prints compare.json's figures
        assert table[label]["seeds"] == "2/2", table[label]
        assert figures(table[label]["final eval success"]) == pytest.approx(
            [m["final_success"]["mean"], m["final_success"]["pm"]], abs=5e-4)
        assert figures(table[label]["policy tokens/step"]) == pytest.approx([m["policy_tokens_per_step"]], abs=0.5)

    # the exported record (report + each run's summary and metrics, no checkpoints) continues the comparison
    rec, w2 = tmp_path / "record", tmp_path / "w2"
    out = compare(tmp_path, "--methods=grpo,prover", "--seeds=2", f"--workdir={w}", "--report_only",
                  f"--export={rec}")
    assert out.returncode == 0 and not list(rec.glob("*/seed*/checkpoints"))
    assert sorted(p.name for p in (rec / "prover" / "seed1").iterdir()) == ["metrics.jsonl", "summary.json"]
    # a record keeps no path of the machine it was made on: run folders and summary paths are relative
    exported = json.load(open(rec / "compare.json"))
    assert [r["folder"] for r in exported["methods"]["prover"]["per_seed"]] == ["prover/seed0", "prover/seed1"]
    summary = json.load(open(rec / "prover" / "seed1" / "summary.json"))
    assert summary["plot"] == "progress.png" and summary["sft_shared_from"] == os.path.join("..", "..", "_sft", "seed1")
    assert str(tmp_path) not in (rec / "compare.json").read_text() + (rec / "prover" / "seed1" / "summary.json").read_text()
    shutil.copytree(rec, w2)
    out = compare(tmp_path, "--methods=grpo,prover", "--seeds=2", f"--workdir={w2}")
    assert out.returncode == 0 and out.stdout.count("already complete") == 4
    assert not (w2 / "_sft").exists()  # every run sharing an SFT is complete: no SFT run
    again = json.load(open(w2 / "compare.json"))
    for m in list(again["methods"].values()) + list(saved["methods"].values()):
        for run in m["per_seed"]:
            run["folder"] = os.path.relpath(run["folder"], os.path.dirname(os.path.dirname(run["folder"])))
    assert again["methods"] == saved["methods"]

    # again, with a method that fails: complete runs are skipped, the failure is named, the report stays
    out = compare(tmp_path, "--methods=grpo,prover,grpo:optim.name=nosuch", "--seeds=1", f"--workdir={w}")
    assert out.returncode == 1
    assert "grpo/seed0: already complete" in out.stdout and "prover/seed0: already complete" in out.stdout
    assert "grpo+optim.name=nosuch/seed0" in out.stderr and "run.log" in out.stderr
    saved = json.load(open(w / "compare.json"))
    assert saved["methods"]["grpo:optim.name=nosuch"]["seeds_completed"] == 0 and len(saved["failed"]) == 1
    assert saved["methods"]["grpo"]["seeds_completed"] == 1
