"""Item 2's two learning figures of RL runs, from their metrics.jsonl: held-out greedy success at each
evaluation, and the rise of sampled training success (mean of the last 10 steps minus the first 10),
per run and per lever (runs named LEVER_sSEED, averaged over their seeds).

    python bench/training_rise.py bench/results/learning_levers/rl_*
"""

from __future__ import annotations

import collections
import json
import os
import re
import sys


def figures(folder: str) -> dict | None:
    path = os.path.join(folder, "metrics.jsonl")
    rows = [json.loads(line) for line in open(path)] if os.path.exists(path) else []
    train = [r for r in rows if "success_rate" in r]
    if len(train) < 20 or "eval/success" not in rows[-1]:  # unfinished runs are left out
        return None
    sr = [r["success_rate"] for r in train]
    inv = [r["invalid_action_frac"] for r in train]
    return {"eval": [r["eval/success"] for r in rows if "eval/success" in r],
            "first10": sum(sr[:10]) / 10, "last10": sum(sr[-10:]) / 10, "rise": (sum(sr[-10:]) - sum(sr[:10])) / 10,
            "invalid_first5": sum(inv[:5]) / 5, "invalid_last5": sum(inv[-5:]) / 5}


def main(folders: list[str]) -> None:
    by_lever = collections.defaultdict(list)
    for f in sorted(folders):
        fig = figures(f)
        if fig is None:
            continue
        name = os.path.basename(f.rstrip("/"))
        print(f"{name:24s} held-out {' / '.join(f'{e:.3f}' for e in fig['eval'])}  sampled {fig['first10']:.3f} -> "
              f"{fig['last10']:.3f} ({100 * fig['rise']:+.1f})  inadmissible {fig['invalid_first5']:.2f} -> "
              f"{fig['invalid_last5']:.2f}")
        m = re.match(r"(.*)_s(\d+)$", name)
        by_lever[m.group(1) if m else name].append(fig)
    print()
    for lever, figs in by_lever.items():
        gain = sum(f["eval"][-1] - f["eval"][0] for f in figs) / len(figs)
        rise = sum(f["rise"] for f in figs) / len(figs)
        print(f"{lever:24s} seeds {len(figs)}  held-out gain {100 * gain:+.1f}  sampled rise {100 * rise:+.1f}  "
              "(per seed " + ", ".join(f"{100 * f['rise']:+.1f}" for f in figs) + ")")


if __name__ == "__main__":
    main(sys.argv[1:])
