"""Run in a fresh process: sharded forward on a (data, fsdp, tensor) mesh of 8 CPU devices vs single
device. Prints one JSON line. Usage: python sharded_check.py CKPT DATA FSDP TENSOR"""

import json
import os
import sys

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"  # last wins
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from prover_jax import sharding  # noqa: E402
from prover_jax.models import qwen3_5  # noqa: E402


def main(ckpt, shape):
    tokens = jnp.asarray(np.random.RandomState(0).randint(0, 96, (8, 70)), jnp.int32)
    mesh = sharding.make_mesh(shape)
    model = qwen3_5.load_hf(ckpt, mesh=mesh)
    data = sharding.named_sharding(("batch", "length"), mesh, tokens.shape)
    fwd = nnx.jit(lambda m, t: m(t), in_shardings=(None, data))
    out = np.asarray(fwd(model, jax.device_put(tokens, data)))
    ref = np.asarray(qwen3_5.load_hf(ckpt)(tokens))
    up = model.layers[0].mlp.up_proj.kernel.get_value()
    emb = model.embed_tokens.get_value()
    print(json.dumps({
        "max_diff": float(np.abs(out - ref).max()),
        "up_spec": [s for s in tuple(up.sharding.spec)] + [None] * (2 - len(up.sharding.spec)),
        "up_shard_shape": list(up.addressable_shards[0].data.shape),
        "embed_shard_frac": emb.addressable_shards[0].data.size / emb.size,
        "num_devices": len(up.sharding.device_set),
    }))


if __name__ == "__main__":
    main(sys.argv[1], tuple(int(x) for x in sys.argv[2:5]))
