"""bench/accelerator.py --dry_run (tiny model, CPU) runs every part and prints every JSON field, so the
script cannot rot between the runs on a GPU; the bytes a decode step reads are the engine's weights and
caches as prover_jax.aot.gpu_memory counts them."""

import ast
import json
import os
import subprocess
import sys

from prover_jax.aot.gpu_memory import engine_bytes
from prover_jax.models import qwen3_5

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench", "accelerator.py")


def dry_run_model():
    """The --dry_run model: bench/accelerator.py's TINY dimensions (read from the file), 3 linear
    attention layers then a full one."""
    tree = ast.parse(open(BENCH).read())
    call = next(n.value for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "TINY")
    dims = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    return qwen3_5.Qwen3_5Config(layer_types=(qwen3_5.LINEAR,) * 3 + (qwen3_5.FULL,), **dims)


def test_accelerator_dry_run(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, BENCH, "--dry_run",
                          f"--workdir={tmp_path}"], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    by = {}
    for r in rows:
        assert {"device", "platform", "chip", "bench"} <= set(r)
        by.setdefault(r["bench"], []).append(r)
    assert [r["size"] for r in by["train"]] == ["tiny"]
    assert {"step_s", "tokens_per_s", "model_flops", "mfu", "attention"} <= set(by["train"][0])
    assert by["train"][0]["tokens_per_s"] > 0 and by["train"][0]["mfu"] is None  # CPU: no chip entry
    assert [r["batch"] for r in by["decode"]] == [4, 8]
    cfg = dry_run_model()
    for r in by["decode"]:
        assert {"step_ms", "tokens_per_s", "floor_tokens_per_s", "vs_floor", "bytes_per_step"} <= set(r)
        # bf16 weights + KV caches + delta-rule states and conv windows, counted from the config; the
        # measured figure adds only the slots' int32 positions
        est = engine_bytes(cfg, slots_per_device=r["batch"], length=r["context"])
        resident = est["weights"] + est["kv"] + est["delta_state"]
        assert resident <= r["bytes_per_step"] <= resident + 4 * r["batch"], (r["bytes_per_step"], est)
    for r in by["torch"]:
        assert "skipped" in r or ({"tokens_per_s", "jax_over_torch"} <= set(r) and r["jax_over_torch"] > 0)
    assert len(by["torch"]) == 2
    (rl,) = by["rl_step"]
    assert rl["step_s"] > 0 and rl["variant"] == "prover" and "rollout_tokens_per_s" in rl
    (summary,) = by["summary"]
    assert len(summary["rows"]) == len(rows) - 1


TORCH_DTYPE_PROBE = """
import sys, json, torch, transformers
sys.path.insert(0, sys.argv[1])
import accelerator
accelerator.FLAGS(["accelerator", "--dry_run", "--prompt=4", "--decode_steps=1"], known_only=True)
built, from_config = [], transformers.AutoModelForCausalLM.from_config
def spy(*args, **kw):
    model = from_config(*args, **kw)
    built.append(str(next(model.parameters()).dtype))
    return model
transformers.AutoModelForCausalLM.from_config = spy
row = accelerator.torch_decode("tiny", 2, {"tokens_per_s": 1.0})
print(json.dumps({"built": built, "dtype": row["dtype"], "tokens_per_s": row["tokens_per_s"]}))
"""


def test_torch_decode_runs_in_the_engines_dtype_on_cpu():
    """The torch row is timed on the engine decode's bf16 weights, on CPU as on a GPU (jax_over_torch
    compares the same work), and says so. (Its own process: the bench defines absl flags that other
    programs of the package define too.)"""
    out = subprocess.run([sys.executable, "-c", TORCH_DTYPE_PROBE, os.path.dirname(BENCH)], capture_output=True,
                         text=True, timeout=600, env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert out.returncode == 0, out.stderr[-3000:]
    row = json.loads(out.stdout.strip().splitlines()[-1])
    assert row["built"] == ["torch.bfloat16"] and row["dtype"] == "bfloat16" and row["tokens_per_s"] > 0
