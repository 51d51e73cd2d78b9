"""The recorded comparisons (bench/results/compare_*) reproduce: the report rebuilt from each record's runs
is its compare.md (AUC and collapse figures included), and the tables the docs quote (README.md,
docs/*.md) print the same cells."""

import glob
import json
import os

import pytest

from prover_jax.compare import report

from helpers.markdown import md_table

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORDS = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(ROOT, "bench/results/compare_*/compare.json")))
SHARED = ("final eval success", "RL gain", "Δ vs grpo", "Δ per seed", "extra-token frac")


def doc_texts() -> list[str]:
    """README.md and docs/*.md: the texts that quote the records' tables."""
    paths = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    return [open(p, encoding="utf-8").read() for p in paths]


def rebuild(record: str, out: str) -> tuple[str, dict]:
    """The report rebuilt from the record's runs: (compare.md, compare.json's numbers)."""
    saved = json.load(open(os.path.join(record, "compare.json")))
    runs = {label: [report.load_run(os.path.join(record, *s["folder"].split(os.sep)[-2:]), s["seed"], 200)
                    for s in m["per_seed"]] for label, m in saved["methods"].items()}
    requested = next(iter(saved["methods"].values()))["seeds_requested"]
    title = open(os.path.join(record, "compare.md")).readline().split(": ", 1)[1].strip()
    result = report.summarize(runs, requested)
    paths = report.write_report(result, runs, out, title=title)
    return open(paths["md"]).read(), result


def check_new_figures(result: dict, table: dict) -> None:
    """Every run of a record evaluated after step 0: its AUC, drawdown and collapse flag are computed,
    and the table prints each method's AUC and collapse count; collapsed runs are listed."""
    first = next(iter(result["methods"]))
    for label, m in result["methods"].items():
        for s in m["per_seed"]:
            after = [e["success"] for e in s["evals"] if e["step"] > 0]
            assert after and s["auc"] == pytest.approx(sum(after) / len(after)), (label, s["seed"])
            assert s["drawdown"] >= 0 and s["collapsed"] == (s["drawdown"] > report.COLLAPSE_DROP)
            assert (s["auc_vs_first"] is None) == (label == first)
        assert m["auc"]["n"] == m["seeds_completed"] and table[label]["AUC"].startswith(f"{m['auc']['mean']:.3f}")
        assert table[label]["collapsed"] == f"{m['collapsed']['count']} of {m['seeds_completed']}"


@pytest.mark.skipif(not RECORDS, reason="no recorded comparison")
@pytest.mark.parametrize("record", RECORDS, ids=os.path.basename)
def test_record_reproduces_and_the_docs_quote_it(record, tmp_path):
    md = open(os.path.join(record, "compare.md")).read()
    recorded = md_table(md)
    rebuilt_md, result = rebuild(record, str(tmp_path))
    assert rebuilt_md == md  # the record's compare.md is the report its runs give today
    rebuilt = md_table(rebuilt_md)
    assert list(rebuilt) == list(recorded)
    for method, row in recorded.items():  # the recorded columns, cell by cell (the report has added some)
        assert {k: rebuilt[method][k] for k in row} == row, method
    check_new_figures(result, rebuilt)
    budget = json.load(open(os.path.join(record, "compare.json")))["budget_tokens"]
    found = [(text, i) for text in doc_texts() for i, line in enumerate(text.splitlines())
             if line.startswith("| method |") and f"success @ {budget:,.0f} tokens" in line]
    assert len(found) == 1, f"docs: one table at the budget of {os.path.basename(record)} ({budget:,.0f})"
    quoted = md_table(*found[0])
    assert list(quoted) == list(recorded)
    for method, row in quoted.items():
        for column in SHARED + (f"success @ {budget:,.0f} tokens",):
            assert row[column] == recorded[method][column], (method, column)
