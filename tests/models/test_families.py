"""The model-family table: Qwen3.5 found by name, by config.json's model_type and by config class; Qwen3 and
a family registered in a test helper (helpers.standin_family) found from a checkpoint folder's config.json
and round-tripped by the family-neutral load_hf / save_hf; unknown names, model_types and clashing
registrations fail naming the known families."""

import dataclasses
import json

import numpy as np
import pytest
from flax import nnx

from helpers.standin_family import MODEL_TYPE, STANDIN, StandInConfig, tiny_standin
from helpers.tiny import tiny_model
from prover_jax.models import (DEFAULT_FAMILY, family, family_for, known_families, load_hf, qwen3, qwen3_5,
                               read_config, register_family, save_hf)


def params_equal(a, b):
    pa, pb = nnx.to_flat_state(nnx.state(a, nnx.Param)), nnx.to_flat_state(nnx.state(b, nnx.Param))
    assert [p for p, _ in pa] == [p for p, _ in pb]
    for (_, x), (_, y) in zip(pa, pb):
        np.testing.assert_array_equal(np.asarray(x.get_value()), np.asarray(y.get_value()))


def test_qwen3_5_is_the_default_family():
    fam = family(DEFAULT_FAMILY)
    assert fam.name == "qwen3_5" and fam.configs is qwen3_5.CONFIGS and fam.model_class is qwen3_5.Qwen3_5
    assert fam.load_hf is qwen3_5.load_hf and fam.save_hf is qwen3_5.save_hf
    assert family_for({"model_type": "qwen3_5_text"}) is fam and family_for({"model_type": "qwen3_5"}) is fam
    assert family_for(qwen3_5.CONFIGS["9B"]) is fam and fam.config("demo") is qwen3_5.CONFIGS["demo"]
    assert [f.name for f in known_families()] == ["qwen3", "qwen3_5", "standin"]
    assert qwen3_5.CONFIGS["9B"].full_attention_layers == 8 and qwen3_5.CONFIGS["demo"].full_attention_layers == 1


def test_each_family_is_found_from_its_folder_and_round_trips(tmp_path):
    tiny_qwen3 = qwen3.Qwen3(qwen3.CONFIGS["demo"].replace(vocab_size=64), rngs=nnx.Rngs(2))
    nets = ((tiny_model(), family("qwen3_5")), (tiny_standin(seed=1), STANDIN), (tiny_qwen3, family("qwen3")))
    for net, fam in nets:
        out = str(tmp_path / fam.name)
        save_hf(net, out)
        with open(f"{out}/config.json") as f:
            assert json.load(f)["model_type"] in fam.model_types
        assert family_for(out) is fam and family_for(net.config) is fam
        got_fam, cfg = read_config(out)
        assert got_fam is fam and type(cfg) is type(net.config) and cfg.to_hf_dict() == net.config.to_hf_dict()
        back = load_hf(out)
        assert type(back.config) is fam.config_class
        params_equal(back, net)
    assert type(read_config(str(tmp_path / "standin"))[1]) is StandInConfig


def test_unknown_names_and_model_types_fail_naming_the_known_families(tmp_path):
    with pytest.raises(ValueError, match=r"unknown model family 'llama'; known: qwen3, qwen3_5, standin"):
        family("llama")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ValueError, match=r"unknown model_type 'llama' in .*known: qwen3 \(model_type qwen3\), "
                                         r"qwen3_5 \(model_type qwen3_5_text / qwen3_5\), standin \(model_type "
                                         r"standin_text\)"):
        family_for(str(tmp_path))
    with pytest.raises(ValueError, match="unknown model_type 'llama'"):
        load_hf(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no config.json"):
        family_for(str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match=r"no model family has config class dict.*Qwen3_5Config"):
        family_for(type("dict", (), {})())
    with pytest.raises(ValueError, match=r"family 'standin' has no size 'huge'; known: tiny"):
        STANDIN.config("huge")


def test_a_family_cannot_take_a_registered_name_or_model_type():
    with pytest.raises(ValueError, match=r"model_type \['standin_text'\] is read by 'standin'"):
        register_family(dataclasses.replace(STANDIN, name="other"))
    with pytest.raises(ValueError, match="'standin' is registered already"):
        register_family(dataclasses.replace(STANDIN, model_types=(MODEL_TYPE, "x")))
    assert register_family(STANDIN) is STANDIN  # the same record again (a module reloaded)
