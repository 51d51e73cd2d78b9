"""HF -> Flax -> HF round trips, export loadable by transformers, and clear errors on bad checkpoints."""

import json
import os
import shutil

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from prover_jax.models import qwen3_5

from helpers import hf as F

L, A = "linear_attention", "full_attention"


def read_all(path):
    out = {}
    for f in sorted(os.listdir(path)):
        if f.endswith(".safetensors"):
            out.update(load_file(os.path.join(path, f)))
    return out


def assert_same_tensors(src, dst, rename=lambda k: k):
    text = {rename(k): v for k, v in src.items() if not k.startswith(("model.visual.", "mtp."))}
    assert sorted(text) == sorted(dst)
    for k, v in text.items():
        assert dst[k].dtype == v.dtype, (k, dst[k].dtype, v.dtype)
        assert torch.equal(dst[k], v), k


@pytest.mark.parametrize("tied", [True, False])
def test_round_trip_text_layout_bf16_keeps_dtypes(tmp_path, tied):
    src, out = tmp_path / "src", tmp_path / "out"
    F.make_text_checkpoint(src, [L, L, L, A], tied=tied, dtype=torch.bfloat16)
    (src / "tokenizer.json").write_text('{"dummy": true}')
    model = qwen3_5.load_hf(str(src), dtype=jnp.float32)
    qwen3_5.save_hf(model, str(out))
    before, after = read_all(src), read_all(out)
    assert before["model.layers.0.linear_attn.A_log"].dtype == torch.float32
    assert before["model.layers.0.mlp.up_proj.weight"].dtype == torch.bfloat16
    assert_same_tensors(before, after)
    assert (out / "tokenizer.json").read_text() == '{"dummy": true}'


def test_round_trip_multimodal_layout(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    F.make_multimodal_checkpoint(src, [L, L, L, A], tied=True)
    qwen3_5.save_hf(qwen3_5.load_hf(str(src)), str(out))
    assert_same_tensors(read_all(src), read_all(out),
                        rename=lambda k: k.replace("model.language_model.", "model."))
    assert F.read_config(out)["model_type"] == "qwen3_5_text"


def test_export_loads_in_transformers_sharded_with_index(tmp_path):
    from transformers import AutoModelForCausalLM

    src, out = tmp_path / "src", tmp_path / "out"
    hf = F.make_text_checkpoint(src, [L, A, L, A], tied=False)
    model = qwen3_5.load_hf(str(src))
    qwen3_5.save_hf(model, str(out), max_shard_bytes=40_000)
    assert (out / "model.safetensors.index.json").exists()
    assert len([f for f in os.listdir(out) if f.endswith(".safetensors")]) > 1
    back, info = AutoModelForCausalLM.from_pretrained(str(out), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    tokens = np.random.RandomState(0).randint(0, 96, (1, 20))
    np.testing.assert_array_equal(F.hf_logits(back.eval(), tokens), F.hf_logits(hf, tokens))
    # and the reloaded export is the same model
    again = qwen3_5.load_hf(str(out))
    np.testing.assert_array_equal(np.asarray(again(jnp.asarray(tokens))),
                                  np.asarray(model(jnp.asarray(tokens))))


def test_save_casts_to_requested_dtype_but_keeps_fp32_tensors(tmp_path, hf_checkpoint):
    out = tmp_path / "out"
    qwen3_5.save_hf(qwen3_5.load_hf(hf_checkpoint([L, A])), str(out), dtype=jnp.bfloat16)
    t = read_all(out)
    assert t["model.layers.0.mlp.up_proj.weight"].dtype == torch.bfloat16
    assert t["model.layers.0.linear_attn.A_log"].dtype == torch.float32
    assert t["model.layers.0.linear_attn.norm.weight"].dtype == torch.float32


# ---- bad input -------------------------------------------------------------------------------


def edit_config(path, fn):
    cfg = F.read_config(path)
    fn(cfg)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)


def edit_tensors(path, fn):
    file = os.path.join(path, "model.safetensors")
    t = load_file(file)
    fn(t)
    save_file(t, file, metadata={"format": "pt"})


@pytest.fixture
def ckpt(tmp_path, hf_checkpoint):
    """A copy of the session's [L, L, L, A] checkpoint, to break."""
    return shutil.copytree(hf_checkpoint([L, L, L, A]), str(tmp_path / "ckpt"))


def test_unknown_model_type(ckpt):
    edit_config(ckpt, lambda c: c.update(model_type="llama"))
    with pytest.raises(ValueError, match="unsupported model_type 'llama'"):
        qwen3_5.load_hf(ckpt)


def test_unknown_architecture(ckpt):
    edit_config(ckpt, lambda c: c.update(architectures=["LlamaForCausalLM"]))
    with pytest.raises(ValueError, match="unsupported architectures"):
        qwen3_5.load_hf(ckpt)


def test_layer_types_disagree_with_num_layers(ckpt):
    edit_config(ckpt, lambda c: c.update(num_hidden_layers=6))
    with pytest.raises(ValueError, match="layer_types has 4 entries but num_hidden_layers is 6"):
        qwen3_5.load_hf(ckpt)


def test_missing_tensor_is_named(ckpt):
    edit_tensors(ckpt, lambda t: t.pop("model.layers.2.linear_attn.dt_bias"))
    with pytest.raises(ValueError, match=r"missing tensors: \['model.layers.2.linear_attn.dt_bias'\]"):
        qwen3_5.load_hf(ckpt)


def test_wrong_shape_is_named(ckpt):
    edit_tensors(ckpt, lambda t: t.update({"model.layers.3.self_attn.k_proj.weight": torch.zeros(8, 64)}))
    with pytest.raises(ValueError, match=r"model.layers.3.self_attn.k_proj.weight.*shape \(8, 64\).*\(32, 64\)"):
        qwen3_5.load_hf(ckpt)


def test_layer_kind_mismatch_is_named(ckpt):
    edit_config(ckpt, lambda c: c.update(layer_types=[L, L, L, L]))
    with pytest.raises(ValueError, match="self_attn"):
        qwen3_5.load_hf(ckpt)


def test_corrupt_file_and_missing_folder(ckpt, tmp_path):
    with open(os.path.join(ckpt, "model.safetensors"), "r+b") as f:
        f.write(b"\xff" * 16)
    with pytest.raises(ValueError, match="cannot read safetensors file"):
        qwen3_5.load_hf(ckpt)
    with pytest.raises(FileNotFoundError, match="no config.json"):
        qwen3_5.load_hf(str(tmp_path / "nowhere"))


@pytest.mark.parametrize("size", sorted(qwen3_5.CONFIGS))
def test_config_survives_its_config_json(size):
    """from_hf_dict(to_hf_dict(cfg)), through JSON, is cfg again: rope_type (always "default") is not kept
    as an extra rope field and JSON lists (mrope_section) come back as the tuples they were."""
    cfg = qwen3_5.CONFIGS[size]
    again = type(cfg).from_hf_dict(json.loads(json.dumps(cfg.to_hf_dict())))
    assert again == cfg and again.to_hf_dict() == cfg.to_hf_dict()
