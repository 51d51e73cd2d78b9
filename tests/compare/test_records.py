"""The recorded comparisons (bench/results/compare_*) reproduce: the report rebuilt from each record's runs
is its compare.md, and the README's tables print the same cells."""

import glob
import json
import os

import pytest

from prover_jax.compare import report

from helpers.markdown import md_table

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORDS = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(ROOT, "bench/results/compare_*/compare.json")))
SHARED = ("final eval success", "RL gain", "Δ vs grpo", "Δ per seed", "extra-token frac")


def rebuild(record: str, out: str) -> str:
    saved = json.load(open(os.path.join(record, "compare.json")))
    runs = {label: [report.load_run(os.path.join(record, *s["folder"].split(os.sep)[-2:]), s["seed"], 200)
                    for s in m["per_seed"]] for label, m in saved["methods"].items()}
    requested = next(iter(saved["methods"].values()))["seeds_requested"]
    title = open(os.path.join(record, "compare.md")).readline().split(": ", 1)[1].strip()
    paths = report.write_report(report.summarize(runs, requested), runs, out, title=title)
    return open(paths["md"]).read()


@pytest.mark.skipif(not RECORDS, reason="no recorded comparison")
@pytest.mark.parametrize("record", RECORDS, ids=os.path.basename)
def test_record_reproduces_and_readme_quotes_it(record, tmp_path):
    md = open(os.path.join(record, "compare.md")).read()
    assert rebuild(record, str(tmp_path)) == md
    recorded = md_table(md)
    budget = json.load(open(os.path.join(record, "compare.json")))["budget_tokens"]
    readme = open(os.path.join(ROOT, "README.md")).read()
    header = [i for i, line in enumerate(readme.splitlines())
              if line.startswith("| method |") and f"success @ {budget:,.0f} tokens" in line]
    assert len(header) == 1, f"README: one table at the budget of {os.path.basename(record)} ({budget:,.0f})"
    quoted = md_table(readme, header[0])
    assert list(quoted) == list(recorded)
    for method, row in quoted.items():
        for column in SHARED + (f"success @ {budget:,.0f} tokens",):
            assert row[column] == recorded[method][column], (method, column)
