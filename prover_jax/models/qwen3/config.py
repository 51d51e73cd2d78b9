"""Qwen3 (dense) configuration: HF config.json <-> a frozen dataclass, plus the released sizes.

The entries of a config.json the model does not read (initializer_range, use_cache, dtype,
transformers_version, the rope layout, ...) are kept verbatim in `hf_extra`, so a folder read and
written back has the same config.json.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from prover_jax.models.hf_folder import config_json

MODEL_TYPE = "qwen3"
ARCHITECTURES = ("Qwen3ForCausalLM",)
FULL = "full_attention"  # the one layer kind (sliding-window layers are refused)
HF_DEFAULT_ROPE_THETA = 10000.0  # transformers' theta for a config.json that gives none
HF_DEFAULT_HEAD_DIM = 128  # transformers' Qwen3Config defaults for an absent key (not hidden_size / heads,
HF_DEFAULT_KV_HEADS = 32  # nor num_attention_heads, which null stands for)
# config.json keys written from the dataclass fields; every other key lives in hf_extra
MODELLED = ("architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size",
            "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps",
            "attention_bias", "tie_word_embeddings", "max_position_embeddings")
TOKEN_KEYS = ("eos_token_id", "bos_token_id", "pad_token_id")  # written when set or in the source


@dataclasses.dataclass(frozen=True)
class Qwen3Config:
    """Hyper-parameters of the Qwen3 decoder (names follow transformers' `Qwen3Config`)."""

    vocab_size: int  # V
    hidden_size: int  # D
    intermediate_size: int  # I
    num_hidden_layers: int  # L
    num_attention_heads: int  # H
    num_key_value_heads: int  # Hkv (GQA: query head h reads kv head h // (H / Hkv))
    head_dim: int = HF_DEFAULT_HEAD_DIM  # hd
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1e6  # the released models'; a config.json without one reads as 1e4 (transformers)
    attention_bias: bool = False  # q/k/v/o projections with biases
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 40960
    eos_token_id: int | tuple[int, ...] | None = None
    bos_token_id: int | None = None
    pad_token_id: int | None = None
    # the config.json entries outside MODELLED (token ids included), as sorted JSON ("" = not read
    # from a config.json: defaults)
    hf_extra: str = ""

    def __post_init__(self):
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                             f"num_key_value_heads {self.num_key_value_heads}")
        if isinstance(self.eos_token_id, list):
            object.__setattr__(self, "eos_token_id", tuple(self.eos_token_id))

    @property
    def rotary_dim(self) -> int:  # RoPE rotates the whole head
        return self.head_dim

    @property
    def full_attention_layers(self) -> int:
        return self.num_hidden_layers

    @property
    def eos_ids(self) -> tuple[int, ...]:
        if self.eos_token_id is None:
            return ()
        return self.eos_token_id if isinstance(self.eos_token_id, tuple) else (self.eos_token_id,)

    def replace(self, **kw) -> "Qwen3Config":
        return dataclasses.replace(self, **kw)

    def param_count(self) -> int:
        """Number of parameters (embeddings counted once when tied)."""
        D, I, V = self.hidden_size, self.intermediate_size, self.vocab_size
        q, kv = self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        attn = 2 * D * q + 2 * D * kv + 2 * self.head_dim + (q + 2 * kv + D if self.attention_bias else 0)
        layer = attn + 3 * D * I + 2 * D
        return V * D * (1 if self.tie_word_embeddings else 2) + D + self.num_hidden_layers * layer

    # HF conversion.
    @classmethod
    def from_hf_dict(cls, d: dict) -> "Qwen3Config":
        """Reads a Qwen3 config.json dict as transformers does (theta: a legacy rope_scaling, else
        rope_parameters, else top-level rope_theta, else 1e4; an absent head_dim is 128, an absent
        num_key_value_heads 32, a null one H). What the model does not implement is a ValueError naming
        it: another model_type or architecture, hidden_act other than silu, sliding-window layers, a
        rope type other than "default", quantized weights. attention_dropout is kept, never applied
        (inference and the trainer run without dropout)."""
        if d.get("model_type") != MODEL_TYPE:
            raise ValueError(f"unsupported model_type {d.get('model_type')!r}; expected {MODEL_TYPE!r}")
        archs = d.get("architectures") or []
        if archs and not any(a in ARCHITECTURES for a in archs):
            raise ValueError(f"unsupported architectures {archs}; expected one of {list(ARCHITECTURES)}")
        if d.get("hidden_act", "silu") not in ("silu", "swish"):
            raise ValueError(f"unsupported hidden_act {d['hidden_act']!r}; only 'silu' is implemented")
        if d.get("quantization_config"):
            raise ValueError("quantization_config: quantized checkpoints are not supported; use the unquantized "
                             "weights")
        if d.get("use_sliding_window"):
            raise ValueError("use_sliding_window: true is not supported; only full attention is implemented")
        bad = sorted(set(d.get("layer_types") or ()) - {FULL})
        if bad:
            raise ValueError(f"unsupported layer_types {bad}; only {FULL!r} is implemented")
        try:
            return cls(
                vocab_size=d["vocab_size"], hidden_size=d["hidden_size"],
                intermediate_size=d["intermediate_size"], num_hidden_layers=d["num_hidden_layers"],
                num_attention_heads=d["num_attention_heads"],
                num_key_value_heads=_or(d.get("num_key_value_heads", HF_DEFAULT_KV_HEADS), d["num_attention_heads"]),
                head_dim=d.get("head_dim", HF_DEFAULT_HEAD_DIM), rms_norm_eps=d.get("rms_norm_eps", 1e-6),
                rope_theta=_rope_theta(d), attention_bias=bool(d.get("attention_bias", False)),
                tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
                max_position_embeddings=d.get("max_position_embeddings", 32768),
                eos_token_id=d.get("eos_token_id"), bos_token_id=d.get("bos_token_id"),
                pad_token_id=d.get("pad_token_id"),
                hf_extra=json.dumps({k: v for k, v in d.items() if k not in MODELLED}, sort_keys=True))
        except KeyError as e:
            raise ValueError(f"config.json lacks required field {e.args[0]!r}") from None

    def to_hf_dict(self) -> dict:
        """A config.json dict that `AutoModelForCausalLM` reads as Qwen3ForCausalLM: the source's own
        entries (`hf_extra`) with the fields; theta where the source kept it, else at the top level (a
        config not read from one: both the legacy `rope_theta` and `rope_parameters`, so transformers 4
        and 5 read it)."""
        theta = self.rope_theta
        extra = json.loads(self.hf_extra) if self.hf_extra else {
            "hidden_act": "silu", "rope_theta": theta, "rope_parameters": {"rope_type": "default", "rope_theta": theta}}
        for key in ("rope_scaling", "rope_parameters"):
            if isinstance(extra.get(key), dict) and "rope_theta" in extra[key]:
                extra[key] = {**extra[key], "rope_theta": theta}
        if "rope_theta" in extra or _rope_theta(extra) != theta:  # the reader's dict had none: top level
            extra["rope_theta"] = theta
        if "layer_types" in extra:
            extra["layer_types"] = [FULL] * self.num_hidden_layers
        for key in TOKEN_KEYS:
            value = getattr(self, key)
            if value is not None or key in extra:
                extra[key] = list(value) if isinstance(value, tuple) else value
        return {
            **extra, "architectures": list(ARCHITECTURES), "model_type": MODEL_TYPE,
            "vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size, "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads, "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim, "rms_norm_eps": self.rms_norm_eps, "attention_bias": self.attention_bias,
            "tie_word_embeddings": self.tie_word_embeddings, "max_position_embeddings": self.max_position_embeddings,
        }

    @classmethod
    def from_pretrained(cls, path: str) -> "Qwen3Config":
        """The config of checkpoint folder `path` (its config.json)."""
        return cls.from_hf_dict(config_json(path))


def _or(value, default):
    return default if value is None else value


def _rope_theta(d: dict) -> float:
    """theta of a config.json, as transformers reads it; a rope type other than default is refused."""
    rope: dict[str, Any] = dict(d.get("rope_scaling") or d.get("rope_parameters") or {})
    if "rope_theta" in d and "rope_theta" not in rope:
        rope["rope_theta"] = d["rope_theta"]
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise ValueError(f"unsupported rope scaling {rope_type!r}; only 'default' RoPE (rope_scaling: null) "
                         "is implemented")
    return float(rope.get("rope_theta", HF_DEFAULT_ROPE_THETA))


def _released(hidden, inter, layers, heads, tied) -> Qwen3Config:
    return Qwen3Config(
        vocab_size=151936, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=8, head_dim=128, rope_theta=1e6,
        tie_word_embeddings=tied, max_position_embeddings=40960, eos_token_id=151645, bos_token_id=151643)


# Released dense sizes (Qwen/Qwen3-*; published names round the parameter count).
CONFIGS: dict[str, Qwen3Config] = {
    "0.6B": _released(1024, 3072, 28, 16, True),
    "1.7B": _released(2048, 6144, 28, 16, True),
    "4B": _released(2560, 9728, 36, 32, True),
    "8B": _released(4096, 12288, 36, 32, False),
    "14B": _released(5120, 17408, 40, 40, False),
    "32B": _released(5120, 25600, 64, 64, False),
    # the size of the Qwen3.5 `demo` policy (vocab = the demo tokenizer's 1024; eos = <|im_end|>), two
    # full-attention layers
    "demo": Qwen3Config(
        vocab_size=1024, hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, tie_word_embeddings=True, eos_token_id=2),
}
