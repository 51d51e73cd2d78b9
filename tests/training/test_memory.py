"""The per-device memory estimate: shard arithmetic, the shipped pod configs, the table and the CLI."""

import glob
import importlib.machinery
import math
import os
import subprocess
import sys

import pytest
from absl import flags
from ml_collections import config_flags

from prover_jax.models.qwen3_5 import CONFIGS, abstract_model
from prover_jax.models.qwen3_5.params import _flat_state
from prover_jax.training import memory
from prover_jax.training.config import default_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POD_CONFIGS = sorted(glob.glob(os.path.join(ROOT, "configs", "qwen3_5_*.py")))


def _small(mesh, **over):
    c = default_config()
    c.model.size = "bench-small"
    c.mesh.data, c.mesh.fsdp, c.mesh.tensor = mesh
    c.train.micro_batch_size = 8
    c.rollout.max_concurrent_decodes = 8
    c.rollout.max_target_length = 256
    for k, v in over.items():
        section, name = k.split("__")
        c[section][name] = v
    return c


def _load(path):
    return importlib.machinery.SourceFileLoader(f"cfg_{os.path.basename(path)[:-3]}", path).load_module()


def test_param_shards_add_up_to_the_model():
    cfg = CONFIGS["bench-small"]
    one = memory.estimate(_small((1, 1, 1)))
    assert one["params"] == cfg.param_count() * 4 and one["optimizer"] == 2 * one["params"]
    # On a pure fsdp mesh exactly the parameters with an `embed` axis are split (all dims divide by 4);
    # the others (norms, conv, dt_bias, ...) stay whole on every device.
    flat = _flat_state(abstract_model(cfg)).values()
    replicated = sum(math.prod(v.get_value().shape) for v in flat if "embed" not in v.get_metadata()["axes"])
    four = memory.estimate(_small((1, 4, 1)))
    assert four["params"] * 4 == cfg.param_count() * 4 + 3 * replicated * 4
    assert four["params"] < one["params"] / 3


def test_tensor_axis_shrinks_params_cache_and_activations():
    one = memory.estimate(_small((1, 1, 1)))
    data = memory.estimate(_small((2, 1, 1)))
    tensor = memory.estimate(_small((1, 1, 2)))
    assert data["num_devices"] == tensor["num_devices"] == 2
    for k in ("params", "optimizer", "grads"):  # data replicates parameters, tensor splits them
        assert data[k] == one[k] and tensor[k] < 0.6 * one[k], k
    for k in ("cache", "activations"):  # heads / mlp / vocab over tensor
        assert tensor[k] < one[k], k


def test_terms_follow_the_config():
    base = memory.estimate(_small((1, 1, 1)))
    assert base["reference"] == 0 and base["grads"] == 2 * base["params"]  # accumulating: sum + one
    kl = memory.estimate(_small((1, 1, 1), loss__kl_coef=0.1))
    assert kl["reference"] == base["params"] and kl["total"] == base["total"] + base["params"]
    assert memory.estimate(_small((1, 1, 1), optim__name="sgd"))["optimizer"] == 0
    longer = memory.estimate(_small((1, 1, 1), rollout__max_target_length=512))
    assert longer["cache"] > base["cache"] and longer["activations"] > 2 * base["activations"]
    remat = memory.estimate(_small((1, 1, 1), train__remat=True))
    assert remat["activations"] < base["activations"]
    with pytest.raises(ValueError, match="needs 4 devices"):
        memory.estimate(_small((1, 4, 1)), num_devices=8)


def test_accelerator_names():
    assert memory.parse_accelerator("v6e-8") == ("v6e", 8)
    assert memory.parse_accelerator("v5p-16") == ("v5p", 8)  # TensorCores: two per chip
    assert memory.parse_accelerator("v5litepod-16") == ("v5e", 16)
    assert memory.parse_accelerator("TPU v6 lite") == ("v6e", None)
    assert memory.parse_accelerator("TPU v5 lite") == ("v5e", None)
    assert memory.parse_accelerator("TPU v5") == ("v5p", None)
    r = memory.estimate(_small((1, -1, 1)), num_devices=4, device_kind="TPU v5 lite")
    assert r["mesh"]["fsdp"] == 4 and r["hbm"] == 16 * memory.GIB and r["fits"]
    assert memory.estimate(_small((1, 1, 1)))["fits"] is None  # no accelerator: HBM unknown


def test_every_config_loads():
    paths = [p for p in glob.glob(os.path.join(ROOT, "configs", "*.py"))
             if not os.path.basename(p).startswith("_")]
    assert len(POD_CONFIGS) == 6
    for path in paths:
        assert _load(path).get_config() is not None, path


@pytest.mark.parametrize("path", POD_CONFIGS, ids=os.path.basename)
def test_pod_configs_fit_their_hbm(path):
    module = _load(path)
    assert module.ARGS
    for arg in module.ARGS + (None,):
        c = module.get_config() if arg is None else module.get_config(arg)
        r = memory.estimate(c)
        assert r["device_kind"] in ("v5p", "v6e") and r["fits"], memory.format_table(r)
        assert c.train.micro_batch_size % (r["mesh"]["data"] * r["mesh"]["fsdp"]) == 0
        assert c.rollout.max_concurrent_decodes % (r["mesh"]["data"] * r["mesh"]["fsdp"]) == 0
        assert r["model"] == module.SIZE and c.model.init == "hf" and c.model.dtype == "bfloat16"
        assert c.rollout.groups_per_step * c.rollout.group_size == 128 and c.train.steps == 100
        assert c.rollout.max_turns == c.env.kwargs.max_turns == {"alfworld": 50, "webshop": 15,
                                                                 "searchqa_data": 30}[c.env.name]
        assert (c.credit.method, c.judge.name) == ("prover", "openai")


def test_config_string_through_absl():
    path = next(p for p in POD_CONFIGS if p.endswith("2b_webshop.py"))
    argv = ["prog", f"--config={path}:v5p-8", "--config.train.steps=3"]
    fv = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "", flag_values=fv, sys_argv=argv)
    fv(argv)
    assert fv.config.accelerator == "v5p-8" and fv.config.train.steps == 3
    assert fv.config.mesh.tensor == 2 and fv.config.env.name == "webshop"
    bad = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "", flag_values=bad)
    with pytest.raises(flags.IllegalFlagValueError, match="no layout"):
        bad(["prog", f"--config={path}:v4-8"])


def test_table():
    text = memory.format_table(memory.estimate(_small((1, 2, 1)), device_kind="v6e-2"))
    for word in ("bench-small", "data=1 x fsdp=2 x tensor=1", "params", "optimizer", "grads", "cache",
                 "activations", "total", "hbm", "fits"):
        assert word in text, word


def test_cli_prints_the_table_without_touching_devices(tmp_path):
    cfg = tmp_path / "small.py"
    cfg.write_text("from prover_jax.training.config import default_config\n\n\n"
                   "def get_config(arg='v6e-4'):\n"
                   "    c = default_config()\n    c.model.size = 'bench-small'\n    c.accelerator = arg\n"
                   "    c.rollout.max_target_length = 256\n    return c\n")
    out = subprocess.run([sys.executable, "-m", "prover_jax.training.memory", f"--config={cfg}:v5p-8"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "on v5p-8: 4 devices" in out.stdout and "fits" in out.stdout
    probe = ("import sys; from prover_jax.training import memory; from jax._src import xla_bridge as xb\n"
             "from ml_collections.config_flags.config_flags import _LoadConfigModule as load\n"
             f"memory.estimate(load('c', {str(cfg)!r}).get_config())\n"
             "sys.exit(3 if xb.backends_are_initialized() else 0)")
    assert subprocess.run([sys.executable, "-c", probe], timeout=60, cwd=ROOT).returncode == 0
