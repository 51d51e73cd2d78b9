"""The rows of a prompt dataset, and its train / held-out split.

    rows, split = load(path, split="train", eval_split="test", eval_path="", eval_fraction=0.1,
                       prompt_field="question", answer_field="answer")

`path` is a JSONL file (one object per line) or a JSON file holding a list; a folder written by
`datasets`' `save_to_disk` (a DatasetDict: `split` and `eval_split` name its splits; a single Dataset:
as a file); or any other `datasets.load_dataset` name (its `split` and `eval_split`). The held-out rows:
`eval_split` when the dataset has that split, else `eval_path` (a file or folder as `path`), else the
`eval_fraction` of the distinct prompts whose SHA-256 comes first. A training row whose prompt text is
also held out is dropped from training (with a warning), so the two splits never share a prompt.
Each row is a dict with at least `prompt_field` (a non-empty string) and `answer_field`.
"""

from __future__ import annotations

import hashlib
import math
import os
import warnings

from prover_jax.envs.splits import EVAL_FRACTION, IndexSplit, digest
from prover_jax.envs.text import json_records


class DataError(ValueError):
    """A prompt dataset is missing or malformed (the message names the path, row and field)."""


def _file_rows(path: str) -> list[dict]:
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read the prompt file ({e})") from None
    return [record for _, record in json_records(text, path, DataError)]


def _datasets(path: str, split: str | None) -> dict[str, list[dict]] | list[dict]:
    """{split name: rows} of a datasets folder or name (only `split` when a name is loaded), or the rows
    of a single saved Dataset."""
    try:
        import datasets
    except ImportError:
        raise DataError(f"{path}: reading a Hugging Face dataset needs the `datasets` package "
                        "(pip install 'prover_jax[data]')") from None
    if os.path.isdir(path) and os.path.exists(os.path.join(path, "dataset_dict.json")):
        d = datasets.load_from_disk(path)
        return {name: [dict(r) for r in d[name]] for name in d}
    if os.path.isdir(path) and os.path.exists(os.path.join(path, "dataset_info.json")):
        return [dict(r) for r in datasets.load_from_disk(path)]
    try:
        return {split: [dict(r) for r in datasets.load_dataset(path, split=split)]}
    except Exception as e:  # noqa: BLE001 - datasets raises many kinds; the message names the path
        raise DataError(f"{path}: cannot load split {split!r} with datasets.load_dataset ({type(e).__name__}: "
                        f"{e})") from None


def _read(path: str, split: str) -> tuple[list[dict], dict[str, list[dict]]]:
    """(the rows of `split`, every split the source holds)."""
    if os.path.isfile(path) or path.endswith((".jsonl", ".json")):
        return _file_rows(path), {}
    got = _datasets(path, split)
    if isinstance(got, list):
        return got, {}
    if split not in got:
        raise DataError(f"{path}: no split {split!r} (env.kwargs.split); it has {', '.join(got)}")
    return got[split], got


def _check(rows: list[dict], where: str, prompt_field: str, answer_field: str) -> list[dict]:
    if not rows:
        raise DataError(f"{where}: holds no rows")
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise DataError(f"{where}: row {i} is not an object")
        if not isinstance(r.get(prompt_field), str) or not r[prompt_field].strip():
            raise DataError(f"{where}: row {i} has no non-empty string {prompt_field!r} (env.kwargs.prompt_field)")
        if answer_field not in r:
            raise DataError(f"{where}: row {i} has no {answer_field!r} (env.kwargs.answer_field)")
    return rows


def load(path: str, split: str = "train", eval_split: str = "test", eval_path: str = "",
         eval_fraction: float = EVAL_FRACTION, prompt_field: str = "question",
         answer_field: str = "answer") -> tuple[list[dict], IndexSplit]:
    """(rows, split over them): train rows first, then held-out ones (module docstring)."""
    if not path:
        raise DataError("env.kwargs.path is empty: give a JSONL file or a Hugging Face dataset")
    train, every = _read(path, split)
    train = _check(train, f"{path} [{split}]", prompt_field, answer_field)
    if eval_split in every:
        held, held_from = every[eval_split], f"split {eval_split!r} of {path} (env.kwargs.eval_split)"
    elif eval_path:
        held, held_from = _read(eval_path, eval_split)[0], f"eval_path={eval_path}"
    else:
        held, held_from = None, ""
    if held is not None:
        held = _check(held, held_from, prompt_field, answer_field)
        held_keys = {r[prompt_field].strip() for r in held}
        kept = [r for r in train if r[prompt_field].strip() not in held_keys]
        if len(kept) < len(train):
            warnings.warn(f"prompts: {len(train) - len(kept)} training rows of {path} ask a held-out prompt "
                          f"({held_from}); they are left out of training")
        rows = kept + held
        train_pos, eval_pos = range(len(kept)), range(len(kept), len(rows))
        settings = {"train": f"the rows of {path} [{split}] not held out", "eval": held_from}
    else:
        if not 0.0 <= float(eval_fraction) < 1.0:
            raise DataError(f"env.kwargs.eval_fraction must be in [0, 1), got {eval_fraction}")
        keys = sorted({r[prompt_field].strip() for r in train}, key=lambda k: hashlib.sha256(k.encode()).digest())
        held_keys = set(keys[:math.ceil(float(eval_fraction) * len(keys))])
        rows = train
        train_pos = [i for i, r in enumerate(rows) if r[prompt_field].strip() not in held_keys]
        seen, eval_pos = set(), []
        for i, r in enumerate(rows):
            k = r[prompt_field].strip()
            if k in held_keys and k not in seen:
                seen.add(k)
                eval_pos.append(i)
        settings = {"train": f"{path} less eval_fraction={eval_fraction} of its prompts",
                    "eval": f"eval_fraction={eval_fraction} of the prompts of {path} (no eval split or eval_path)"}
    ids = [f"prompts:{digest(r[prompt_field].strip())}" for r in rows]
    return rows, IndexSplit("prompts", ids, train_pos, eval_pos, settings)
