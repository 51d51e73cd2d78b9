"""One metrics row per optimizer step from the rows of all processes (each played its own groups).

    row = merge_rows(allgather_json(local_row), needs.merge)   # the same merged row on every process

Counts add up (episodes, tokens; a credit method's proposals, judge calls, cuts, ...); rates are
recomputed from the summed counts or averaged with their natural weights (success over episodes,
invalid actions over turns; a method's as its `Needs.merge` says); wall times and `compiles` take
the slowest / most compiling process; everything else (the global update's loss, gradient norm, ...)
is the same on every process and is taken from process 0. With one process the row comes back unchanged.

    tb = TensorBoardLog(root / "tensorboard", kept_rows)   # process 0 only
    tb.write(row)                                           # every numeric scalar of the row at row["step"]

TensorBoardLog mirrors metrics.jsonl (train.loggers has tensorboard): opening it (a new run or a resume, after the
trainer dropped the rows of steps past the checkpoint) deletes the folder's event files and writes the
rows kept in metrics.jsonl again into one new file, so a resumed run shows each step once.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

import numpy as np

from prover_jax.credit.base import EXTRA_TOKENS, Merge

BASE = Merge(sums=("episodes", "trained_episodes", "turns_total", "policy_tokens", EXTRA_TOKENS, "adv/tokens"),
             means=(("success_rate", "episodes"), ("truncated_frac", "episodes"), ("score", "episodes"),
                    ("turns", "episodes"), ("invalid_action_frac", "turns_total"), ("overlong_penalty", "episodes"),
                    ("adv/net_token_mean", "adv/tokens"), ("adv/abs_token_mean", "adv/tokens")))
MAXED_PREFIXES = ("time/", "compiles")


def merge_rows(rows: list[dict], merge: Merge = Merge()) -> dict:
    """One row from several (processes, or dynamic-sampling draws): the episodes' figures by `BASE`,
    the credit method's by `merge` (its `Needs.merge`), wall times and compiles the largest, anything
    else the first row's."""
    if len(rows) == 1:
        return dict(rows[0])
    out = dict(rows[0])
    sums = BASE.sums + merge.sums
    names = {k for k in sums if not k.endswith("/")}
    prefixes = tuple(k for k in sums if k.endswith("/"))
    for k in {k for r in rows for k in r}:
        values = [r.get(k, 0) for r in rows]
        if k in names or k.startswith(prefixes):
            out[k] = sum(values)
        elif k.startswith(MAXED_PREFIXES):
            out[k] = max(values)
    for k, w in BASE.means + merge.means:
        if k in out:
            total = sum(r.get(w, 0) for r in rows)
            out[k] = (sum(r.get(k, 0) * r.get(w, 0) for r in rows) / total) if total else 0.0
    for k, num, den in BASE.ratios + merge.ratios:
        if k in out:
            out[k] = out.get(num, 0) / out[den] if out.get(den) else 0.0
    return out


def applied_steps(rows: list[dict]) -> int:
    """Training rows of updates that applied (a skipped, non-finite update is not a step)."""
    return sum(r.get("applied", True) is not False for r in rows)


def spent(rows: list[dict], key: str) -> float:
    """A spend over a run's training rows: the last row's running total/`key` where rows carry it (it
    keeps what steps dropped at a resume spent), else the sum of `key` over the rows."""
    if rows and f"total/{key}" in rows[-1]:
        return float(rows[-1][f"total/{key}"])
    return float(sum(float(r.get(key) or 0) for r in rows))


def episode_metrics(played) -> dict:
    """The row's figures of the episodes played (a step's trajectories): counts, success, score, turns,
    sampled policy tokens, inadmissible-action share over turns, share cut by the context limit."""
    from prover_jax.rollout.trajectory import CONTEXT_LIMIT
    turns = [turn for t in played for turn in t.turns]
    return {"episodes": len(played), "turns_total": len(turns),
            "success_rate": float(np.mean([t.success for t in played])),
            "score": float(np.mean([t.score for t in played])),
            "turns": float(np.mean([t.num_turns for t in played])),
            "policy_tokens": int(sum(t.num_policy_tokens for t in played)),
            "invalid_action_frac": float(np.mean([not turn.valid for turn in turns])) if turns else 0.0,
            "truncated_frac": float(np.mean([t.termination == CONTEXT_LIMIT for t in played]))}


def advantage_metrics(trajs, advantages) -> dict:
    """The trained tokens' advantages (`trajs` and their float32 [L] advantages): adv/net_token_mean =
    sum_tokens A / tokens, the net push of a token-mean loss on the log-probs of the tokens sampled
    (negative when failed episodes carry more policy tokens than successes: each group's A sums to 0
    over episodes, not over tokens); adv/abs_token_mean = sum_tokens |A| / tokens; adv/tokens = the
    policy tokens counted."""
    on = [np.asarray(a, np.float64)[np.asarray(t.policy_mask, bool)] for t, a in zip(trajs, advantages, strict=True)]
    n = float(sum(x.size for x in on))
    total, mass = float(sum(x.sum() for x in on)), float(sum(np.abs(x).sum() for x in on))
    return {"adv/net_token_mean": total / n if n else 0.0, "adv/abs_token_mean": mass / n if n else 0.0,
            "adv/tokens": n}


class CompileCounter:
    """XLA backend compilations in this process since the last `take()` (jax.monitoring events):
    the trainer's `compiles` per step, 0 in steady state."""

    _EVENT = "/jax/core/compile/backend_compile_duration"
    _count = 0
    _registered = False

    def __init__(self):
        cls = type(self)
        if not cls._registered:
            import jax

            def on_event(event, *args, **kwargs):
                if event == cls._EVENT:
                    cls._count += 1

            jax.monitoring.register_event_duration_secs_listener(on_event)
            cls._registered = True
        self._seen = cls._count

    def take(self) -> int:
        now = type(self)._count
        n, self._seen = now - self._seen, now
        return n


class TensorBoardLog:
    """Event files (tensorboardX, written synchronously) with the numeric scalars of metrics rows; a
    remote folder (gs://) gets a copy of the local file after every row."""

    def __init__(self, folder, rows=()):
        from tensorboardX.event_file_writer import EventsWriter
        from prover_jax.training.workdir import is_local

        self.folder = folder
        if folder.exists():
            for old in folder.glob("events.out.tfevents.*"):
                old.unlink()
        folder.mkdir(parents=True, exist_ok=True)
        self.remote = not is_local(folder)
        self.local = tempfile.mkdtemp(prefix="prover-tensorboard-") if self.remote else os.fspath(folder)
        self.writer = EventsWriter(os.path.join(self.local, "events"))
        for row in rows:
            self._add(row)
        self._flush()

    def write(self, row: dict) -> None:
        self._add(row)
        self._flush()

    def _add(self, row: dict) -> None:
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.proto.summary_pb2 import Summary

        values = [Summary.Value(tag=k, simple_value=float(v)) for k, v in row.items()
                  if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)]
        if values:
            self.writer.write_event(Event(wall_time=time.time(), step=int(row.get("step", 0)),
                                          summary=Summary(value=values)))

    def _flush(self) -> None:
        from prover_jax.training.workdir import copy_file

        self.writer.flush()
        if self.remote:  # the temporary folder holds this one file
            for name in os.listdir(self.local):
                copy_file(os.path.join(self.local, name), self.folder / name)

    def close(self) -> None:
        self.writer.close()
        if self.remote:
            shutil.rmtree(self.local, ignore_errors=True)
