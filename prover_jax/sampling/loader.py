"""Loading a policy: the model of an HF folder or a prover (orbax) checkpoint folder, by the family its
config.json names, with its tokenizer and its EOS ids (`models.hf_folder.eos_ids`, the one rule).

    model, tokenizer, eos = load_policy(path, jnp.bfloat16, mesh=None)     # tokenizer None without files
    folder = PolicyFolder.open(path)          # config, tokenizer, no weights read yet
    model = folder.load_model(jnp.float32)    # ... then the weights
    eos = folder.eos_ids()

Used by prover-generate (sampling.cli: the folder first, to check its flags, then the weights) and
prover-serve (serving.service); the trainer's build (model.init hf | checkpoint) calls `load_model`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from prover_jax.convert.orbax_io import is_prover_checkpoint, load_checkpoint
from prover_jax.models import Family, load_hf, read_config
from prover_jax.models.hf_folder import eos_ids, load_tokenizer


class CliError(Exception):
    """A problem the command-line programs report as one line on stderr; `code` is the exit status."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


def load_model(path: str, dtype, mesh=None, compute_dtype=None, runtime=None):
    """The model of a prover checkpoint or an HF folder at `path`, params in `dtype`, computing in
    `compute_dtype` (None: dtype), placed on `mesh` (None: one device), running per `runtime` (a runtime
    of the folder's family; None: its default)."""
    if is_prover_checkpoint(path):
        return load_checkpoint(path, dtype=dtype, mesh=mesh, compute_dtype=compute_dtype, runtime=runtime)
    return load_hf(path, dtype=dtype, mesh=mesh, compute_dtype=compute_dtype, runtime=runtime)


@dataclasses.dataclass(frozen=True)
class PolicyFolder:
    """A policy folder before its weights are read: family, architecture and tokenizer (None, with
    `tokenizer_problem` saying why, when the folder has no loadable tokenizer files)."""

    path: str
    family: Family
    config: Any
    tokenizer: Any
    tokenizer_problem: str = ""

    @classmethod
    def open(cls, path: str) -> "PolicyFolder":
        """FileNotFoundError without config.json; ValueError for one no family reads."""
        fam, cfg = read_config(path)
        tokenizer, why_not = load_tokenizer(path)
        return cls(path, fam, cfg, tokenizer, why_not)

    def eos_ids(self) -> tuple[int, ...]:
        """models.hf_folder.eos_ids of the config, the tokenizer and generation_config.json."""
        return eos_ids(self.config, self.tokenizer, self.path)

    def load_model(self, dtype, mesh=None, compute_dtype=None):
        """`load_model` of the folder; FileNotFoundError / OSError / ValueError saying "cannot load model
        PATH: why"."""
        try:
            return load_model(self.path, dtype, mesh=mesh, compute_dtype=compute_dtype)
        except (OSError, ValueError) as e:
            kind = next(k for k in (FileNotFoundError, OSError, ValueError) if isinstance(e, k))
            raise kind(f"cannot load model {self.path}: {e}") from None


def load_policy(path: str, dtype, mesh=None, compute_dtype=None) -> tuple[Any, Any, tuple[int, ...]]:
    """(model, tokenizer or None, EOS ids) of the policy folder `path` (HF or prover checkpoint)."""
    folder = PolicyFolder.open(path)
    return folder.load_model(dtype, mesh=mesh, compute_dtype=compute_dtype), folder.tokenizer, folder.eos_ids()
