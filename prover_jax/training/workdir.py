"""The run folder, local or remote: every path the trainer reads or writes goes through
`etils.epath` (what orbax uses), so `--workdir=gs://bucket/run` works like a local folder.

    root = workdir_path("gs://bucket/run")      # epath.Path; "file:///x" -> /x; local -> absolute
    append_line(root / "metrics.jsonl", json.dumps(row))
    rows = read_rows(root / "metrics.jsonl")    # a torn last line (a kill mid-append) left out, warned of
    write_atomic(root / "summary.json", text)   # readers see the old file or the new one, never half
    save_folder(tokenizer.save_pretrained, root / "tokenizer")   # writers that need a local folder
    local = local_copy(root / "tokenizer")                          # readers that need one

`gs://` needs `gcsfs` (the `gcs` extra); `STORAGE_EMULATOR_HOST` points it at a local emulator.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Callable

from absl import logging
from etils import epath


def workdir_path(path: str | os.PathLike) -> epath.Path:
    s = os.fspath(path)
    if s.startswith("file://"):
        s = s[len("file://"):]
    if "://" not in s:
        s = os.path.abspath(s)
    return epath.Path(s)


def is_local(path: epath.Path) -> bool:
    return "://" not in os.fspath(path)


def read_lines(path: epath.Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def read_rows(path: epath.Path) -> list[dict]:
    """The JSON objects of a JSON-lines file ([] when absent). A torn last line (a kill or a full disk
    mid-append) is left out with a warning naming the file; an unreadable line before it raises
    ValueError naming the file and the line."""
    lines = read_lines(path)
    rows = []
    for n, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except ValueError as e:
            if n + 1 < len(lines):
                raise ValueError(f"{path}, line {n + 1}: not a JSON object ({e}): {line[:100]!r}") from None
            logging.warning("%s: its last line is torn (a run stopped while writing it); left out: %r",
                            path, line[:100])
    return rows


def write_atomic(path: epath.Path, text: str) -> None:
    """Replaces the file at once (local: a temporary file beside it, renamed; object stores write whole
    objects), so a kill or a full disk leaves the old file or the new one, never part of one."""
    if not is_local(path):
        path.write_text(text)
        return
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.fspath(path)), prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.fspath(path))
    except BaseException:
        os.unlink(tmp)
        raise


def append_line(path: epath.Path, line: str) -> None:
    """Appends one line (object stores have no append: rewrites the object there)."""
    if is_local(path):
        with open(os.fspath(path), "a") as f:
            f.write(line.rstrip("\n") + "\n")
        return
    old = path.read_text() if path.exists() else ""
    path.write_text(old + line.rstrip("\n") + "\n")


def save_folder(write: Callable[[str], object], dest: epath.Path) -> None:
    """`write(local_dir)` into `dest` (directly when local, else through a temporary folder)."""
    if is_local(dest):
        write(os.fspath(dest))
        return
    with tempfile.TemporaryDirectory() as tmp:
        write(tmp)
        dest.mkdir(parents=True, exist_ok=True)
        for name in sorted(os.listdir(tmp)):
            if os.path.isfile(os.path.join(tmp, name)):
                copy_file(os.path.join(tmp, name), dest / name)


def local_copy(src: epath.Path) -> str:
    """A local folder with `src`'s files (`src` itself when local; a cached copy otherwise)."""
    if is_local(src):
        return os.fspath(src)
    tmp = tempfile.mkdtemp(prefix="prover-")
    for p in src.iterdir():
        if p.is_file():
            with open(os.path.join(tmp, p.name), "wb") as f:
                f.write(p.read_bytes())
    return tmp


def copy_file(src: str, dest: epath.Path) -> None:
    if is_local(dest):
        shutil.copyfile(src, os.fspath(dest))
    else:
        with open(src, "rb") as f:
            dest.write_bytes(f.read())
