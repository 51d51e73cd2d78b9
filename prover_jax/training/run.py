"""The whole training job (SFT warm start, RL steps with checkpoints, evaluation, export, plot);
flag-free so `prover-train` and `make demo` share it. Every process of a multi-host run calls it;
process 0 writes what is written once (summary, plot, metrics).

    summary = train(config, workdir, export_hf=None)

Evaluation (greedy, held-out eval tasks; `Trainer.evaluate`) runs before RL, every train.eval_every
steps and after the last step (with train.steps = 0, the evaluation before RL is the one after it; an
update skipped as non-finite leaves the step count as it was: that step is not evaluated or saved
again; re-running a finished run's command keeps its last evaluation and logs nothing); each appends
a row {"step": the step it followed, "eval/success", "eval/success_se", "eval/score", "eval/score_se",
"eval/episodes"} to metrics.jsonl (training rows are the ones with "success_rate"). The summary keeps
success_before_rl / success_after_rl (floats) and the whole rows as eval_before_rl / eval_after_rl.

Process 0 also writes every row's numeric scalars to the sinks of train.loggers (training/trackers.py;
TensorBoard's files are rewritten from metrics.jsonl's kept rows at each start, so a resumed run shows
each step once) and shows a progress bar (train success, latest eval success ± SE, the credit method's
headline figures, `Needs.headline`, e.g. ProVer's acceptance, seconds per step); `summary_block(summary)`
is the short text of the figures that matter, printed by prover-train at the end. No method's metric
is named here: a figure is found by its metric names in the rows (or its keys in the summary).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

from absl import logging


def train(config, workdir: str, export_hf: str | None = None, eval_only: bool = False,
          progress: bool = True) -> dict:
    """Runs (or resumes) the whole job; returns the summary dict. The process keeps the host memory
    it frees for reuse (`distributed.keep_host_memory`)."""
    from prover_jax import distributed as dist
    from prover_jax.training import provenance
    from prover_jax.training.trainer import Trainer
    from prover_jax.training.workdir import read_rows, workdir_path, write_atomic

    dist.keep_host_memory()
    dist.initialize()  # TPU pods: auto-detected; no-op on one host or when already initialised
    t_start = time.perf_counter()
    trainer = Trainer(config, workdir)
    primary = trainer.run.primary
    provenance.record(trainer.run.root, config, trainer.run.mesh, primary)
    summary_path = trainer.run.root / "summary.json"
    summary = _read_summary(summary_path)

    def save_summary():
        if primary:
            write_atomic(summary_path, json.dumps(summary, indent=1))

    rows = read_rows(trainer.run.metrics_path) if primary else []
    latest = {"train": None, "eval": next((r for r in reversed(rows) if "eval/success" in r), None)}
    sinks, bar = [], None

    def log(row: dict) -> None:
        trainer.log(row)
        for sink in sinks:
            sink.write(row)
        latest["eval" if "eval/success" in row else "train"] = row
        if bar is not None:
            bar.set_postfix(_live(latest["train"], latest["eval"], trainer.run.needs.headline))

    def evaluate() -> dict:
        """Evaluates on the held-out tasks and logs the row {"step": current step, "eval/...": ...}."""
        result = trainer.evaluate()
        log({"step": trainer.step, **result})
        return result

    try:
        if primary and not eval_only:
            from prover_jax.training.trackers import open_sinks
            sinks = open_sinks(config, trainer.run.root, rows)
        if eval_only:
            summary["eval_only"] = trainer.evaluate()
            summary["eval_only_success"] = summary["eval_only"]["eval/success"]
            return summary
        if not trainer.sft_done:
            summary["sft"] = trainer.run_sft(progress=progress)
            trainer.save()
            save_summary()
        if "success_before_rl" not in summary:  # or it was, at step 0, and the summary was lost since
            logged = dist.allgather_json(next((r for r in rows if "eval/success" in r and r["step"] == 0), None))[0]
            if logged is not None or trainer.step == 0:
                summary["eval_before_rl"] = evaluate() if logged is None else _eval_of(logged)
                summary["success_before_rl"] = summary["eval_before_rl"]["eval/success"]
                save_summary()
        steps = config.train.steps
        # a finished run: its last row is the evaluation after its last step
        done = rows and "eval/success" in rows[-1] and rows[-1]["step"] == trainer.step >= steps
        final = dist.allgather_json(rows[-1] if done else None)[0]
        if progress and primary:
            from tqdm import tqdm
            bar = tqdm(total=steps, initial=trainer.step, desc="RL", dynamic_ncols=True, file=sys.stdout)
        while trainer.step < steps:
            before = trainer.step
            row = trainer.rl_step()
            log(row)
            if trainer.step == before:  # skipped (non-finite): the step count did not move, nothing to save
                continue
            if bar is not None:
                bar.update(1)
            every = config.train.eval_every
            if every and trainer.step % every == 0 and trainer.step < steps:
                evaluate()
            if trainer.step % config.train.checkpoint_every == 0 or trainer.step == steps:
                trainer.save()
        if bar is not None:
            bar.close()
            bar = None
        if final is not None:
            logging.info("the run in %s is finished (step %d); its last evaluation is kept", trainer.run.root,
                         trainer.step)
        elif trainer.step == 0 and "eval_before_rl" in summary:  # no step (train.steps = 0): nothing new
            final = {"step": 0, **summary["eval_before_rl"]}
        summary["eval_after_rl"] = evaluate() if final is None else _eval_of(final)
        summary["success_after_rl"] = summary["eval_after_rl"]["eval/success"]
        if primary:
            summary.update(_totals(read_rows(trainer.run.metrics_path), trainer.run.needs.headline))
        summary["wall_s_this_run"] = time.perf_counter() - t_start
        if export_hf:
            trainer.export_hf(export_hf)
            summary["exported_hf"] = str(workdir_path(export_hf))
        if primary:
            summary["plot"] = _plot(trainer)
        save_summary()
        return summary
    finally:
        for sink in sinks:
            sink.close()
        trainer.close()


def _read_summary(path) -> dict:
    """summary.json's dict ({} when absent). One that cannot be read (a kill mid-write) is warned of and
    rebuilt: what it held is derived from metrics.jsonl and the checkpoint (the SFT figures are lost)."""
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        logging.warning("%s cannot be read (%s); it is rewritten from metrics.jsonl", path, e)
        return {}


def _eval_of(row: dict) -> dict:
    """An evaluation row as the summary keeps it (without its step)."""
    return {k: v for k, v in row.items() if k != "step"}


def _live(row: dict | None, last_eval: dict | None, headline=None) -> dict:
    """The progress bar's figures: the step's train success, the latest evaluation (mean ± SE), the
    credit method's headline figures whose metrics the row has (`headline`: its `Needs.headline`;
    None: every registered method's), a rate as "num / den (num/den)", seconds per step."""
    from prover_jax.credit.base import headlines

    live = {}
    if row is not None:
        live["train"] = f"{row['success_rate']:.2f}"
    if last_eval is not None:
        live["eval"] = f"{last_eval['eval/success']:.2f}±{last_eval.get('eval/success_se', 0):.2f}"
    shown = [] if row is None else [f for f in (headlines() if headline is None else headline) if f.num in row]
    for f in shown:
        num, den = row[f.num], row.get(f.den, 0)
        if not f.den:
            live[f.short] = f"{num:.0f}"
        else:
            live[f.short] = f"{num / den:.2f} ({num:.0f}/{den:.0f})" if den else "-"
    if row is not None and "time/step_s" in row:
        live["s/step"] = f"{row['time/step_s']:.1f}"
    return live


def summary_block(s: dict, headline=None) -> str:
    """A few lines for the end of a run: evaluations (± SE), steps, the credit method's headline figures
    that are not zero (`headline`: its `Needs.headline`; None: every registered method's found in `s`),
    where the wall time went."""
    from prover_jax.credit.base import headlines

    pm = lambda e: f"{e.get('eval/success', 0):.1%} ± {e.get('eval/success_se', 0):.1%}"
    after, t = s.get("eval_after_rl", {}), s.get("time_s", {})
    lines = [f"eval success (greedy, {after.get('eval/episodes', 0):.0f} held-out tasks): {pm(after)} after RL"
             + (f", {pm(s['eval_before_rl'])} before" if "eval_before_rl" in s else ""),
             f"RL steps        {s.get('rl_steps', 0)}, train success first {s.get('train_success_first', 0):.0%}, "
             f"last {s.get('train_success_last', 0):.0%}"]
    for f in headlines() if headline is None else headline:
        if f.den and s.get(f.den_key):
            lines.append(f"{f.name:<16}{s[f.key]:.0%} of {s[f.den_key]:.0f} {f.den_name}")
        elif not f.den and s.get(f.key):
            lines.append(f"{f.name:<16}{s[f.key]:.0f}")
    lines.append(f"wall time (s)   rollout {t.get('rollout', 0):.0f}, credit wait {t.get('credit_wait', 0):.0f}, "
                 f"update {t.get('update', 0):.0f} (judge {t.get('judge', 0):.0f}, verify {t.get('verify', 0):.0f} "
                 f"during rollouts); whole run {s.get('wall_s_this_run', 0):.0f}")
    return "\n".join(lines)


def _plot(trainer) -> str:
    from prover_jax.training.plot import plot_metrics
    from prover_jax.training.workdir import copy_file, is_local, read_lines
    dest = trainer.run.root / "progress.png"
    if is_local(dest):
        return plot_metrics(str(trainer.run.metrics_path), str(dest))
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "metrics.jsonl")
        with open(metrics, "w") as f:
            f.writelines(line + "\n" for line in read_lines(trainer.run.metrics_path))
        copy_file(plot_metrics(metrics, os.path.join(tmp, "progress.png")), dest)
    return str(dest)


def _totals(rows: list[dict], headline=None) -> dict:
    """The summary's totals over the training rows; a headline figure (`headline`: the method's
    `Needs.headline`; None: every registered method's whose metrics the rows have) as key = sum(num) /
    sum(den) and den_key = sum(den), or key = sum(num). rl_steps counts applied updates (a skipped,
    non-finite one is not a step); the spend (tokens, judge calls and $) is the last row's running
    total/* where rows have it, which keeps what steps dropped at a resume spent."""
    from prover_jax.credit.base import EXTRA_TOKENS, headlines
    from prover_jax.training.metrics import applied_steps, spent

    rows = [r for r in rows if "success_rate" in r]
    if not rows:
        return {}
    total = lambda k: float(sum(r.get(k, 0.0) for r in rows))
    out = {"rl_steps": applied_steps(rows)}
    for f in headlines() if headline is None else headline:
        if not any(f.num in r for r in rows):
            continue
        if f.den:
            den = total(f.den)
            out.update({f.key: total(f.num) / den if den else 0.0, f.den_key: den})
        else:
            out[f.key] = total(f.num)
    return {**out, "extra_token_frac": spent(rows, EXTRA_TOKENS) / max(spent(rows, "policy_tokens"), 1.0),
            "judge_calls": spent(rows, "judge/calls"), "judge_cost_usd": spent(rows, "judge/cost_usd"),
            "time_s": {k: total(f"time/{k}_s") for k in ("rollout", "credit_wait", "judge", "verify", "update")},
            "train_success_first": rows[0]["success_rate"], "train_success_last": rows[-1]["success_rate"]}
