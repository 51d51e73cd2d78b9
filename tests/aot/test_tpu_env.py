"""libtpu on a host without TPU chips (prover_jax/tpu_env.py): importing prover_jax gives libtpu a
single-host answer, so JAX starts without libtpu's TPU_WORKER_HOSTNAMES / host-bounds error block; a
configured slice, a host with a chip, or no libtpu leaves the environment alone. Importing prover_jax
also hands libtpu the compiler flags of TPU_COMPILER_FLAGS (FSDP weights gathered whole, not streamed
through windowed-einsum loops), unless the user's LIBTPU_INIT_ARGS names them."""

import importlib.util
import os
import subprocess
import sys

import pytest

from prover_jax import tpu_env

BLOCK = ("TPU_WORKER_HOSTNAMES", "Failed to find host bounds")


def test_single_host_answer_only_when_nothing_says_otherwise():
    env = {}
    assert tpu_env.quiet_without_chips(env, libtpu_installed=True, chip=False)
    assert env == {"TPU_WORKER_HOSTNAMES": "localhost", "TPU_HOST_BOUNDS": "1,1,1"}
    for var in tpu_env.SLICE_VARS:
        env = {var: "x"}
        assert not tpu_env.quiet_without_chips(env, libtpu_installed=True, chip=False) and env == {var: "x"}
    for installed, chip in ((False, False), (True, True)):
        env = {}
        assert not tpu_env.quiet_without_chips(env, libtpu_installed=installed, chip=chip) and env == {}


def test_a_google_pci_device_is_a_chip(tmp_path):
    (tmp_path / "0000:00:04.0").mkdir()
    (tmp_path / "0000:00:04.0" / "vendor").write_text("0x8086\n")
    assert not tpu_env.has_tpu_chip(str(tmp_path)) or tpu_env.glob.glob("/dev/accel*")
    (tmp_path / "0000:00:05.0").mkdir()
    (tmp_path / "0000:00:05.0" / "vendor").write_text("0x1ae0\n")
    assert tpu_env.has_tpu_chip(str(tmp_path))


def test_google_network_and_storage_devices_are_not_chips(tmp_path):
    """A Compute Engine VM's gVNIC (1ae0:0042, a network controller) or a Google storage controller."""
    for name, device, pci_class in (("0000:00:04.0", "0x0042", "0x020000"), ("0000:00:05.0", "0x001f", "0x010802")):
        (tmp_path / name).mkdir()
        for field, value in (("vendor", "0x1ae0"), ("device", device), ("class", pci_class)):
            (tmp_path / name / field).write_text(value + "\n")
    assert not tpu_env.has_tpu_chip(str(tmp_path)) or tpu_env.glob.glob("/dev/accel*")
    (tmp_path / "0000:00:06.0").mkdir()
    for field, value in (("vendor", "0x1ae0"), ("device", "0x0063"), ("class", "0x120000")):
        (tmp_path / "0000:00:06.0" / field).write_text(value + "\n")
    assert tpu_env.has_tpu_chip(str(tmp_path))


def start_jax(code: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPU_") and k != "JAX_PLATFORMS"}
    r = subprocess.run([sys.executable, "-c", code + "; import jax; jax.devices()"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stderr


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="libtpu (the tpu extra) not installed")
@pytest.mark.skipif(tpu_env.has_tpu_chip(), reason="a TPU chip is present")
def test_jax_starts_quietly_after_importing_prover_jax():
    fresh = not os.path.exists("/tmp/libtpu_lockfile")  # libtpu prints its block on a host it has not run on
    bare = start_jax("pass")
    if fresh:  # the block this module removes is there without it
        assert all(b in bare for b in BLOCK), bare[-2000:]
    stderr = start_jax("import prover_jax")
    assert not any(b in stderr for b in BLOCK), stderr[-2000:]


FLAGS = [f"--{k}={v}" for k, v in tpu_env.TPU_COMPILER_FLAGS.items()]


def test_compiler_flags_added_unless_the_user_names_them():
    env = {}
    assert tpu_env.compiler_flags(env, libtpu_version=(0, 0, 42, 1)) == FLAGS
    assert env == {"LIBTPU_INIT_ARGS": " ".join(FLAGS)}
    assert tpu_env.compiler_flags(env, libtpu_version=(0, 0, 42)) == [] and env["LIBTPU_INIT_ARGS"] == " ".join(FLAGS)
    first = next(iter(tpu_env.TPU_COMPILER_FLAGS))
    for mine in (f"--{first}=true", f"--{first}", f"--no{first}"):
        env = {"LIBTPU_INIT_ARGS": f"--xla_other=1 {mine}"}
        assert tpu_env.compiler_flags(env, libtpu_version=(0, 0, 50)) == FLAGS[1:]
        assert env["LIBTPU_INIT_ARGS"] == " ".join([f"--xla_other=1 {mine}", *FLAGS[1:]])
    for version in ((0, 0, 41), (0, 0, 51), (1, 0, 0)):  # libtpu aborts on a flag it does not know
        env = {}
        assert tpu_env.compiler_flags(env, libtpu_version=version) == [] and env == {}


PROBE = """
import prover_jax, numpy as np, jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from prover_jax.aot.chips import parse_slice, slice_devices
from prover_jax.aot.hlo_bytes import bytes_accessed
s = NamedSharding(Mesh(np.array(slice_devices(parse_slice("v6e-8"))), ("fsdp",)), P("fsdp"))
x = jax.ShapeDtypeStruct((8, 4096, 2048), jnp.bfloat16, sharding=s)  # a row per chip
w = jax.ShapeDtypeStruct((2048, 6144), jnp.bfloat16, sharding=s)  # FSDP: sharded on the contracting axis
text = jax.jit(lambda x, w: x @ w, out_shardings=s).lower(x, w).compile().as_text()
print(text.count("collective-permute"), text.count("all-gather"), bytes_accessed(text)["bytes"])
"""


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="libtpu (the tpu extra) not installed")
def test_the_flags_reach_the_tpu_compiler():
    """An FSDP matmul compiled for v6e-8: under prover_jax's flags the weight is all-gathered and
    multiplied once; with the user's LIBTPU_INIT_ARGS turning the windowed einsum back on, the
    compiler's loop of collective-permutes returns and the HBM traffic grows (partial products
    added into the whole output per shard)."""
    if not tpu_env.compiler_flags({}):
        pytest.skip("the installed libtpu is outside LIBTPU_CHECKED")
    base = {k: v for k, v in os.environ.items() if k != "LIBTPU_INIT_ARGS"}
    out = {}
    for name, args in (("ours", None), ("windowed", "--xla_tpu_enable_windowed_einsum_for_all_gather=true")):
        env = dict(base, **({} if args is None else {"LIBTPU_INIT_ARGS": args}))
        r = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        permutes, gathers, hbm = r.stdout.split()[-3:]
        out[name] = int(permutes), int(gathers), float(hbm)
    assert out["ours"][0] == 0 and out["ours"][1] > 0, out
    assert out["windowed"][0] > 0 and out["windowed"][2] > 2 * out["ours"][2], out
