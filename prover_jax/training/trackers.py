"""Where a run's metrics rows go besides W/metrics.jsonl (the source of truth): train.loggers.

    sinks = open_sinks(config, root, kept_rows)   # process 0 only; [] when train.loggers is empty
    for s in sinks: s.write(row)                   # every row metrics.jsonl gets, as it gets it
    for s in sinks: s.close()

    tensorboard  event files in W/tensorboard/ (training.metrics.TensorBoardLog; tensorboardX, a core dependency)
    wandb        Weights & Biases (`pip install 'prover_jax[trackers]'`); WANDB_MODE=offline works with no network
    trackio      Hugging Face's local-first tracker, wandb's API (same extra)

The numeric scalars of each row are logged at the row's step. A tracker's run id is kept in W/trackers.json,
so a resumed run continues the same tracker run; its name is the run folder's name, its project
train.tracker_project, its config the resolved config. Imports are lazy: a tracker that is not installed is
an error naming the extra.
"""

from __future__ import annotations

import json
import os
import secrets
from typing import Any

from prover_jax.training.workdir import write_atomic

LOGGERS = ("tensorboard", "wandb", "trackio")
IDS_FILE = "trackers.json"


def check(loggers) -> None:
    unknown = [x for x in loggers if x not in LOGGERS]
    if unknown:
        raise ValueError(f"train.loggers: unknown {unknown}; expected some of {', '.join(LOGGERS)}")


def scalars(row: dict) -> dict[str, float]:
    """The numeric scalars of a row (booleans and the step excluded)."""
    return {k: float(v) for k, v in row.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}


def _run_id(root, name: str) -> str:
    """The tracker run id kept in W/trackers.json (made and saved on the run's first start)."""
    path = root / IDS_FILE
    ids = json.loads(path.read_text()) if path.exists() else {}
    if name not in ids:
        ids[name] = secrets.token_hex(8)
        write_atomic(path, json.dumps(ids, indent=1) + "\n")
    return ids[name]


def _import(module: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ValueError(f"train.loggers has {module!r}, which is not installed: pip install "
                         f"'prover_jax[trackers]'") from None


class _ApiSink:
    """A wandb-API tracker (wandb, trackio): init once (resuming the run id), log scalars at each row's step."""

    def __init__(self, module: str, root, config: dict, project: str):
        self.lib = _import(module)
        run_id, name = _run_id(root, module), os.path.basename(os.fspath(root).rstrip("/"))
        kwargs: dict[str, Any] = dict(project=project, name=name, config=config, resume="allow")
        if module == "wandb":
            kwargs.update(id=run_id, dir=os.fspath(root))
        self.run = self.lib.init(**kwargs)
        self.last = -1

    def write(self, row: dict) -> None:
        values, step = scalars(row), int(row.get("step", 0))
        if values and step >= self.last:  # trackers keep steps increasing; a resumed run's earlier rows are there
            self.lib.log(values, step=step)
            self.last = step

    def close(self) -> None:
        self.lib.finish()


def open_sinks(config, root, rows=()) -> list:
    """The sinks train.loggers names (process 0 calls this); `rows`: metrics.jsonl's kept rows (TensorBoard
    rewrites them; a tracker resuming its run has them already and gets only new ones)."""
    from prover_jax.training.metrics import TensorBoardLog
    from prover_jax.training.provenance import config_dict

    loggers = tuple(config.train.loggers)
    check(loggers)
    out = []
    for name in loggers:
        if name == "tensorboard":
            out.append(TensorBoardLog(root / "tensorboard", rows))
        else:
            out.append(_ApiSink(name, root, config_dict(config), config.train.tracker_project))
    return out
