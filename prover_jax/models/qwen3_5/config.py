"""Qwen3.5 text-model configuration: HF config.json <-> a frozen dataclass, plus the released sizes."""

from __future__ import annotations

import dataclasses
from typing import Any

from prover_jax.models.hf_folder import config_json

LINEAR, FULL = "linear_attention", "full_attention"
TEXT_MODEL_TYPE = "qwen3_5_text"
MULTIMODAL_MODEL_TYPE = "qwen3_5"
TEXT_ARCHITECTURES = ("Qwen3_5ForCausalLM",)
MULTIMODAL_ARCHITECTURES = ("Qwen3_5ForConditionalGeneration",)
HF_DEFAULT_ROPE_THETA = 10000.0  # transformers' theta for a config.json that gives none


@dataclasses.dataclass(frozen=True)
class Qwen3_5Config:
    """Hyper-parameters of the Qwen3.5 text decoder (names follow `Qwen3_5TextConfig`)."""

    vocab_size: int
    hidden_size: int  # D
    intermediate_size: int  # I
    num_hidden_layers: int
    num_attention_heads: int  # H (gated full attention)
    num_key_value_heads: int  # Hkv
    head_dim: int  # hd
    linear_num_key_heads: int  # Hk (Gated DeltaNet)
    linear_num_value_heads: int  # Hv
    linear_key_head_dim: int  # dk
    linear_value_head_dim: int  # dv
    linear_conv_kernel_dim: int = 4  # K
    layer_types: tuple[str, ...] = ()
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1e7
    partial_rotary_factor: float = 0.25
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 262144
    eos_token_id: int | tuple[int, ...] | None = None
    bos_token_id: int | None = None
    pad_token_id: int | None = None
    # rope_parameters entries with no effect on text-only input (mrope_section, ...), kept for export.
    rope_extra: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self):
        if not self.layer_types:
            object.__setattr__(self, "layer_types", layer_pattern(self.num_hidden_layers))
        object.__setattr__(self, "layer_types", tuple(self.layer_types))
        if len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(
                f"layer_types has {len(self.layer_types)} entries but num_hidden_layers is "
                f"{self.num_hidden_layers}")
        bad = sorted(set(self.layer_types) - {LINEAR, FULL})
        if bad:
            raise ValueError(f"unknown layer_types {bad}; expected {LINEAR!r} or {FULL!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                             f"num_key_value_heads {self.num_key_value_heads}")
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise ValueError(f"linear_num_value_heads {self.linear_num_value_heads} is not a multiple "
                             f"of linear_num_key_heads {self.linear_num_key_heads}")
        if isinstance(self.eos_token_id, list):
            object.__setattr__(self, "eos_token_id", tuple(self.eos_token_id))

    # Derived sizes.
    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def linear_key_dim(self) -> int:  # Hk * dk
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_dim(self) -> int:  # Hv * dv
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def conv_dim(self) -> int:  # channels of the fused q|k|v projection
        return 2 * self.linear_key_dim + self.linear_value_dim

    @property
    def full_attention_layers(self) -> int:  # layers of gated full attention; the rest are Gated DeltaNet
        return sum(1 for kind in self.layer_types if kind == FULL)

    @property
    def eos_ids(self) -> tuple[int, ...]:
        if self.eos_token_id is None:
            return ()
        return self.eos_token_id if isinstance(self.eos_token_id, tuple) else (self.eos_token_id,)

    def replace(self, **kw) -> "Qwen3_5Config":
        return dataclasses.replace(self, **kw)

    def param_count(self) -> int:
        """Number of text-model parameters (embeddings counted once when tied)."""
        D, I, V = self.hidden_size, self.intermediate_size, self.vocab_size
        H, Hkv, hd = self.num_attention_heads, self.num_key_value_heads, self.head_dim
        Hv, dv, K = self.linear_num_value_heads, self.linear_value_head_dim, self.linear_conv_kernel_dim
        mlp = 3 * D * I + 2 * D
        full = D * 2 * H * hd + 2 * D * Hkv * hd + H * hd * D + 2 * hd
        lin = (D * self.conv_dim + D * self.linear_value_dim + 2 * D * Hv + self.conv_dim * K + 2 * Hv
               + dv + self.linear_value_dim * D)
        n = V * D + D + (0 if self.tie_word_embeddings else V * D)
        for kind in self.layer_types:
            n += mlp + (full if kind == FULL else lin)
        return n

    # HF conversion.
    @classmethod
    def from_hf_dict(cls, d: dict) -> "Qwen3_5Config":
        """Reads a Qwen3.5 config.json dict: text-only (`qwen3_5_text`) or multimodal (`qwen3_5`). As in
        transformers, a multimodal config ties the embeddings by its top-level `tie_word_embeddings`
        (default false), whatever `text_config` says; a text-only one by its own (default false). Fields
        the model does not implement (hidden_act other than silu, attention_bias, a rope_type other than
        default) are a ValueError naming them."""
        model_type = d.get("model_type")
        archs = d.get("architectures") or []
        known = TEXT_ARCHITECTURES + MULTIMODAL_ARCHITECTURES
        if archs and not any(a in known for a in archs):
            raise ValueError(f"unsupported architectures {archs}; expected one of {list(known)}")
        if model_type == MULTIMODAL_MODEL_TYPE:
            if "text_config" not in d:
                raise ValueError("multimodal qwen3_5 config.json has no 'text_config'")
            text = dict(d["text_config"])
            text["tie_word_embeddings"] = d.get("tie_word_embeddings", False)  # what transformers ties by
            for key in ("eos_token_id", "bos_token_id", "pad_token_id"):
                if text.get(key) is None and d.get(key) is not None:
                    text[key] = d[key]
        elif model_type == TEXT_MODEL_TYPE:
            text = d
        else:
            raise ValueError(f"unsupported model_type {model_type!r}; expected {TEXT_MODEL_TYPE!r} or "
                             f"{MULTIMODAL_MODEL_TYPE!r}")
        if text.get("hidden_act", "silu") not in ("silu", "swish"):
            raise ValueError(f"unsupported hidden_act {text['hidden_act']!r}; only 'silu' is implemented")
        if text.get("attention_bias"):
            raise ValueError("attention_bias: true is not supported; the projections have no biases")
        # as transformers: a legacy rope_scaling wins, "type" stands for rope_type, theta defaults to 1e4
        rope = dict(text.get("rope_scaling") or text.get("rope_parameters") or {})
        if "rope_theta" in text and "rope_theta" not in rope:
            rope["rope_theta"] = text["rope_theta"]
        rope_type = rope.pop("rope_type", rope.pop("type", "default"))
        if rope_type != "default":
            raise ValueError(f"unsupported rope_type {rope_type!r}; only 'default' is implemented")
        rope = {k: tuple(v) if isinstance(v, list) else v for k, v in rope.items()}  # JSON lists: hashable
        theta = rope.pop("rope_theta", HF_DEFAULT_ROPE_THETA)
        factor = rope.pop("partial_rotary_factor", text.get("partial_rotary_factor", 0.25))
        layers = text.get("layer_types")
        try:
            n_layers = text["num_hidden_layers"]
            if layers is None:
                layers = layer_pattern(n_layers, text.get("full_attention_interval", 4))
            return cls(
                vocab_size=text["vocab_size"], hidden_size=text["hidden_size"],
                intermediate_size=text["intermediate_size"], num_hidden_layers=n_layers,
                num_attention_heads=text["num_attention_heads"],
                num_key_value_heads=text["num_key_value_heads"], head_dim=text.get("head_dim", 256),
                linear_num_key_heads=text["linear_num_key_heads"],
                linear_num_value_heads=text["linear_num_value_heads"],
                linear_key_head_dim=text["linear_key_head_dim"],
                linear_value_head_dim=text["linear_value_head_dim"],
                linear_conv_kernel_dim=text.get("linear_conv_kernel_dim", 4), layer_types=tuple(layers),
                rms_norm_eps=text.get("rms_norm_eps", 1e-6), rope_theta=float(theta),
                partial_rotary_factor=float(factor),
                tie_word_embeddings=bool(text.get("tie_word_embeddings", False)),
                max_position_embeddings=text.get("max_position_embeddings", 262144),
                eos_token_id=text.get("eos_token_id"), bos_token_id=text.get("bos_token_id"),
                pad_token_id=text.get("pad_token_id"), rope_extra=tuple(sorted(rope.items())))
        except KeyError as e:
            raise ValueError(f"config.json lacks required field {e.args[0]!r}") from None

    def to_hf_dict(self) -> dict:
        """A text-only config.json dict that `AutoModelForCausalLM` reads as Qwen3_5ForCausalLM."""
        rope = {"rope_type": "default", "rope_theta": self.rope_theta,
                "partial_rotary_factor": self.partial_rotary_factor, **dict(self.rope_extra)}
        eos = list(self.eos_token_id) if isinstance(self.eos_token_id, tuple) else self.eos_token_id
        return {
            "architectures": list(TEXT_ARCHITECTURES), "model_type": TEXT_MODEL_TYPE,
            "vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size, "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads, "head_dim": self.head_dim,
            "linear_num_key_heads": self.linear_num_key_heads,
            "linear_num_value_heads": self.linear_num_value_heads,
            "linear_key_head_dim": self.linear_key_head_dim,
            "linear_value_head_dim": self.linear_value_head_dim,
            "linear_conv_kernel_dim": self.linear_conv_kernel_dim, "layer_types": list(self.layer_types),
            "rms_norm_eps": self.rms_norm_eps, "hidden_act": "silu", "attention_bias": False,
            "rope_parameters": rope, "tie_word_embeddings": self.tie_word_embeddings,
            "max_position_embeddings": self.max_position_embeddings, "eos_token_id": eos,
            "bos_token_id": self.bos_token_id, "pad_token_id": self.pad_token_id,
        }

    @classmethod
    def from_pretrained(cls, path: str) -> "Qwen3_5Config":
        """The config of checkpoint folder `path` (its config.json)."""
        return cls.from_hf_dict(config_json(path))


def layer_pattern(num_layers: int, full_attention_interval: int = 4) -> tuple[str, ...]:
    """Layer i is full attention iff (i + 1) % interval == 0 (HF's default pattern)."""
    return tuple(FULL if (i + 1) % full_attention_interval == 0 else LINEAR for i in range(num_layers))


def _released(hidden, inter, layers, heads, kv, lin_v, tied) -> Qwen3_5Config:
    return Qwen3_5Config(
        vocab_size=248320, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv, head_dim=256, linear_num_key_heads=16,
        linear_num_value_heads=lin_v, linear_key_head_dim=128, linear_value_head_dim=128,
        tie_word_embeddings=tied, eos_token_id=248044,
        rope_extra=(("mrope_interleaved", True), ("mrope_section", (11, 11, 10))))


# Released dense sizes (text model). Published names count the vision tower too.
CONFIGS: dict[str, Qwen3_5Config] = {
    "0.8B": _released(1024, 3584, 24, 8, 2, 16, True),
    "2B": _released(2048, 6144, 24, 8, 2, 16, True),
    "4B": _released(2560, 9216, 32, 16, 4, 32, True),
    "9B": _released(4096, 12288, 32, 16, 4, 32, False),
    "27B": _released(5120, 17408, 64, 24, 4, 48, False),
    # Policy of `make demo` (vocab = the demo tokenizer's 1024; eos = <|im_end|>): the hybrid pattern at
    # its smallest, one Gated DeltaNet layer then one full-attention layer. ~2,000 SFT steps on household
    # give it ~34% greedy success; the 4-layer (3 + 1) stack of the same width learned a synthetic
    # copy task far more slowly (still at chance after 600 steps).
    "demo": Qwen3_5Config(
        vocab_size=1024, hidden_size=128, intermediate_size=384, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=32, linear_value_head_dim=32,
        layer_types=(LINEAR, FULL), tie_word_embeddings=True, eos_token_id=2),
    # ~29M-parameter model used by the sampler benchmark.
    "bench-small": Qwen3_5Config(
        vocab_size=4096, hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
        num_attention_heads=8, num_key_value_heads=2, head_dim=64, linear_num_key_heads=4,
        linear_num_value_heads=8, linear_key_head_dim=64, linear_value_head_dim=64,
        tie_word_embeddings=True),
}
