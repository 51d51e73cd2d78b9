"""The reward of bench/grpo_peers.py, in the signature each framework calls it with, and the drivers'
command line (`driver_args`: --spec, the work's JSON, and --workdir).

The share of digit characters in a completion (0 for an empty one): a random policy's completions get
different values, so every group has non-zero advantages and every framework does a full update.
Standard library only: it is imported in three virtual environments.

    digit_share(completion, row)                 prover_jax's prompts env (env.kwargs.reward_fn)
    trl_digit_share(completions, **kwargs)       TRL's GRPOTrainer (reward_funcs=[...])
    tunix_digit_share(prompts, completions, **kwargs)   Tunix's GRPOLearner (reward_fns=[...])
"""

from __future__ import annotations

import argparse
import json


def share(text: str) -> float:
    return sum(ch.isdigit() for ch in text) / len(text) if text else 0.0


def _text(completion) -> str:
    """A completion as text: TRL passes conversational completions as [{"role": "assistant", "content": ...}]."""
    if isinstance(completion, str):
        return completion
    return "".join(m.get("content", "") for m in completion if isinstance(m, dict))


def digit_share(completion: str, row: dict | None = None) -> float:
    return share(completion)


def trl_digit_share(completions, **kwargs) -> list[float]:
    return [share(_text(c)) for c in completions]


def tunix_digit_share(prompts, completions, **kwargs) -> list[float]:
    return [share(_text(c)) for c in completions]


def driver_args(description: str) -> tuple[dict, str]:
    """A peer driver's (spec, workdir) from its command line: --spec=JSON file, --workdir=folder."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--spec", required=True)
    p.add_argument("--workdir", required=True)
    args = p.parse_args()
    with open(args.spec) as f:
        return json.load(f), args.workdir
