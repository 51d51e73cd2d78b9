"""Sharded forward over 8 simulated CPU devices equals the single-device forward; params are sharded."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

from prover_jax import sharding
from prover_jax.models import qwen3_5

L, A = "linear_attention", "full_attention"
pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")


@pytest.fixture(scope="module")
def ckpt(hf_checkpoint):
    return hf_checkpoint([L, L, L, A], tied=False)


@pytest.mark.parametrize("shape", [(1, 4, 2), (1, 2, 4), (2, 2, 2), (1, 8, 1)])
def test_sharded_forward_equals_single_device(ckpt, shape):
    # A fresh process per mesh, so the 8-device setting holds whatever jax state the suite has.
    script = os.path.join(os.path.dirname(__file__), "sharded_check.py")
    proc = subprocess.run([sys.executable, script, ckpt, *map(str, shape)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"mesh {shape}: max |dlogit| sharded vs single = {res['max_diff']:.2e}")
    assert res["max_diff"] <= 1e-5
    fsdp, tensor = shape[1], shape[2]
    assert res["up_spec"] == ["fsdp" if fsdp > 1 else None, "tensor" if tensor > 1 else None]
    assert res["up_shard_shape"] == [64 // fsdp, 96 // tensor]
    assert res["embed_shard_frac"] == 1 / (fsdp * tensor)
    assert res["num_devices"] == 8


def test_param_shardings_from_abstract_model_allocate_nothing():
    cfg = qwen3_5.CONFIGS["9B"]
    mesh = sharding.make_mesh((1, 4, 2))
    abstract = qwen3_5.abstract_model(cfg, param_dtype=jnp.bfloat16)
    shard = qwen3_5.param_shardings(abstract, mesh)
    assert shard["embed_tokens"].spec == P("fsdp", "tensor") or shard["embed_tokens"].spec == P(
        "tensor", "fsdp")
    assert shard["layers.3.self_attn.q_proj.kernel"].spec == P("fsdp", "tensor")
    assert shard["layers.0.linear_attn.A_log"].spec == P("tensor")


def test_mesh_errors():
    with pytest.raises(ValueError, match="needs 16 devices"):
        sharding.make_mesh((2, 4, 2))
    with pytest.raises(ValueError, match="at most one axis may be -1"):
        sharding.make_mesh((-1, -1, 1))
    with pytest.raises(ValueError, match="unknown mesh axes"):
        sharding.make_mesh({"model": 8})


def test_mesh_axis_of_zero_or_below_minus_one_is_named():
    for shape, axis in (((0, -1, 1), "data=0"), ((-2, -1, 1), "data=-2"), ((1, 8, -3), "tensor=-3")):
        with pytest.raises(ValueError, match=axis):  # not a ZeroDivisionError or jax's reshape error
            sharding.make_mesh(shape)


def test_logical_axes_longer_than_the_array_are_named():
    mesh = sharding.make_mesh((1, 4, 2))
    with pytest.raises(ValueError, match=r"name 4 dimensions; the array has shape \(8, 16, 2\)"):
        sharding.named_sharding(("cache_batch", "cache_length", "cache_heads", "head_dim"), mesh, (8, 16, 2))
