"""HF export and import edge cases: re-exporting into a folder leaves only the new weight files, tying
follows transformers (top-level flag of a multimodal config; a stored head equal to the embedding),
and config / adapter mismatches are named errors."""

import json
import os
import shutil

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from prover_jax.models import qwen3_5
from prover_jax.models.lora import LoraSpec, write_peft

from helpers import hf as F

L, A = "linear_attention", "full_attention"
TOKENS = jnp.asarray(np.random.RandomState(0).randint(0, F.TINY["vocab_size"], (1, 16)), jnp.int32)


def weight_files(path):
    return sorted(f for f in os.listdir(path) if f.endswith((".safetensors", ".index.json")))


def test_reexport_leaves_only_its_own_weight_files(tmp_path, hf_checkpoint):
    model = qwen3_5.load_hf(hf_checkpoint([L, A], tied=False))
    for first, second in ((40_000, 2 ** 40), (2 ** 40, 40_000)):  # sharded -> single, single -> sharded
        out = tmp_path / f"out{first}"
        qwen3_5.save_hf(model, str(out), max_shard_bytes=first)
        (out / "notes.txt").write_text("mine")
        (out / "_shard00007.safetensors").write_bytes(b"left by an interrupted export")
        model.lm_head.set_value(model.lm_head.get_value() * 2.0)  # as training would
        qwen3_5.save_hf(model, str(out), max_shard_bytes=second)
        files = weight_files(out)
        if second > first:
            assert files == ["model.safetensors"]
        else:
            n = len(files) - 1
            assert n > 1 and files == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)] + [
                "model.safetensors.index.json"]
        assert (out / "notes.txt").read_text() == "mine"
        np.testing.assert_array_equal(qwen3_5.load_hf(str(out)).lm_head[...], model.lm_head[...])


def test_weight_files_are_those_transformers_reads(tmp_path, hf_checkpoint):
    """model.safetensors before an index beside it; a PEFT adapter's file is never read as weights."""
    model = qwen3_5.load_hf(hf_checkpoint([L, A], tied=False))
    qwen3_5.save_hf(model, str(tmp_path), max_shard_bytes=40_000)  # sharded
    shards = weight_files(tmp_path)
    model.lm_head.set_value(model.lm_head.get_value() * 2.0)
    qwen3_5.save_hf(model, str(tmp_path / "single"))
    shutil.copy(tmp_path / "single" / "model.safetensors", tmp_path / "model.safetensors")  # beside the index
    save_file({"base_model.model.x.lora_A.weight": torch.zeros(2, 2)}, str(tmp_path / "adapter_model.safetensors"))
    assert set(shards) < set(weight_files(tmp_path))
    np.testing.assert_array_equal(qwen3_5.load_hf(str(tmp_path)).lm_head[...], model.lm_head[...])
    os.remove(tmp_path / "model.safetensors")
    os.remove(tmp_path / "model.safetensors.index.json")
    for f in shards[:-1]:
        os.remove(tmp_path / f)
    shutil.copy(tmp_path / "single" / "model.safetensors", tmp_path / "weights.safetensors")
    np.testing.assert_array_equal(qwen3_5.load_hf(str(tmp_path)).lm_head[...], model.lm_head[...])


def multimodal_dict(top, text):
    d = {"model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"],
         "text_config": {**qwen3_5.CONFIGS["demo"].to_hf_dict(), "tie_word_embeddings": text}}
    if top is not None:
        d["tie_word_embeddings"] = top
    return d


@pytest.mark.parametrize("top,text,want", [(True, False, True), (False, True, False), (None, True, False)])
def test_multimodal_ties_by_the_top_level_flag(top, text, want):
    """Qwen3_5ForConditionalGeneration ties by its own config's flag (default false), not text_config's."""
    assert qwen3_5.Qwen3_5Config.from_hf_dict(multimodal_dict(top, text)).tie_word_embeddings is want


def test_text_config_ties_by_its_own_flag():
    d = qwen3_5.CONFIGS["demo"].to_hf_dict()
    assert qwen3_5.Qwen3_5Config.from_hf_dict(d).tie_word_embeddings is True
    d.pop("tie_word_embeddings")
    assert qwen3_5.Qwen3_5Config.from_hf_dict(d).tie_word_embeddings is False


def test_rope_fields_read_as_transformers_reads_them():
    """No theta anywhere: transformers' 1e4; a legacy rope_scaling (or rope_parameters["type"]) sets the
    rope type, so an unsupported one is refused rather than run as plain RoPE."""
    from transformers import Qwen3_5TextConfig

    d = qwen3_5.CONFIGS["demo"].to_hf_dict()
    d.pop("rope_parameters")
    hf = Qwen3_5TextConfig(**{k: v for k, v in d.items() if k not in ("architectures", "model_type")})
    assert qwen3_5.Qwen3_5Config.from_hf_dict(d).rope_theta == hf.rope_parameters["rope_theta"] == 1e4
    d["rope_theta"] = 5e5
    assert qwen3_5.Qwen3_5Config.from_hf_dict(d).rope_theta == 5e5
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
    for bad in ({"rope_scaling": yarn}, {"rope_parameters": {"type": "linear", "factor": 2.0}}):
        with pytest.raises(ValueError, match="unsupported rope_type"):
            qwen3_5.Qwen3_5Config.from_hf_dict({**d, **bad})


@pytest.mark.parametrize("field,value,match", [("hidden_act", "gelu", "unsupported hidden_act 'gelu'"),
                                               ("attention_bias", True, "attention_bias: true")])
def test_config_fields_the_model_does_not_implement_are_refused(field, value, match):
    d = {**qwen3_5.CONFIGS["demo"].to_hf_dict(), field: value}
    with pytest.raises(ValueError, match=match):
        qwen3_5.Qwen3_5Config.from_hf_dict(d)
    assert qwen3_5.Qwen3_5Config.from_hf_dict({**d, "hidden_act": "swish", "attention_bias": False})


def test_tied_checkpoint_that_stores_the_head(tmp_path, hf_checkpoint):
    """Accepted when the head equals the embedding (transformers ties it); a named error otherwise."""
    ckpt = shutil.copytree(hf_checkpoint([L, A], tied=True), str(tmp_path / "ckpt"))
    want = np.asarray(qwen3_5.load_hf(ckpt)(TOKENS))
    file = os.path.join(ckpt, "model.safetensors")
    t = load_file(file)
    t["lm_head.weight"] = t["model.embed_tokens.weight"].clone()
    save_file(t, file, metadata={"format": "pt"})
    np.testing.assert_array_equal(np.asarray(qwen3_5.load_hf(ckpt)(TOKENS)), want)
    t["lm_head.weight"] += 1.0
    save_file(t, file, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"'lm_head.weight' in .* differs from 'model.embed_tokens.weight'"):
        qwen3_5.load_hf(ckpt)


def test_missing_num_hidden_layers_is_named():
    d = qwen3_5.CONFIGS["demo"].to_hf_dict()
    d.pop("num_hidden_layers")
    with pytest.raises(ValueError, match="lacks required field 'num_hidden_layers'"):
        qwen3_5.Qwen3_5Config.from_hf_dict(d)


def test_peft_export_checks_the_rank(tmp_path):
    stem = ("layers", "0", "mlp", "up_proj")
    adapters = {stem + ("kernel_lora_a",): np.zeros((64, 4), np.float32),
                stem + ("kernel_lora_b",): np.zeros((4, 96), np.float32)}
    with pytest.raises(ValueError, match=r"layers\.0\.mlp\.up_proj\.kernel_lora_a.* rank 4 .* rank 8"):
        write_peft(str(tmp_path / "bad"), adapters, LoraSpec(rank=8, alpha=16.0), path_to_hf=qwen3_5.path_to_hf)
    write_peft(str(tmp_path / "ok"), adapters, LoraSpec(rank=4, alpha=8.0), path_to_hf=qwen3_5.path_to_hf)
    assert json.loads((tmp_path / "ok" / "adapter_config.json").read_text())["r"] == 4
    assert load_file(str(tmp_path / "ok" / "adapter_model.safetensors"))[
        "base_model.model.model.layers.0.mlp.up_proj.lora_A.weight"].shape == torch.Size([4, 64])
