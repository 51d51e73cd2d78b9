"""libtpu on a host without TPU chips (prover_jax/tpu_env.py): importing prover_jax gives libtpu a
single-host answer, so JAX starts without libtpu's TPU_WORKER_HOSTNAMES / host-bounds error block; a
configured slice, a host with a chip, or no libtpu leaves the environment alone."""

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
