"""The run folder, local or remote: every path the trainer reads or writes goes through
`etils.epath` (what orbax uses), so `--workdir=gs://bucket/run` works like a local folder.

    root = workdir_path("gs://bucket/run")      # epath.Path; "file:///x" -> /x; local -> absolute
    append_line(root / "metrics.jsonl", json.dumps(row))
    save_folder(tokenizer.save_pretrained, root / "tokenizer")   # writers that need a local folder
    local = local_copy(root / "tokenizer")                          # readers that need one

`gs://` needs `gcsfs` (the `gcs` extra); `STORAGE_EMULATOR_HOST` points it at a local emulator.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Callable

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
