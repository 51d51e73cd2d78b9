"""What made a run: its resolved configuration and its provenance, in the run folder.

    record(root, config, mesh, resumed)        # W/config.json (first start), W/provenance.json (every start)
    c = config_from_json("W/config.json")      # the same ConfigDict again: prover-train --config=W/config.json

W/config.json: the resolved configuration of the run's first start (every field, JSON). It is never rewritten,
so `prover-train --config=W/config.json --workdir=W2` starts the same run. A start that resumes with other
values logs one line per changed field ("config.optim.learning_rate: the run started with 0.0003; this
start has 0.0001") and lists them in provenance.json.

W/provenance.json: {"starts": [...]}, one entry per start of the run: time, command line, git revision of
the source tree (and whether it had uncommitted changes), Python and package versions, the devices
(platform, kind, count, processes) and the mesh; a resume's entry also has "changed": {field: [then, now]}.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from typing import Any

import ml_collections
from absl import logging

from prover_jax.training.workdir import write_atomic

CONFIG_FILE, PROVENANCE_FILE = "config.json", "provenance.json"
PACKAGES = ("prover_jax", "jax", "jaxlib", "libtpu", "flax", "optax", "orbax-checkpoint", "grain", "transformers",
            "tokenizers", "safetensors", "numpy", "qwix", "openai", "ml-collections")
FREE_FORM = ("env.kwargs",)  # sections whose keys are the user's (an env family's keyword arguments)


def _plain(x: Any) -> Any:
    if isinstance(x, (ml_collections.ConfigDict, dict)):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return [_plain(v) for v in x]
    return x


def config_dict(config) -> dict:
    """The config as plain JSON values (tuples as lists)."""
    return _plain(config)


def _flat(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v and key not in FREE_FORM:
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def _overlay(target: ml_collections.ConfigDict, values: dict, prefix: str, path: str) -> None:
    for k, v in values.items():
        field = f"{prefix}{k}"
        if field in FREE_FORM:
            target[k] = ml_collections.ConfigDict(v)
            continue
        if k not in target:
            raise ValueError(f"{path}: config.{field} is not a field of this version's config "
                             "(prover_jax.training.config.default_config)")
        have = target[k]
        if isinstance(have, ml_collections.ConfigDict):
            if not isinstance(v, dict):
                raise ValueError(f"{path}: config.{field} is a section, the file gives {v!r}")
            _overlay(have, v, field + ".", path)
        elif isinstance(have, tuple) and isinstance(v, list):
            target[k] = tuple(v)
        else:
            target[k] = v


def config_from_json(path: str) -> ml_collections.ConfigDict:
    """The configuration saved in `path` (a W/config.json) on today's defaults: every field it holds set,
    tuples kept tuples; ValueError naming a field this version does not have."""
    from prover_jax.training.config import default_config
    from prover_jax.training.workdir import workdir_path

    try:
        values = json.loads(workdir_path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a readable config.json ({e})") from None
    c = default_config()
    _overlay(c, values, "", path)
    return c


def _git(*args: str) -> str | None:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", here, *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def start_entry(mesh) -> dict:
    """This start's provenance (module docstring)."""
    import jax

    devices = jax.devices()
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": list(sys.argv), "git_revision": _git("rev-parse", "HEAD"),
            "git_dirty": None if status is None else bool(status), "python": platform.python_version(),
            "packages": _versions(),
            "devices": {"platform": devices[0].platform, "kind": devices[0].device_kind, "count": len(devices),
                        "processes": jax.process_count()},
            "mesh": {name: int(size) for name, size in mesh.shape.items()}}


def changed_fields(then: dict, now: dict) -> dict[str, list]:
    """{field: [then, now]} of the fields whose values differ (a field only one side has included)."""
    a, b = _flat(then), _flat(now)
    return {k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def record(root, config, mesh, primary: bool) -> dict[str, list]:
    """Writes W/config.json at the run's first start and adds this start to W/provenance.json (process 0);
    returns the fields changed since the first start (logged one line each)."""
    now = config_dict(config)
    path = root / CONFIG_FILE
    changed: dict[str, list] = {}
    if path.exists():
        changed = changed_fields(json.loads(path.read_text()), now)
        for field, (a, b) in changed.items():
            logging.warning("config.%s: the run started with %r; this start has %r", field, a, b)
    if not primary:
        return changed
    if not path.exists():
        write_atomic(path, json.dumps(now, indent=1) + "\n")
    prov = root / PROVENANCE_FILE
    starts = json.loads(prov.read_text()).get("starts", []) if prov.exists() else []
    entry = start_entry(mesh)
    if starts:
        entry["changed"] = changed
    write_atomic(prov, json.dumps({"starts": starts + [entry]}, indent=1) + "\n")
    return changed
