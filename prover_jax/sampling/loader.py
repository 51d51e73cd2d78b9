"""Loading a policy for sampling: a Qwen3.5 checkpoint (HF folder or prover orbax checkpoint), its
tokenizer and its EOS ids. Shared by prover-generate (sampling.cli) and prover-serve (serving.service).

    cfg = qwen3_5.Qwen3_5Config.from_pretrained(path)
    model = load_model(path, jnp.float32, mesh=None)   # CliError(code=1) when unreadable
    eos = eos_ids(path, cfg)                            # config.json + generation_config.json
    tokenizer, why_not = Tokenizer.load(path)           # (None, reason) without tokenizer files
"""

from __future__ import annotations

import json
import os

from prover_jax.convert.orbax_io import is_prover_checkpoint, load_checkpoint
from prover_jax.models import qwen3_5


class CliError(Exception):
    """A problem the command-line programs report as one line on stderr; `code` is the exit status."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


class Tokenizer:
    """encode / decode over the tokenizer files of a model folder (transformers, else tokenizers)."""

    def __init__(self, encode, decode):
        self.encode, self.decode = encode, decode

    @classmethod
    def load(cls, path: str) -> tuple["Tokenizer | None", str]:
        """(tokenizer, "") or (None, why there is none)."""
        has_json = os.path.isfile(os.path.join(path, "tokenizer.json"))
        if not (has_json or os.path.isfile(os.path.join(path, "tokenizer_config.json"))):
            return None, f"{path} has no tokenizer files (tokenizer.json / tokenizer_config.json)"
        errors = []
        try:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(path)
            return cls(lambda text: list(tok.encode(text)),
                       lambda ids: tok.decode(ids, skip_special_tokens=False)), ""
        except Exception as e:  # any failure: fall back to the raw tokenizer.json
            errors.append(f"transformers: {e}")
        if has_json:
            try:
                from tokenizers import Tokenizer as RawTokenizer

                tok = RawTokenizer.from_file(os.path.join(path, "tokenizer.json"))
                return cls(lambda text: list(tok.encode(text).ids),
                           lambda ids: tok.decode(ids, skip_special_tokens=False)), ""
            except Exception as e:
                errors.append(f"tokenizers: {e}")
        return None, f"cannot load the tokenizer in {path}: " + "; ".join(errors)


def eos_ids(path: str, cfg: qwen3_5.Qwen3_5Config) -> tuple[int, ...]:
    """EOS ids of config.json plus those of generation_config.json (if present)."""
    ids = list(cfg.eos_ids)
    gen = os.path.join(path, "generation_config.json")
    if os.path.isfile(gen):
        try:
            with open(gen) as f:
                extra = json.load(f).get("eos_token_id")
        except (OSError, json.JSONDecodeError) as e:
            raise CliError(f"cannot read {gen}: {e}", code=1) from None
        if extra is not None:
            ids += extra if isinstance(extra, list) else [extra]
    return tuple(sorted({int(i) for i in ids}))


def load_model(path: str, dtype, mesh=None):
    """The Qwen3.5 model of a prover (orbax) checkpoint or an HF folder, params in `dtype`, placed on
    `mesh` (None: one device). CliError (code 1) when it cannot be read."""
    try:
        if is_prover_checkpoint(path):
            return load_checkpoint(path, dtype=dtype, mesh=mesh)
        return qwen3_5.load_hf(path, dtype=dtype, mesh=mesh)
    except (OSError, ValueError) as e:
        raise CliError(f"cannot load model {path}: {e}", code=1) from None
