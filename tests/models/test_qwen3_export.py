"""Qwen3 HF conversion and config: a folder read and written back has identical tensors and config.json;
our exports (sharded, fresh models) are what transformers loads; config.json is read as transformers
reads it (theta, defaults) and what the model does not implement is refused by name; the released sizes
have transformers' parameter counts; the family table finds Qwen3 by config.json's model_type."""

import json
import os
import shutil

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from safetensors.torch import load_file, save_file

from prover_jax.models import family, family_for, load_hf, qwen3, read_config, save_hf

from helpers import hf as F
from helpers.qwen3_hf import TINY3, hf_config, make_checkpoint

TOKENS = np.random.RandomState(0).randint(0, TINY3["vocab_size"], (2, 19)).astype(np.int32)


def tensors(folder):
    """{name: tensor} over every safetensors file of `folder`."""
    out = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            out.update(load_file(os.path.join(folder, f)))
    return out


def assert_same_tensors(a, b):
    ta, tb = tensors(a), tensors(b)
    assert sorted(ta) == sorted(tb)
    for name in ta:
        assert ta[name].dtype == tb[name].dtype and ta[name].shape == tb[name].shape, name
        assert torch.equal(ta[name], tb[name]), name


@pytest.mark.parametrize("tied,dtype,over", [(True, torch.float32, {}),
                                             (False, torch.bfloat16, dict(attention_bias=True))],
                         ids=["tied_fp32", "untied_bf16_bias"])
def test_hf_folder_round_trip_is_exact(tmp_path, tied, dtype, over):
    """HF folder -> model (fp32 params) -> HF folder: the same tensors (names, dtypes, bits) and config.json."""
    src, out = tmp_path / "src", tmp_path / "out"
    make_checkpoint(src, tied=tied, dtype=dtype, rope_theta=3e5, **over)
    model = qwen3.load_hf(str(src))
    assert model.embed_tokens.get_value().dtype == jnp.float32
    qwen3.save_hf(model, str(out))
    assert_same_tensors(src, out)
    assert F.read_config(out) == F.read_config(src)
    assert sorted(os.listdir(out)) == sorted(os.listdir(src))  # generation_config.json copied along


def test_sharded_export_loads_in_transformers_and_back(tmp_path):
    from transformers import AutoModelForCausalLM

    make_checkpoint(tmp_path / "src", tied=False, attention_bias=True)
    model = qwen3.load_hf(str(tmp_path / "src"))
    out = str(tmp_path / "out")
    qwen3.save_hf(model, out, max_shard_bytes=40_000)
    files = sorted(f for f in os.listdir(out) if f.endswith((".safetensors", ".json")))
    assert "model.safetensors.index.json" in files and len([f for f in files if f.startswith("model-")]) > 2
    back = qwen3.load_hf(out)
    for (p, x), (_, y) in zip(nnx.to_flat_state(nnx.state(model)), nnx.to_flat_state(nnx.state(back))):
        np.testing.assert_array_equal(np.asarray(x.get_value()), np.asarray(y.get_value()), err_msg=str(p))
    hf = AutoModelForCausalLM.from_pretrained(out).eval()
    np.testing.assert_allclose(F.hf_logits(hf, TOKENS), np.asarray(model(jnp.asarray(TOKENS))), atol=2e-4)
    assert_same_tensors(tmp_path / "src", out)


def test_fresh_model_exports_what_transformers_loads(tmp_path):
    """A model not read from HF (config from the dataclass): transformers reads its theta and weights."""
    from transformers import AutoModelForCausalLM

    cfg = qwen3.Qwen3Config(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=16, rope_theta=2e5,
                            tie_word_embeddings=True, eos_token_id=1)
    model = qwen3.Qwen3(cfg, rngs=nnx.Rngs(0))
    qwen3.save_hf(model, str(tmp_path), dtype=jnp.bfloat16)
    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path), dtype=torch.float32).eval()
    assert hf.config.rope_parameters["rope_theta"] == 2e5 and hf.config.model_type == "qwen3"
    assert all(t.dtype == torch.bfloat16 for t in tensors(tmp_path).values())
    back = qwen3.load_hf(str(tmp_path))
    assert back.config.to_hf_dict() == cfg.to_hf_dict()
    np.testing.assert_allclose(F.hf_logits(hf, TOKENS), np.asarray(back(jnp.asarray(TOKENS))), atol=2e-4)


# The config.json of Qwen/Qwen3-0.6B, as transformers 4.51 wrote it.
QWEN3_0_6B = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
    "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 40960,
    "max_window_layers": 28, "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
    "sliding_window": None, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}


def test_released_config_json_reads_as_the_named_size_and_writes_back_the_same():
    from transformers import Qwen3Config as HFConfig

    cfg = qwen3.Qwen3Config.from_hf_dict(QWEN3_0_6B)
    assert cfg.replace(hf_extra="") == qwen3.CONFIGS["0.6B"]
    assert cfg.to_hf_dict() == QWEN3_0_6B
    assert cfg.replace(rope_theta=5e5).to_hf_dict() == {**QWEN3_0_6B, "rope_theta": 5e5}
    hf = HFConfig(**{k: v for k, v in cfg.replace(rope_theta=5e5).to_hf_dict().items() if k != "model_type"})
    assert hf.rope_parameters["rope_theta"] == 5e5


def test_config_fields_are_read_as_transformers_reads_them():
    from transformers import Qwen3Config as HFConfig

    d = {k: v for k, v in QWEN3_0_6B.items() if k not in ("rope_theta", "rope_scaling", "head_dim")}
    d["num_key_value_heads"] = None  # null: as many kv heads as query heads
    hf = HFConfig(**{k: v for k, v in d.items() if k != "model_type"})
    cfg = qwen3.Qwen3Config.from_hf_dict(d)
    assert (cfg.rope_theta, cfg.head_dim, cfg.num_key_value_heads) == (
        hf.rope_parameters["rope_theta"], hf.head_dim, hf.num_key_value_heads) == (1e4, 128, 16)
    absent = {k: v for k, v in d.items() if k != "num_key_value_heads"}
    assert HFConfig(**{k: v for k, v in absent.items() if k != "model_type"}).num_key_value_heads == 32
    with pytest.raises(ValueError, match="16 is not a multiple of num_key_value_heads 32"):
        qwen3.Qwen3Config.from_hf_dict(absent)
    assert qwen3.Qwen3Config.from_hf_dict(cfg.replace(rope_theta=7e5).to_hf_dict()).rope_theta == 7e5
    d5 = {**d, "rope_parameters": {"rope_type": "default", "rope_theta": 123.0}}  # transformers 5's layout
    assert qwen3.Qwen3Config.from_hf_dict(d5).rope_theta == 123.0
    assert qwen3.Qwen3Config.from_hf_dict(d5).to_hf_dict() == d5 | {"head_dim": 128, "num_key_value_heads": 16}


@pytest.mark.parametrize("change,match", [
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}},
     "unsupported rope scaling 'yarn'"),
    ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "unsupported rope scaling 'linear'"),
    ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e6}, "rope_scaling": None},
     "unsupported rope scaling 'dynamic'"),
    ({"use_sliding_window": True, "sliding_window": 4096}, "use_sliding_window: true"),
    ({"layer_types": ["sliding_attention"] * 28}, r"unsupported layer_types \['sliding_attention'\]"),
    ({"hidden_act": "gelu"}, "unsupported hidden_act 'gelu'"),
    ({"model_type": "qwen2"}, "unsupported model_type 'qwen2'"),
    ({"architectures": ["Qwen3ForSequenceClassification"]}, "unsupported architectures"),
    ({"num_key_value_heads": 5}, "not a multiple of num_key_value_heads 5"),
    ({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}, "quantization_config"),
])
def test_what_the_model_does_not_implement_is_refused(change, match):
    with pytest.raises(ValueError, match=match):
        qwen3.Qwen3Config.from_hf_dict({**QWEN3_0_6B, **change})


def test_missing_field_is_named():
    d = dict(QWEN3_0_6B)
    d.pop("hidden_size")
    with pytest.raises(ValueError, match="lacks required field 'hidden_size'"):
        qwen3.Qwen3Config.from_hf_dict(d)


@pytest.mark.parametrize("size", ["0.6B", "1.7B", "4B", "8B", "14B", "32B", "demo"])
def test_named_sizes_have_transformers_parameter_count(size):
    from transformers import Qwen3ForCausalLM
    from transformers import Qwen3Config as HFConfig

    cfg = qwen3.CONFIGS[size]
    with torch.device("meta"):
        hf = Qwen3ForCausalLM(HFConfig(**{k: v for k, v in cfg.to_hf_dict().items() if k != "model_type"}))
    abstract = qwen3.abstract_model(cfg)
    ours = sum(int(np.prod(v.get_value().shape)) for _, v in nnx.to_flat_state(nnx.state(abstract, nnx.Param)))
    assert cfg.param_count() == ours == hf.num_parameters()
    published = {"0.6B": 0.6, "1.7B": 1.7, "4B": 4.0, "8B": 8.2, "14B": 14.8, "32B": 32.8}  # model cards, 1e9
    if size in published:
        assert abs(cfg.param_count() / 1e9 - published[size]) < 0.05


def test_tied_checkpoint_that_stores_the_head(tmp_path):
    """Accepted when the head equals the embedding (transformers ties it); a named error otherwise."""
    make_checkpoint(tmp_path, tied=True)
    want = np.asarray(qwen3.load_hf(str(tmp_path))(jnp.asarray(TOKENS)))
    file = os.path.join(tmp_path, "model.safetensors")
    t = load_file(file)
    t["lm_head.weight"] = t["model.embed_tokens.weight"].clone()
    save_file(t, file, metadata={"format": "pt"})
    np.testing.assert_array_equal(np.asarray(qwen3.load_hf(str(tmp_path))(jnp.asarray(TOKENS))), want)
    t["lm_head.weight"] += 1.0
    save_file(t, file, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"'lm_head.weight' in .* differs from 'model.embed_tokens.weight'"):
        qwen3.load_hf(str(tmp_path))


def test_checkpoint_mismatches_are_named(tmp_path):
    make_checkpoint(tmp_path, tied=False)
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 2}))
    with pytest.raises(ValueError, match=r"'model\.layers\.2\..*' in .* maps to 'layers\.2\."):
        qwen3.load_hf(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "attention_bias": True}))
    with pytest.raises(ValueError, match=r"missing tensors: \[.*'model\.layers\.0\.self_attn\.q_proj\.bias'"):
        qwen3.load_hf(str(tmp_path))


def test_family_is_found_by_model_type(tmp_path):
    """family_for(folder) finds qwen3 by config.json's model_type; the family-neutral load_hf / save_hf
    and read_config go through it."""
    src = str(tmp_path / "src")
    make_checkpoint(src, tied=True)
    shutil.copy(os.path.join(src, "config.json"), tmp_path / "config.json")
    fam = family("qwen3")
    assert family_for(src) is fam and family_for({"model_type": "qwen3"}) is fam
    assert family_for(qwen3.CONFIGS["8B"]) is fam and fam.config("demo") is qwen3.CONFIGS["demo"]
    assert family_for({"model_type": "qwen3_5_text"}) is family("qwen3_5")
    got_fam, cfg = read_config(src)
    assert got_fam is fam and isinstance(cfg, qwen3.Qwen3Config)
    model = load_hf(src)
    assert type(model) is qwen3.Qwen3 and fam.model_class is qwen3.Qwen3
    save_hf(model, str(tmp_path / "out"))
    assert_same_tensors(src, tmp_path / "out")
