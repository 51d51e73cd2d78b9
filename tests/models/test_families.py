"""The model-family table: Qwen3.5 (the default) and Qwen3, two real families, found by name, by config.json's
model_type and by config class, round-tripped by the family-neutral load_hf / save_hf; unknown names,
model_types and clashing registrations fail naming the known families. Everything outside models/ reaches a
family through its record alone: LoRA (targets, parameter counts, PEFT names), the cost model prover-aot and
the GPU memory estimate read, a model built with its runtime, a random policy of model.family, and the
trainer's programs traced for a Qwen3 policy."""

import dataclasses
import json
import math

import jax
import numpy as np
import pytest
from flax import nnx

from helpers.tiny import tiny_model
from prover_jax.models import (DEFAULT_FAMILY, family, family_for, known_families, load_hf, qwen3, qwen3_5,
                               read_config, register_family, save_hf)
from prover_jax.models.common.layers import Linear

NAMES = ("qwen3", "qwen3_5")


def params_equal(a, b):
    pa, pb = nnx.to_flat_state(nnx.state(a, nnx.Param)), nnx.to_flat_state(nnx.state(b, nnx.Param))
    assert [p for p, _ in pa] == [p for p, _ in pb]
    for (_, x), (_, y) in zip(pa, pb):
        np.testing.assert_array_equal(np.asarray(x.get_value()), np.asarray(y.get_value()))


def tiny_qwen3(seed: int = 2) -> qwen3.Qwen3:
    return qwen3.Qwen3(qwen3.CONFIGS["demo"].replace(vocab_size=64), rngs=nnx.Rngs(seed))


def test_qwen3_5_is_the_default_family():
    fam = family(DEFAULT_FAMILY)
    assert fam.name == "qwen3_5" and fam.configs is qwen3_5.CONFIGS and fam.model_class is qwen3_5.Qwen3_5
    assert fam.load_hf is qwen3_5.load_hf and fam.save_hf is qwen3_5.save_hf
    assert family_for({"model_type": "qwen3_5_text"}) is fam and family_for({"model_type": "qwen3_5"}) is fam
    assert family_for(qwen3_5.CONFIGS["9B"]) is fam and fam.config("demo") is qwen3_5.CONFIGS["demo"]
    assert [f.name for f in known_families()] == list(NAMES)
    assert qwen3_5.CONFIGS["9B"].full_attention_layers == 8 and qwen3_5.CONFIGS["demo"].full_attention_layers == 1
    q3 = family("qwen3")
    assert family_for(qwen3.CONFIGS["8B"]) is q3 and family_for({"model_type": "qwen3"}) is q3
    assert not issubclass(q3.config_class, fam.config_class) and q3.model_class is qwen3.Qwen3


def test_each_family_is_found_from_its_folder_and_round_trips(tmp_path):
    for net, fam in ((tiny_model(), family("qwen3_5")), (tiny_qwen3(), family("qwen3"))):
        out = str(tmp_path / fam.name)
        save_hf(net, out)
        with open(f"{out}/config.json") as f:
            assert json.load(f)["model_type"] in fam.model_types
        assert family_for(out) is fam and family_for(net.config) is fam
        got_fam, cfg = read_config(out)
        assert got_fam is fam and type(cfg) is type(net.config) and cfg.to_hf_dict() == net.config.to_hf_dict()
        runtime = fam.resolve_runtime("cpu", scan_layers=True, remat="full")
        back = load_hf(out, runtime=runtime)
        assert type(back.config) is fam.config_class and back.runtime == runtime
        params_equal(back, net)


def test_unknown_names_and_model_types_fail_naming_the_known_families(tmp_path):
    with pytest.raises(ValueError, match=r"unknown model family 'llama'; known: qwen3, qwen3_5"):
        family("llama")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ValueError, match=r"unknown model_type 'llama' in .*known: qwen3 \(model_type qwen3\), "
                                         r"qwen3_5 \(model_type qwen3_5_text / qwen3_5\)"):
        family_for(str(tmp_path))
    with pytest.raises(ValueError, match="unknown model_type 'llama'"):
        load_hf(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no config.json"):
        family_for(str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match=r"no model family has config class dict.*Qwen3_5Config"):
        family_for(type("dict", (), {})())
    with pytest.raises(ValueError, match=r"family 'qwen3' has no size 'huge'; known: 0.6B, 1.7B"):
        family("qwen3").config("huge")


def test_a_family_cannot_take_a_registered_name_or_model_type():
    q3 = family("qwen3")
    with pytest.raises(ValueError, match=r"model_type \['qwen3'\] is read by 'qwen3'"):
        register_family(dataclasses.replace(q3, name="other"))
    with pytest.raises(ValueError, match="'qwen3' is registered already"):
        register_family(dataclasses.replace(q3, model_types=("qwen3", "x")))
    assert register_family(q3) is q3  # the same record again (a module reloaded)


def linear_kernels(abstract, names) -> list[tuple[int, int]]:
    """Kernel shapes of the Linear modules named in `names`."""
    return [tuple(mod.kernel.shape) for path, mod in nnx.iter_graph(abstract)
            if isinstance(mod, Linear) and path and str(path[-1]) in names]


@pytest.mark.parametrize("name", NAMES)
def test_lora_the_cost_model_and_the_runtime_come_from_the_record(name):
    """LoRA, prover-aot's flops, the GPU memory estimate and a model with its runtime, for either family,
    through `family(name)` and code that names no family."""
    from prover_jax.aot import gpu_memory, programs
    from prover_jax.models.lora import DEFAULT_TARGETS, LoraSpec, apply_lora, known_targets, lora_param_count

    fam = family(name)
    cfg = fam.config("demo")
    runtime = fam.resolve_runtime("cpu", scan_layers=True, remat="dots")
    abstract = fam.abstract_model(cfg, runtime=runtime)
    assert abstract.runtime == runtime and type(abstract) is fam.model_class
    assert nnx.merge(*nnx.split(abstract)).runtime == runtime  # part of the graph

    # LoRA: every named Linear of the family, rank x (in + out) each; PEFT names by the family's table
    assert set(fam.lora_targets) <= set(known_targets())
    for targets in (fam.lora_targets, DEFAULT_TARGETS):
        kernels = linear_kernels(abstract, targets)
        assert kernels and lora_param_count(cfg, LoraSpec(4, 8.0, targets)) == sum(4 * (i + o) for i, o in kernels)
    assert fam.path_to_hf("layers.0.mlp.up_proj.kernel") == ("model.layers.0.mlp.up_proj.weight", "T")
    with pytest.raises(ValueError, match=f"name no module of a {name} model"):
        apply_lora(fam.model_class(cfg, rngs=nnx.Rngs(0)), LoraSpec(4, 8.0, ("nothing",)))
    lm = apply_lora(fam.model_class(cfg, rngs=nnx.Rngs(0), runtime=runtime), LoraSpec(2, 4.0, fam.lora_targets))
    assert lm.runtime == runtime  # qwix adapts a clone: the runtime given at construction stays

    # the cost model: prover-aot's flops and the GPU estimate, no Gated DeltaNet sizes asked of Qwen3
    full = cfg.full_attention_layers * 4.0 * cfg.num_attention_heads * cfg.head_dim * 100
    assert programs.full_attention_flops_per_token(cfg, 100) == fam.full_attention_flops_per_token(cfg, 100) == full
    extra = programs.attention_flops_per_token(cfg, 100) - full
    assert extra == 0 if name == "qwen3" else extra > 0
    weights = sum(math.prod(s) for s in linear_kernels(abstract, fam.lora_targets))
    head = cfg.vocab_size * cfg.hidden_size
    matmul = programs.matmul_params(cfg)  # every Linear and the (tied) head; Qwen3.5's conv weights too
    assert matmul == weights + head if name == "qwen3" else matmul > weights + head
    engine = gpu_memory.engine_bytes(cfg, slots_per_device=4, length=256)
    kv = 4 * 256 * cfg.full_attention_layers * 2 * cfg.num_key_value_heads * cfg.head_dim * 2
    assert engine["kv"] == kv and ("delta_state" in engine) == (name == "qwen3_5")
    assert engine["total"] == pytest.approx(sum(v for k, v in engine.items() if k != "total"))
    train = gpu_memory.train_step_bytes(cfg, shards=1, rows_per_device=2, length=256, logprob_chunk=64)
    assert train["block"] > 0 and train["total"] > train["state"] > 0


def test_a_random_policy_of_model_family(tmp_path):
    """model.family picks the family of a random policy (no config.json): its named size, built with the
    run's runtime; unknown families and sizes are one error naming what there is."""
    from prover_jax.sharding import make_mesh
    from prover_jax.training import build
    from prover_jax.training.config import default_config

    c = default_config()
    c.model.family, c.model.size = "qwen3", "demo"
    fam, cfg = build.architecture(c)
    assert fam is family("qwen3") and cfg is qwen3.CONFIGS["demo"]
    mesh = make_mesh((1, 1, 1), devices=jax.devices()[:1])
    runtime = build.model_runtime(c, mesh)
    assert isinstance(runtime, fam.runtime_class) and runtime == build.model_runtime(c, platform="cpu")
    net = build.model(c, mesh, tok=["t"] * 10)
    assert type(net) is qwen3.Qwen3 and net.runtime == runtime
    c.model.family = "llama"
    with pytest.raises(ValueError, match=r"model.family: unknown model family 'llama'; known: qwen3, qwen3_5"):
        build.architecture(c)
    c.model.family, c.model.size = "qwen3", "2B"
    with pytest.raises(ValueError, match=r"model.size '2B' is not a size of model family 'qwen3' .*sizes: 0.6B, "):
        build.architecture(c)


def test_a_qwen3_policy_s_programs_trace(tmp_path):
    """prover-aot's train step and engine decode step for a tiny Qwen3 HF folder (config.json only),
    traced and lowered for this host's 8 CPU devices: the code that builds them names no family."""
    from helpers.aot_config import aot_config
    from prover_jax.aot.programs import programs

    cfg = qwen3.CONFIGS["demo"].replace(vocab_size=256)
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_hf_dict()))
    c = aot_config(str(tmp_path), (1, 8, 1))
    c.model.lora.rank = 4
    progs = programs(c, jax.devices()[:8], ("train_step", "generate"))
    assert [p.fn for p in progs] == ["train_step", "generate"]
    for p in progs:
        p.jitted.trace(*p.args).lower()
        assert p.model_flops > 0
