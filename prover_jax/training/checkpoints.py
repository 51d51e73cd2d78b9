"""The trainer's checkpoints: orbax, asynchronous, multi-process, and safe against a corrupt latest.

    ckpts = Checkpoints(root / "checkpoints", keep=2)
    ckpts.save(step, state, meta)          # returns once the arrays are copied off the devices; the
                                           # files are written in the background
    state, meta, step = ckpts.restore(abstract_state, on_corrupt="error")   # or None: no checkpoint
    ckpts.close()                          # waits for the last save

Every process writes its own shards of the global arrays and orbax commits one metadata file, so a
checkpoint is complete only once all of them finished (incomplete ones are never listed). A
checkpoint that is listed but cannot be read (truncated or overwritten files) raises
`CorruptCheckpointError` naming the step and the path; with on_corrupt="previous" the run warns and
resumes from the newest readable one instead. All processes agree on which step they restored.
"""

from __future__ import annotations

import jax
import orbax.checkpoint as ocp
from absl import logging
from etils import epath

from prover_jax.distributed import allgather_json, barrier

ON_CORRUPT = ("error", "previous")


class CorruptCheckpointError(RuntimeError):
    pass


class Checkpoints:
    def __init__(self, directory: epath.Path, keep: int):
        self.directory = directory
        self.manager = ocp.CheckpointManager(
            directory, options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                                            enable_async_checkpointing=True))

    def save(self, step: int, state, meta: dict) -> None:
        """Starts an async save of `state` (any earlier save is finished first)."""
        self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                        meta=ocp.args.JsonSave(meta)), force=True)

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def restore(self, abstract_state, on_corrupt: str = "error"):
        """(state, meta, step) of the newest readable checkpoint, or None when there is none."""
        if on_corrupt not in ON_CORRUPT:
            raise ValueError(f"train.on_corrupt_checkpoint must be one of {ON_CORRUPT}, got {on_corrupt!r}")
        steps = sorted(self.manager.all_steps(), reverse=True)
        for n, step in enumerate(steps):
            error = None
            try:
                out = self.manager.restore(step, args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore()))
                jax.block_until_ready(out.state)
            except Exception as e:  # noqa: BLE001 - any unreadable file: report it by step and path
                error = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            errors = [x for x in allgather_json(error) if x]
            if not errors:
                return out.state, out.meta, step
            where = self.directory / str(step)
            older = steps[n + 1] if n + 1 < len(steps) else None
            if on_corrupt == "error":
                hint = (f"; re-run with --config.train.on_corrupt_checkpoint=previous to resume from step "
                        f"{older}" if older is not None else "; no older checkpoint is left: remove it to "
                        "start afresh")
                raise CorruptCheckpointError(f"checkpoint of step {step} at {where} cannot be read "
                                             f"({errors[0]}){hint}") from None
            logging.warning("checkpoint of step %d at %s cannot be read (%s); kept as %s.corrupt, resuming "
                            "from %s", step, where, errors[0], where.name,
                            f"step {older}" if older is not None else "scratch")
            self._set_aside(step)
        return None

    def _set_aside(self, step: int) -> None:
        """Renames an unreadable step folder to STEP.corrupt (kept for inspection, never listed)."""
        if jax.process_index() == 0:
            src = self.directory / str(step)
            dest = self.directory / f"{step}.corrupt"
            if dest.exists():
                dest.rmtree()
            src.rename(dest)
        barrier(f"checkpoint-set-aside-{step}")
        self.manager.reload()

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()
