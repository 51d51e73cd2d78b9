"""`prover-episodes`: a run's episode files (train.dump_episodes) printed readably in a terminal.

    prover-episodes W                    # the latest step's episodes, turn by turn
    prover-episodes W --step=3 --failed  # step 3's failed episodes only
    prover-episodes W --eval --step=10   # the evaluation at step 10 (--eval alone: the latest evaluation)
    prover-episodes W --text             # each episode's whole text, the policy's tokens marked

The policy's tokens are marked in colour on a terminal, between « and » otherwise.
"""

from __future__ import annotations

import os
import re
import sys

from absl import app, flags

from prover_jax.training import episodes
from prover_jax.training.workdir import workdir_path

FLAGS = flags.FLAGS
flags.DEFINE_integer("step", None, "The step whose episodes to show (default: the latest).")
flags.DEFINE_bool("eval", False, "Show an evaluation's episodes (eval_<step>.jsonl), not a training step's.")
flags.DEFINE_bool("failed", False, "Only the failed episodes.")
flags.DEFINE_bool("text", False, "Print each episode's whole text with the policy's tokens marked.")
flags.DEFINE_integer("limit", 0, "Show at most this many episodes (0: all).")

PATTERN = re.compile(r"^(step|eval)_(\d+)\.jsonl$")


def files(root) -> dict[tuple[str, int], object]:
    """(kind, step) -> path of every episode file under W/episodes."""
    folder = root / episodes.FOLDER
    if not folder.exists():
        return {}
    out = {}
    for p in folder.iterdir():
        m = PATTERN.match(p.name)
        if m:
            out[(m.group(1), int(m.group(2)))] = p
    return out


def choose(found: dict, kind: str, step: int | None, where: str):
    steps = sorted(s for k, s in found if k == kind)
    if not steps:
        raise SystemExit(f"prover-episodes: no {kind}_<step>.jsonl under {where} (a run writes them with "
                         "--config.train.dump_episodes=N)")
    if step is None:
        step = steps[-1]
    if (kind, step) not in found:
        raise SystemExit(f"prover-episodes: no {kind}_{step}.jsonl under {where}; it has steps "
                         f"{', '.join(map(str, steps))}")
    return step, found[(kind, step)]


def marked(text: str, spans, colour: bool) -> str:
    """`text` with the character spans [a, b) marked as the policy's."""
    start, end = ("\x1b[1;32m", "\x1b[0m") if colour else ("«", "»")
    out, at = [], 0
    for a, b in sorted(spans):
        out += [text[at:a], start, text[a:b], end]
        at = b
    return "".join(out + [text[at:]])


def describe(r: dict, colour: bool, whole_text: bool) -> str:
    outcome = "success" if r["success"] else f"FAILED ({r.get('termination')})"
    lines = [f"== task {r['seed']} (uid {r['uid']}): {outcome}, reward {r['reward']:.2f}, {len(r['turns'])} turns"]
    if r.get("credit"):
        lines.append("   credit: " + ", ".join(f"{k}={v}" for k, v in r["credit"].items() if k not in ("pre", "post")))
        for side in ("pre", "post"):
            for c in r["credit"].get(side, []):
                actions = " | ".join(map(str, c.get("actions", [])))
                lines.append(f"     {side}: {'success' if c['success'] else 'failed '}  {actions}")
    if whole_text:
        lines.append(marked(r["text"], [t["span"] for t in r["turns"]], colour))
        return "\n".join(lines)
    lines.append(f"   {r['task']}")
    segment = r.get("credit", {}).get("segment") or [-1, -2]
    for t, turn in enumerate(r["turns"]):
        adv = "" if turn["advantage"] is None else f"adv {turn['advantage']:+.3f} "
        seg = "*" if segment[0] <= t <= segment[1] else " "
        flag = "" if turn["valid"] else "  [inadmissible]"
        response = marked(turn["response"], [(0, len(turn["response"]))], colour)
        lines.append(f" {seg}{t:>3} {adv}{response}{flag}")
        obs = turn["observation"].strip().replace("\n", " ")
        lines.append(f"       -> {obs[:200]}")
    return "\n".join(lines)


def main(argv):
    if len(argv) != 2:
        raise app.UsageError("usage: prover-episodes WORKDIR [--step=K] [--eval] [--failed] [--text]")
    root = workdir_path(argv[1])
    step, path = choose(files(root), "eval" if FLAGS.eval else "step", FLAGS.step, str(root))
    try:
        rows = episodes.read(path)
    except (OSError, ValueError) as e:
        raise SystemExit(f"prover-episodes: {e}") from None
    if FLAGS.failed:
        rows = [r for r in rows if not r["success"]]
    if FLAGS.limit:
        rows = rows[:FLAGS.limit]
    colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    what = "evaluation at step" if FLAGS.eval else "step"
    print(f"{os.fspath(path)}: {what} {step}, {len(rows)} episodes"
          f"{' (failed only)' if FLAGS.failed else ''}")
    for r in rows:
        print(describe(r, colour, FLAGS.text))


def run():
    app.run(main)


if __name__ == "__main__":
    run()
