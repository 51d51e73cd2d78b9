"""Training curves from metrics.jsonl (WORKDIR/progress.png), two panels over the optimizer step:

- success: training success rate per step, the held-out evaluations (greedy success with its standard
  error as error bars: the rows at step 0, every train.eval_every steps and at the end) and ProVer's
  acceptance at the steps that had valid proposals;
- wall time per step: rollout, credit wait (after the last episode), update and the rest of the step
  stacked (they add up to time/step_s), judge and verification busy time as lines (they run during the
  rollout, so they are not stacked).

A curve whose keys no row has (acceptance of a grpo run, evaluations of a run without them) is left out.
"""

from __future__ import annotations

import json

STACKED = (("rollout", "time/rollout_s"), ("credit wait", "time/credit_wait_s"), ("update", "time/update_s"))
OVERLAPPING = (("judge (during rollout)", "time/judge_s"), ("verify (during rollout)", "time/verify_s"))


def series(rows: list[dict]) -> dict[str, tuple]:
    """The plotted curves, name -> (steps, values) or, for "eval success", (steps, values, standard
    errors); wall-time curves are named "time/<name>"."""
    train = [r for r in rows if "success_rate" in r]
    evals = [r for r in rows if "eval/success" in r]
    # acceptance is undefined at a step without a valid proposal: no point there (not a false 0)
    judged = [r for r in train if r.get("prover/valid_proposals", 0) > 0 and "prover/acceptance_rate" in r]
    steps = lambda rs: [r["step"] for r in rs]
    out = {}
    if train:
        out["train success"] = (steps(train), [r["success_rate"] for r in train])
    if judged:
        out["acceptance"] = (steps(judged), [r["prover/acceptance_rate"] for r in judged])
    if evals:
        out["eval success"] = (steps(evals), [r["eval/success"] for r in evals],
                               [r.get("eval/success_se", 0.0) for r in evals])
    timed = [r for r in train if "time/step_s" in r]
    for name, key in STACKED + OVERLAPPING:
        if any(key in r for r in timed):
            out[f"time/{name}"] = (steps(timed), [r.get(key, 0.0) for r in timed])
    if timed:
        rest = [max(r["time/step_s"] - sum(r.get(k, 0.0) for _, k in STACKED), 0.0) for r in timed]
        out["time/other"] = (steps(timed), rest)
    return out


def figure(rows: list[dict]):
    """The matplotlib figure of `series(rows)` (axes[0]: success, axes[1]: wall time, when timed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = series(rows)
    times = [k for k in s if k.startswith("time/")]
    fig, axes = plt.subplots(2 if times else 1, 1, figsize=(7, 7 if times else 4), sharex=True, squeeze=False)
    ax = axes[0, 0]
    if "train success" in s:
        ax.plot(*s["train success"], ".-", label="train success rate")  # a marker: one step is a point
    if "acceptance" in s:
        ax.plot(*s["acceptance"], "x--", label="ProVer acceptance rate (steps with proposals)")
    if "eval success" in s:
        episodes = next((r["eval/episodes"] for r in reversed(rows) if "eval/episodes" in r), "?")
        x, y, se = s["eval success"]
        ax.errorbar(x, y, yerr=se, fmt="o-", capsize=3,
                    label=f"eval success (greedy, {episodes} held-out tasks, ±1 SE)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("rate")
    if ax.has_data():
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    if times:
        ax = axes[1, 0]
        stacked = [k for k in ("time/rollout", "time/credit wait", "time/update", "time/other") if k in s]
        x = s[stacked[0]][0]
        if len(x) > 1:
            ax.stackplot(x, *[s[k][1] for k in stacked], labels=[k[5:] for k in stacked], alpha=0.7)
        else:  # one step: an area over one x has no width, so stacked bars
            bottom = 0.0
            for k in stacked:
                ax.bar(x, s[k][1], bottom=bottom, width=0.5, label=k[5:], alpha=0.7)
                bottom += s[k][1][0]
        for name, _ in OVERLAPPING:
            if f"time/{name}" in s:
                ax.plot(*s[f"time/{name}"], ".--", label=name)
        ax.set_ylabel("wall seconds per step")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("optimizer step")
    fig.tight_layout()
    return fig


def plot_metrics(metrics_path: str, out_png: str) -> str:
    with open(metrics_path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    fig = figure(rows)
    import matplotlib.pyplot as plt
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png
