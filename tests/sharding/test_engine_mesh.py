"""The engine's mesh and the weight copy onto it (distributed.arrays) on 8 simulated CPU devices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prover_jax import distributed as dist
from prover_jax import sharding

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")


@pytest.mark.parametrize("train,tensor", [((1, 2, 4), 4), ((1, 2, -1), -1), ((1, 4, 2), -1)])
def test_engine_mesh_keeps_the_train_tensor_axis(train, tensor):
    """A config's tensor = -1 ("the devices the others leave") splits the engine's weights over the
    train mesh's tensor axis, as the resolved size does, instead of copying them whole onto every device."""
    mesh = sharding.make_mesh(train)
    t = mesh.shape["tensor"]
    emesh = dist.engine_mesh(mesh, tensor)
    assert dict(emesh.shape) == {"data": 8 // t, "fsdp": 1, "tensor": t}
    x = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    params = {"w": sharding.place(x, sharding.named_sharding(("embed", "mlp"), mesh, x.shape))}
    out = dist.WeightSync(params, mesh, emesh, dtype=jnp.bfloat16, tensor=tensor)(params)["w"]
    assert out.addressable_shards[0].data.shape == (16, 8 // t)
    np.testing.assert_array_equal(np.asarray(out, np.float32), x)
