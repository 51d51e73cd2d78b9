"""distributed.keep_host_memory: glibc accepts each of its malloc settings (in a child process: the setting
is process-wide), and training.run.train applies it before anything else. Its effect is a benchmark, not a
test (bench/RESULTS.md, "Host memory kept for reuse"): the page faults a CPU step saves depend on XLA's
allocation pattern, which a small probe does not reproduce from one jax version or flag set to the next."""

import os
import subprocess
import sys

import pytest

from prover_jax import distributed
from prover_jax.training import run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_glibc_takes_the_settings():
    code = "from prover_jax.distributed.runtime import keep_host_memory; print(keep_host_memory())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": ROOT}, check=True).stdout.split()
    assert out[-1] == "True"


def test_train_keeps_host_memory_first(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(distributed, "keep_host_memory", lambda: calls.append("keep") or True)
    monkeypatch.setattr(distributed, "initialize", lambda *a, **k: calls.append("initialize"))

    class Stop(Exception):
        pass

    def no_trainer(*args, **kwargs):
        raise Stop

    monkeypatch.setattr("prover_jax.training.trainer.Trainer", no_trainer)
    with pytest.raises(Stop):
        run.train(None, str(tmp_path))
    assert calls == ["keep", "initialize"]
