"""prover-convert: HF -> orbax -> HF is exact, and the restored model computes the same logits."""

import os
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.torch import load_file

from prover_jax.convert import load_checkpoint, save_checkpoint
from prover_jax.models import qwen3_5

from helpers import hf as F

L, A = "linear_attention", "full_attention"


def test_cli_round_trip(tmp_path):
    import torch

    src, ckpt, out = tmp_path / "hf", tmp_path / "ckpt", tmp_path / "back"
    F.make_text_checkpoint(src, [L, L, L, A], tied=True, dtype=torch.bfloat16)
    (src / "tokenizer_config.json").write_text("{}")
    exe = os.path.join(os.path.dirname(sys.executable), "prover-convert")
    for args in ([f"--hf_dir={src}", f"--out={ckpt}"], [f"--ckpt={ckpt}", f"--out_hf={out}"]):
        proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
    a, b = load_file(src / "model.safetensors"), load_file(out / "model.safetensors")
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
    assert (out / "tokenizer_config.json").exists()


def test_restored_model_matches_and_errors(tmp_path, hf_checkpoint):
    ckpt = tmp_path / "ckpt"
    model = qwen3_5.load_hf(hf_checkpoint([L, A], tied=False))
    save_checkpoint(model, str(ckpt))
    back = load_checkpoint(str(ckpt))
    tokens = jnp.asarray(np.arange(30)[None] % F.TINY["vocab_size"], jnp.int32)
    np.testing.assert_array_equal(np.asarray(back(tokens)), np.asarray(model(tokens)))
    with pytest.raises(FileExistsError, match="already holds a checkpoint"):
        save_checkpoint(model, str(ckpt))
    with pytest.raises(FileNotFoundError, match="is not a prover checkpoint"):
        load_checkpoint(str(tmp_path / "nothing"))


def test_cli_bad_paths_are_one_line(tmp_path):
    cmd = [sys.executable, "-m", "prover_jax.convert.cli"]
    missing = tmp_path / "missing"
    for args, flag in (([f"--hf_dir={missing}", f"--out={tmp_path / 'o'}"], str(missing)),
                       ([f"--ckpt={missing}", f"--out_hf={tmp_path / 'o'}"], str(missing)),
                       ([f"--ckpt={missing}", f"--out_hf={tmp_path / 'o'}", "--dtype=bfloat17"], "--dtype")):
        proc = subprocess.run(cmd + args, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert flag in proc.stderr.strip().splitlines()[-1], proc.stderr
    assert not (tmp_path / "o").exists()
