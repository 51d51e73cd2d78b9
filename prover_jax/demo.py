"""`make demo`: the main job on its built-in default (configs/learn.py).

A ~0.56M-parameter Qwen3.5-architecture policy with its own tokenizer learns the built-in `household`
environment: SFT warm start on the demonstrations of an imperfect demonstrator (it commits the task
object's lookalike in 75% of its tasks), then 20 GRPO steps with the binary outcome reward. Prints
held-out greedy success before and after RL with its standard error, and writes WORKDIR/progress.png.

    python -m prover_jax.demo --workdir=runs/demo [--config.seed=1] [--config.credit.method=prover]
                              [--config=configs/demo.py] [--third_party_logs]

Third-party INFO logging (orbax's checkpoint chatter, jax, absl, ...) is off; --third_party_logs
brings it back (prover_jax/training/logs.py).
"""

from __future__ import annotations

import os

from absl import app, flags
from ml_collections import config_flags

from prover_jax.training.logs import quiet_third_party

_HERE = os.path.dirname(os.path.abspath(__file__))
FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", os.path.join(_HERE, "..", "configs", "learn.py"),
                                "Demo config file.", lock_config=True)
flags.DEFINE_string("workdir", "runs/demo", "Run folder.")


def summary_text(s: dict, method: str = "grpo") -> str:
    t = s.get("time_s", {})
    lines = [
        f"prover_jax demo: household, SFT warm start + RL (credit: {method})",
        f"  demonstrations       {s['sft']['demos']} episodes, SFT loss "
        f"{s['sft']['loss_first']:.3f} -> {s['sft']['loss_last']:.3f} ({s['sft']['seconds']:.0f} s)"
        if "sft" in s else "  (SFT done in an earlier run)",
        f"  success (greedy, {_n(s)} held-out tasks): after SFT {_pm(s, 'eval_before_rl')} -> after RL "
        f"{_pm(s, 'eval_after_rl')}, gain {_gain(s)}",
        f"  train success rate   first step {s.get('train_success_first', 0):.0%}, last step "
        f"{s.get('train_success_last', 0):.0%} over {s.get('rl_steps', 0)} steps",
        *([f"  ProVer               {s.get('valid_proposals', 0):.0f} valid proposals, acceptance "
           f"{s.get('acceptance_rate', 0):.0%}, extra verification tokens {s.get('extra_token_frac', 0):.0%}"]
          if method == "prover" else []),
        f"  wall time (s)        rollout {t.get('rollout', 0):.0f}, judge {t.get('judge', 0):.1f}, "
        f"verify {t.get('verify', 0):.0f}, update {t.get('update', 0):.0f}; whole run "
        f"{s.get('wall_s_this_run', 0):.0f}",
        f"  plot                 {s.get('plot')}",
    ]
    return "\n".join(lines)


def _n(s: dict) -> int:
    return int(s.get("eval_after_rl", {}).get("eval/episodes", 0))


def _gain(s: dict) -> str:
    """after - before in points, +- the standard error of the difference as if the two evaluations were
    independent (the same held-out tasks are evaluated both times: positively correlated outcomes make
    it an overestimate, negatively correlated ones an underestimate)."""
    a, b = s.get("eval_after_rl", {}), s.get("eval_before_rl", {})
    d = a.get("eval/success", 0) - b.get("eval/success", 0)
    se = (a.get("eval/success_se", 0) ** 2 + b.get("eval/success_se", 0) ** 2) ** 0.5
    return f"{100 * d:+.1f} +- {100 * se:.1f} points"


def _pm(s: dict, key: str) -> str:
    """mean +- standard error of an evaluation, in percent."""
    e = s.get(key, {})
    return f"{e.get('eval/success', 0):.0%} +- {e.get('eval/success_se', 0):.0%}"


def main(argv):
    del argv
    quiet_third_party(FLAGS.third_party_logs)
    from prover_jax.training.run import train

    summary = train(FLAGS.config, FLAGS.workdir)
    print(summary_text(summary, FLAGS.config.credit.method))


if __name__ == "__main__":
    app.run(main)
