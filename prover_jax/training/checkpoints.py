"""The trainer's checkpoints: orbax, asynchronous, multi-process, and safe against a corrupt latest.

    ckpts = Checkpoints(root / "checkpoints", keep=2)
    ckpts.save(step, state, meta)          # returns once the arrays are copied off the devices; the
                                           # files are written in the background
    state, meta, step = ckpts.restore(abstract_state, on_corrupt="error")   # or None: no checkpoint
    ckpts.close()                          # waits for the last save
    ref = restore_reference(ref_ckpts, abstract_params, step)   # the KL reference (W/reference)

Every process writes its own shards of the global arrays and orbax commits one metadata file, so a
checkpoint is complete only once all of them finished (incomplete ones are never listed). A
checkpoint that is listed but cannot be read (truncated or overwritten files) raises
`CorruptCheckpointError` naming the step and the path; with on_corrupt="previous" the run warns and
resumes from the newest readable one instead, the unreadable one set aside as STEP.corrupt (then
STEP.corrupt.1, ...: a set-aside never replaces an earlier one). A readable checkpoint whose arrays do
not match the state this config builds (other leaves or shapes: LoRA switched, another model) raises
`CheckpointMismatchError` naming the path and what differs, whatever on_corrupt says: it is valid, and
never set aside. All processes agree on which step they restored.
"""

from __future__ import annotations

import jax
import orbax.checkpoint as ocp
from absl import logging
from etils import epath

from prover_jax.distributed import allgather_json, barrier

ON_CORRUPT = ("error", "previous")
SHOWN = 4  # differing leaves named per kind in a CheckpointMismatchError


class CorruptCheckpointError(RuntimeError):
    pass


class CheckpointMismatchError(RuntimeError):
    """A readable checkpoint written by another config (other leaves or shapes)."""


class Checkpoints:
    def __init__(self, directory: epath.Path, keep: int):
        self.directory = directory
        self.manager = ocp.CheckpointManager(
            directory, options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                                            enable_async_checkpointing=True),
            item_handlers={"state": ocp.StandardCheckpointHandler(), "meta": ocp.JsonCheckpointHandler()})

    def save(self, step: int, state, meta: dict) -> None:
        """Starts an async save of `state` (any earlier save is finished first)."""
        self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                        meta=ocp.args.JsonSave(meta)), force=True)

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def restore(self, abstract_state, on_corrupt: str = "error", remedy: str | None = None):
        """(state, meta, step) of the newest readable checkpoint, or None when there is none. `remedy`:
        the advice of the error for an unreadable one (default: resume from an older one, or remove it
        to start afresh)."""
        if on_corrupt not in ON_CORRUPT:
            raise ValueError(f"train.on_corrupt_checkpoint must be one of {ON_CORRUPT}, got {on_corrupt!r}")
        steps = sorted(self.manager.all_steps(), reverse=True)
        for n, step in enumerate(steps):
            where = self.directory / str(step)
            differs = error = None
            try:
                differs = mismatch(self.manager.item_metadata(step)["state"], abstract_state)
                if differs is None:
                    out = self.manager.restore(step, args=ocp.args.Composite(
                        state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore()))
                    jax.block_until_ready(out.state)
            except Exception as e:  # noqa: BLE001 - any unreadable file: report it by step and path
                error = f"{type(e).__name__}: {brief(str(e))}"
            gathered = allgather_json([differs, error])
            differs = next((d for d, _ in gathered if d), None)
            if differs:
                raise CheckpointMismatchError(
                    f"the checkpoint of step {step} at {where} does not match this config ({differs}); it "
                    "is intact: resume with the config it was written with, or run this config in another "
                    "workdir") from None
            errors = [e for _, e in gathered if e]
            if not errors:
                return out.state, out.meta, step
            older = steps[n + 1] if n + 1 < len(steps) else None
            if on_corrupt == "error":
                hint = remedy or (f"re-run with --config.train.on_corrupt_checkpoint=previous to resume from "
                                  f"step {older}" if older is not None else "no older checkpoint is left: "
                                  "remove it to start afresh")
                raise CorruptCheckpointError(f"checkpoint of step {step} at {where} cannot be read "
                                             f"({errors[0]}); {hint}") from None
            dest = self._set_aside(step)
            logging.warning("checkpoint of step %d at %s cannot be read (%s); kept as %s, resuming from %s",
                            step, where, errors[0], dest, f"step {older}" if older is not None else "scratch")
        return None

    def _set_aside(self, step: int) -> str:
        """Renames an unreadable step folder to the first free STEP.corrupt[.N] (kept for inspection,
        never listed); returns that name."""
        names = [f"{step}.corrupt"] + [f"{step}.corrupt.{n}" for n in range(1, 1000)]
        dest = next(name for name in names if not (self.directory / name).exists())
        barrier(f"checkpoint-set-aside-{step}-look")  # every process saw the same free name
        if jax.process_index() == 0:
            (self.directory / str(step)).rename(self.directory / dest)
        barrier(f"checkpoint-set-aside-{step}")
        self.manager.reload()
        return dest

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()


def brief(message: str, limit: int = 400) -> str:
    """An error message on one line, cut to `limit` characters (orbax appends whole TensorStore specs)."""
    text = " ".join(message.split()).split(" [tensorstore_spec=")[0]
    return text if len(text) <= limit else text[:limit] + " ..."


def mismatch(stored, abstract_state) -> str | None:
    """What differs between a checkpoint's array metadata tree and the state to restore into: leaves
    missing on either side, shapes (first SHOWN of each kind, with counts); None when they match."""
    have = {"/".join(k): tuple(v.shape) for k, v in ocp.tree.to_flat_dict(stored).items()}
    want = {"/".join(k): tuple(v.shape) for k, v in ocp.tree.to_flat_dict(abstract_state).items()}
    order = lambda keys: sorted(keys, key=lambda k: (k.count("/"), k))  # params before optimizer moments
    shown = lambda keys: ", ".join(keys[:SHOWN]) + (f", ... ({len(keys)} in all)" if len(keys) > SHOWN else "")
    parts = []
    if missing := order(set(want) - set(have)):
        parts.append(f"this config has leaves the checkpoint lacks: {shown(missing)}")
    if extra := order(set(have) - set(want)):
        parts.append(f"the checkpoint has leaves this config lacks: {shown(extra)}")
    if shapes := [f"{k} {have[k]} stored, {want[k]} now" for k in order(set(have) & set(want))
                  if have[k] != want[k]]:
        parts.append(f"shapes differ: {shown(shapes)}")
    return "; ".join(parts) or None


def restore_reference(ckpts: Checkpoints, abstract_params, step: int):
    """The KL reference kept in `ckpts` (W/reference), or None when none was saved and the run is at
    step 0 (its first RL step takes it). Past step 0 a missing or unreadable one raises: the policy RL
    started from cannot be recovered, and the trained policy is no stand-in for it."""
    lost = (f"the run is at step {step}, so the policy RL started from cannot be recovered; resume with "
            "--config.loss.kl_coef=0, or start afresh in another workdir")
    if ckpts.manager.latest_step() is None:
        if step > 0:
            raise FileNotFoundError(f"no KL reference checkpoint in {ckpts.directory}: {lost}")
        return None
    remedy = (lost if step > 0 else f"the run is at step 0: remove {ckpts.directory} and its first RL step "
              "takes the reference again")
    return ckpts.restore(abstract_params, on_corrupt="error", remedy=remedy)[0]
