"""What a checkpoint folder holds beside the weights, the same for every model family: config.json,
the tokenizer files, generation_config.json, and the rule that turns them into the policy's EOS ids.

    d = config_json(path)                        # the config.json dict; FileNotFoundError / ValueError
    tok, why_not = load_tokenizer(path)          # (None, reason) without loadable tokenizer files
    eos = eos_ids(model_config, tok, path)       # the one EOS rule of generation, serving and training
"""

from __future__ import annotations

import dataclasses
import json
import os

GENERATION_CONFIG = "generation_config.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                   "merges.txt", "chat_template.jinja", GENERATION_CONFIG, "added_tokens.json")
TOKENIZER_MARKERS = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
IM_END = "<|im_end|>"  # the chat layout's end of turn: a policy stops there whatever config.json says


@dataclasses.dataclass(frozen=True)
class HFSource:
    """Where a model came from: its folder (for tokenizer files) and each tensor's stored dtype."""

    path: str
    dtypes: tuple[tuple[str, str], ...]


def config_json(path: str) -> dict:
    """The dict of `path`/config.json. FileNotFoundError without one, ValueError when it is not JSON."""
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path):
        raise FileNotFoundError(f"no config.json in checkpoint folder {path!r}")
    try:
        with open(cfg_path) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{cfg_path} is not valid JSON: {e}") from None


def load_tokenizer(path: str):
    """(transformers tokenizer, "") of a checkpoint folder, or (None, why there is none). When
    AutoTokenizer cannot read the folder, its tokenizer.json alone (PreTrainedTokenizerFast)."""
    has_json = os.path.isfile(os.path.join(path, "tokenizer.json"))
    if not any(os.path.isfile(os.path.join(path, f)) for f in TOKENIZER_MARKERS):
        return None, f"no tokenizer files ({' / '.join(TOKENIZER_MARKERS)}) in {path!r}"
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    errors = []
    try:
        return AutoTokenizer.from_pretrained(path), ""
    except Exception as e:  # any failure: fall back to the raw tokenizer.json
        errors.append(f"transformers: {e}")
    if has_json:
        try:
            return PreTrainedTokenizerFast(tokenizer_file=os.path.join(path, "tokenizer.json")), ""
        except Exception as e:
            errors.append(f"tokenizer.json: {e}")
    return None, f"cannot load the tokenizer in {path}: " + "; ".join(errors)


def generation_eos_ids(folder: str) -> tuple[int, ...]:
    """eos_token_id of `folder`/generation_config.json (() without one); ValueError when unreadable."""
    gen = os.path.join(folder, GENERATION_CONFIG)
    if not os.path.isfile(gen):
        return ()
    try:
        with open(gen) as f:
            extra = json.load(f).get("eos_token_id")
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read {gen}: {e}") from None
    if extra is None:
        return ()
    return tuple(int(i) for i in (extra if isinstance(extra, list) else [extra]))


def eos_ids(model_config, tokenizer=None, folder: str | None = None) -> tuple[int, ...]:
    """The ids a policy's response ends at, sorted and unique: the config's `eos_ids`, those of
    `folder`/generation_config.json, the tokenizer's eos token, and <|im_end|> when its vocabulary has it."""
    ids = set(int(i) for i in model_config.eos_ids)
    if folder is not None:
        ids.update(generation_eos_ids(folder))
    if tokenizer is not None:
        if getattr(tokenizer, "eos_token_id", None) is not None:
            ids.add(int(tokenizer.eos_token_id))
        vocab = tokenizer.get_vocab()
        if IM_END in vocab:
            ids.add(int(vocab[IM_END]))
    return tuple(sorted(ids))
