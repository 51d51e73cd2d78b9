"""Batch fill (real tokens / batch positions) of one RL batch, one episode per row vs packed rows.

    python bench/packing_fill.py --config=configs/learn.py --workdir=W [--config.x=y ...]

W holds a policy to play (e.g. a copy of an SFT start: its checkpoints/ and tokenizer/). One batch of
the config's rollouts is played; its episode lengths are then laid out as the trainer would:
unpacked (rows padded to train.length_multiple, row count to train.micro_batch_size) and packed
(`first_fit` into rows of rollout.max_target_length tokens) at micro-batch sizes 1, 4, 8 and the
config's. Prints one JSON line.
"""

from __future__ import annotations

import json

from absl import app, flags
from ml_collections import config_flags

from prover_jax.training.batch import first_fit, padded_length

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Training config file.")
flags.DEFINE_string("workdir", None, "Folder with the policy to play.")


def fill(lengths: list[int], rows: int, length: int, micro_batch_size: int) -> float:
    return sum(lengths) / (-(-rows // micro_batch_size) * micro_batch_size * length)


def main(argv):
    del argv
    from prover_jax.training.trainer import Trainer
    c = FLAGS.config
    t = Trainer(c, FLAGS.workdir)
    try:
        trajs = t._collect()[0].played
    finally:
        t.close()
    lengths = [len(x.tokens) for x in trajs]
    L = padded_length(max(lengths), c.train.length_multiple, c.rollout.max_target_length)
    cap = c.rollout.max_target_length
    rows = len(first_fit(lengths, cap))
    out = {"episodes": len(lengths), "tokens": sum(lengths), "longest": max(lengths), "unpacked_length": L,
           "unpacked_fill": fill(lengths, len(lengths), L, c.train.micro_batch_size),
           "packed_row_tokens": cap, "packed_rows": rows,
           **{f"packed_fill_mb{mb}": fill(lengths, rows, cap, mb)
              for mb in sorted({1, 4, 8, c.train.micro_batch_size})}}
    print(json.dumps(out))


if __name__ == "__main__":
    flags.mark_flags_as_required(["config", "workdir"])
    app.run(main)
