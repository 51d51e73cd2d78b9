"""libtpu's start-up on a host without TPU chips.

With the `tpu` extra installed (libtpu, for compiling against a TPU slice on any host), JAX loads libtpu
when it starts its backends. On a host with no TPU chip, libtpu then looks for the slice's accelerator
type and worker hostnames, finds neither, and prints an error block (TPU_WORKER_HOSTNAMES, "Failed to
find host bounds") before falling back to the CPU. `quiet_without_chips` gives it a single-host answer
first: TPU_WORKER_HOSTNAMES=localhost, TPU_HOST_BOUNDS=1,1,1. It changes nothing when libtpu is not
installed, when a TPU chip is present, or when any of those variables (or TPU_ACCELERATOR_TYPE) is set.
Compiling for a TPU topology (`prover-aot`) is unaffected: the topology names its own hosts.

`compiler_flags` adds the TPU compiler flags of TPU_COMPILER_FLAGS to LIBTPU_INIT_ARGS, for the
libtpu versions they were checked against (libtpu aborts on a flag it does not know); a flag the
user's LIBTPU_INIT_ARGS already names keeps the user's value. Both run when prover_jax is imported.
"""

from __future__ import annotations

import glob
import importlib.util
import os
from collections.abc import MutableMapping

GOOGLE_PCI_VENDOR = "0x1ae0"
NOT_ACCELERATOR_CLASSES = ("0x01", "0x02")  # PCI base classes: mass storage, network controller
SLICE_VARS = ("TPU_WORKER_HOSTNAMES", "TPU_HOST_BOUNDS", "TPU_ACCELERATOR_TYPE", "TPU_PROCESS_ADDRESSES")
SINGLE_HOST = {"TPU_WORKER_HOSTNAMES": "localhost", "TPU_HOST_BOUNDS": "1,1,1"}

# FSDP gathers a weight whole before its matmul. XLA:TPU's default instead streams the shards through a
# windowed-einsum loop; with the weight sharded on the contracting axis, each shard's partial product is
# added into the full [rows, out] result in HBM. 2B v6e-8 train step: 5.34 -> 3.81 TB of HBM traffic
# per chip, estimated MFU 25.6% -> 35.9% (bench/RESULTS.md, "FSDP gathers whole").
TPU_COMPILER_FLAGS = {
    "xla_tpu_enable_windowed_einsum_for_all_gather": "false",
    "xla_tpu_enable_windowed_einsum_for_reduce_scatter": "false",
}
LIBTPU_CHECKED = ((0, 0, 42), (0, 0, 50))  # libtpu versions (first three parts) known to accept them


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def has_tpu_chip(pci_root: str = "/sys/bus/pci/devices") -> bool:
    """Whether a PCI device of Google's vendor id that is not a network or storage controller (a TPU
    chip; Compute Engine VMs without one carry Google's virtual NIC, gVNIC) is visible, or /dev/accel*
    exists."""
    for vendor in glob.glob(os.path.join(pci_root, "*", "vendor")):
        if _read(vendor) != GOOGLE_PCI_VENDOR:
            continue
        pci_class = _read(os.path.join(os.path.dirname(vendor), "class")) or ""
        if not pci_class.startswith(NOT_ACCELERATOR_CLASSES):
            return True
    return bool(glob.glob("/dev/accel*"))


def quiet_without_chips(environ: MutableMapping[str, str] = os.environ, libtpu_installed: bool | None = None,
                        chip: bool | None = None) -> bool:
    """Sets SINGLE_HOST in `environ` when libtpu is installed, no TPU chip is visible and no slice
    variable is set; returns whether it did. Call before JAX starts its backends."""
    if libtpu_installed is None:
        libtpu_installed = importlib.util.find_spec("libtpu") is not None
    if not libtpu_installed or any(v in environ for v in SLICE_VARS):
        return False
    if chip if chip is not None else has_tpu_chip():
        return False
    environ.update(SINGLE_HOST)
    return True


def _libtpu_version() -> tuple[int, ...] | None:
    try:
        from importlib.metadata import PackageNotFoundError, version
        return tuple(int(p) for p in version("libtpu").split(".")[:3])
    except (PackageNotFoundError, ValueError):
        return None


def _named(args: str, flag: str) -> bool:
    return any(a.lstrip("-").split("=", 1)[0] in (flag, "no" + flag) for a in args.split())


def compiler_flags(environ: MutableMapping[str, str] = os.environ,
                   libtpu_version: tuple[int, ...] | None = None) -> list[str]:
    """Appends each TPU_COMPILER_FLAGS entry that LIBTPU_INIT_ARGS does not name to it, when the
    installed libtpu's version lies within LIBTPU_CHECKED; returns the flags added. Call before JAX
    starts its backends."""
    v = _libtpu_version() if libtpu_version is None else libtpu_version
    if v is None or not LIBTPU_CHECKED[0] <= v[:3] <= LIBTPU_CHECKED[1]:
        return []
    args = environ.get("LIBTPU_INIT_ARGS", "")
    added = [f"--{name}={value}" for name, value in TPU_COMPILER_FLAGS.items() if not _named(args, name)]
    if added:
        environ["LIBTPU_INIT_ARGS"] = " ".join([args, *added]).strip()
    return added
