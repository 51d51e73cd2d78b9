"""Checkpoint conversion: HF folders <-> prover orbax checkpoints (`prover-convert`)."""

from prover_jax.convert.orbax_io import is_prover_checkpoint, load_checkpoint, save_checkpoint

__all__ = ["is_prover_checkpoint", "load_checkpoint", "save_checkpoint"]
