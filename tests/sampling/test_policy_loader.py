"""load_policy: the model, tokenizer and EOS ids of an HF folder or a prover checkpoint of any registered
family (Qwen3 included, found by its config.json alone). The one EOS
rule (models.hf_folder.eos_ids) gives, on the test tokenizers, the ids the trainer's, prover-generate's
and prover-serve's rules gave."""

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from helpers.hf import word_tokenizer
from helpers.serving import EOS_ID, save_tokenizer
from helpers.tiny import tiny_config, tiny_model
from prover_jax.convert import save_checkpoint
from prover_jax.models import family, load_hf, qwen3, save_hf
from prover_jax.models.hf_folder import IM_END, eos_ids, generation_eos_ids, load_tokenizer
from prover_jax.sampling.loader import PolicyFolder, load_policy


def params(model):
    return {p: np.asarray(v.get_value()) for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def tiny_qwen3(seed: int = 0) -> qwen3.Qwen3:
    return qwen3.Qwen3(qwen3.CONFIGS["demo"].replace(vocab_size=64, eos_token_id=5), rngs=nnx.Rngs(seed))


@pytest.mark.parametrize("name", ["qwen3_5", "qwen3"])
def test_both_checkpoint_forms_of_a_family_load(tmp_path, name):
    fam = family(name)
    net = tiny_qwen3(seed=2) if name == "qwen3" else tiny_model(tiny_config(eos_token_id=5), seed=2)
    hf = str(tmp_path / "hf")
    save_hf(net, hf)
    save_tokenizer(hf)
    ckpt = str(tmp_path / "ckpt")
    save_checkpoint(load_hf(hf), ckpt)  # copies the tokenizer files
    for path in (hf, ckpt):
        model, tok, eos = load_policy(path, jnp.float32)
        assert type(model.config) is fam.config_class and model.config.to_hf_dict() == net.config.to_hf_dict()
        want = params(net)
        assert {p: x.tolist() for p, x in params(model).items()} == {p: x.tolist() for p, x in want.items()}
        assert tok.convert_tokens_to_ids(IM_END) == EOS_ID and eos == (5, EOS_ID)
    model, _, _ = load_policy(ckpt, jnp.bfloat16, compute_dtype=jnp.float32)
    assert model.embed_tokens.get_value().dtype == jnp.bfloat16


def test_a_folder_without_weights_or_tokenizer(tmp_path):
    save_hf(tiny_qwen3(), str(tmp_path))
    os.remove(tmp_path / "model.safetensors")
    folder = PolicyFolder.open(str(tmp_path))
    assert folder.family is family("qwen3") and folder.tokenizer is None
    assert "no tokenizer files" in folder.tokenizer_problem
    assert folder.eos_ids() == (5,)
    with pytest.raises(FileNotFoundError, match=f"cannot load model {tmp_path}: no \\*.safetensors"):
        folder.load_model(jnp.float32)
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_policy(str(tmp_path / "nowhere"), jnp.float32)


def previous_rules(cfg, tok, folder):
    """The three rules `eos_ids` replaced: {"trainer", "generate", "serve": sorted ids}."""
    vocab = tok.get_vocab()
    trainer = set(cfg.eos_ids) | ({tok.convert_tokens_to_ids(IM_END)} if IM_END in vocab else set())
    generate = set(cfg.eos_ids) | set(generation_eos_ids(folder))
    serve = generate | ({tok.eos_token_id} if tok.eos_token_id is not None else set())
    return {k: tuple(sorted(v)) for k, v in dict(trainer=trainer, generate=generate, serve=serve).items()}


def test_one_eos_rule(tmp_path, household_tokenizer):
    # prover-serve's test folder: config, generation_config and the tokenizer all say <|im_end|>
    serve_dir = tmp_path / "serve"
    tok = save_tokenizer(str(serve_dir))
    (serve_dir / "generation_config.json").write_text(json.dumps({"eos_token_id": [EOS_ID]}))
    cfg = tiny_config(eos_token_id=EOS_ID)
    old = previous_rules(cfg, tok, str(serve_dir))
    assert set(old.values()) == {eos_ids(cfg, tok, str(serve_dir))} == {(EOS_ID,)}
    # prover-generate's: <eos> (1) in config.json, 1 and 7 in generation_config.json, no <|im_end|>
    gen_dir = tmp_path / "generate"
    gen_dir.mkdir()
    word_tokenizer(str(gen_dir))
    (gen_dir / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 7]}))
    tok, _ = load_tokenizer(str(gen_dir))  # as prover-generate gets it
    cfg = tiny_config(eos_token_id=1)
    old = previous_rules(cfg, tok, str(gen_dir))
    assert eos_ids(cfg, tok, str(gen_dir)) == old["generate"] == old["serve"] == (1, 7)
    assert old["trainer"] == (1,)  # the trainer's rule read no generation_config.json
    # the trainer's: a tokenizer trained on env text (<|im_end|> = 2 = its eos) and the demo size
    cfg = family("qwen3_5").config("demo")
    old = previous_rules(cfg, household_tokenizer, str(tmp_path / "none"))
    assert set(old.values()) == {eos_ids(cfg, household_tokenizer)} == {(2,)}
    assert eos_ids(tiny_config(eos_token_id=None), household_tokenizer) == (2,)


def test_unreadable_generation_config(tmp_path):
    (tmp_path / "generation_config.json").write_text("{")
    with pytest.raises(ValueError, match="cannot read .*generation_config.json"):
        eos_ids(tiny_config(), None, str(tmp_path))


@pytest.mark.parametrize("init", ["hf", "checkpoint"])
def test_training_loads_either_form_in_the_configured_dtypes(tmp_path, init):
    """model.init=hf and =checkpoint both give params in model.param_dtype computing in model.dtype
    (a checkpoint used to load as fp32 computing in fp32 whatever the config said)."""
    from prover_jax.training import build
    from prover_jax.training.config import default_config
    net = tiny_model(tiny_config(eos_token_id=5), seed=2)
    hf, ckpt = str(tmp_path / "hf"), str(tmp_path / "ckpt")
    save_hf(net, hf)
    save_tokenizer(hf)
    save_checkpoint(load_hf(hf), ckpt)
    c = default_config()
    c.model.init, c.model.path = init, hf if init == "hf" else ckpt
    for pdtype, dtype in (("float32", "float32"), ("float32", "bfloat16"), ("bfloat16", "bfloat16")):
        c.model.param_dtype, c.model.dtype = pdtype, dtype
        model = build.model(c, None, None)
        assert model.embed_tokens.get_value().dtype == jnp.dtype(pdtype) and model.dtype == jnp.dtype(dtype)
