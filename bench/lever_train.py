"""prover-train with one diagnostic lever of the learning study that the library has no switch for.

    python bench/lever_train.py LEVER --config=configs/learn.py --workdir=W [prover-train flags]

LEVER:
  positive_only   GRPO's negative token advantages set to 0 (only successes are reinforced)
  freeze_embed    the token embedding (tied: also the output head) gets no update in RL
                  (sets --config.optim.name=adamw_frozen_embed)
  two_attention   model size `demo` with a second full-attention layer (sets --config.model.size=demo3)

bench/LEARNING.md has what each did. These are probes of a hypothesis, not training options.
"""

from __future__ import annotations

import dataclasses
import sys

LEVERS = ("positive_only", "freeze_embed", "two_attention")


def positive_only() -> list[str]:
    import numpy as np

    from prover_jax.credit.grpo import GRPO

    assign = GRPO.assign

    def clipped(self, groups):
        out = assign(self, groups)
        out.advantages = [[np.maximum(a, np.float32(0)) for a in g] for g in out.advantages]
        return out

    GRPO.assign = clipped
    return []


def freeze_embed() -> list[str]:
    """Zero the embedding's gradient before adamw (its moments stay 0) and its update after (adamw's
    decoupled weight decay would still move it): the optimizer state keeps its structure (an SFT
    checkpoint restores)."""
    import jax
    import jax.numpy as jnp
    import optax

    from prover_jax.training import optim

    adamw = optim.OPTIMIZERS.get("adamw")

    def frozen(lr, cfg):
        inner = adamw(lr, cfg)

        def frozen_zero(tree):
            return jax.tree_util.tree_map_with_path(
                lambda path, g: jnp.zeros_like(g) if "embed_tokens" in jax.tree_util.keystr(path) else g, tree)

        def update(grads, state, params=None):
            updates, state = inner.update(frozen_zero(grads), state, params)
            return frozen_zero(updates), state

        return optax.GradientTransformation(inner.init, update)

    optim.OPTIMIZERS.add("adamw_frozen_embed", frozen)
    return ["--config.optim.name=adamw_frozen_embed"]


def two_attention() -> list[str]:
    from prover_jax.models.qwen3_5 import config as qc

    qc.CONFIGS["demo3"] = dataclasses.replace(qc.CONFIGS["demo"], num_hidden_layers=3,
                                              layer_types=(qc.LINEAR, qc.FULL, qc.FULL))
    return ["--config.model.size=demo3"]


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in LEVERS:
        sys.exit(f"usage: python bench/lever_train.py {{{'|'.join(LEVERS)}}} --config=... --workdir=...")
    flags = globals()[sys.argv.pop(1)]()
    from prover_jax.training.cli import run

    run(sys.argv + flags)


if __name__ == "__main__":
    main()
