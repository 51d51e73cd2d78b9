"""One place builds the device programs: prover-aot's train step for a config lowers to the same program
as the one the trainer runs for that config (CPU, the trainer tests' tiny config)."""

import re

from prover_jax.aot import programs as aot_programs
from prover_jax.training import trainer as trainer_lib

from helpers.demo_config import trainer_config


def _program_text(lowered) -> str:
    """StableHLO without source locations (they name the calling file and line)."""
    text = lowered.as_text()
    text = re.sub(r"\s*loc\(#loc\d*\)", "", text)
    return "\n".join(line for line in text.splitlines() if not line.startswith("#loc"))


def test_aot_train_step_is_the_trainers(tmp_path):
    c = trainer_config()
    c.loss.kl_coef = 0.05  # the batch carries the reference log-probs too
    trainer = trainer_lib.Trainer(c, str(tmp_path / "w"))
    try:
        prog = aot_programs.train_program(c, trainer.run.mesh)
        state, batch = prog.args[0], prog.args[1]
        assert {"tokens", "advantages", "old_logprobs", "ref_logprobs"} <= set(batch)
        ours = trainer.run.train_step.jitted(trainer.state, batch)
        assert _program_text(prog.jitted.lower(*prog.args)) == _program_text(ours.lower(trainer.state, batch))
        # the abstract state prover-aot compiles for is the trainer's: shapes, dtypes and shardings
        import jax
        got = jax.tree.map(lambda a: (a.shape, str(a.dtype), a.sharding.spec), state)
        want = jax.tree.map(lambda a: (a.shape, str(a.dtype), a.sharding.spec), trainer.state)
        assert jax.tree.leaves(got) == jax.tree.leaves(want)
    finally:
        trainer.close()
