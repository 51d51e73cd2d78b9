"""bench/serve.py --quick runs (so the benchmark cannot rot): its JSON lines and their figures."""

import json
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_bench_serve_quick():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "serve.py"), "--quick", "--repeats=1"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    header, row = lines
    assert header["bench"] == "serve" and header["model"] == "tiny" and header["clients"] == 16
    assert header["load"] >= 0  # the load average at the start: a loaded machine's figures say so
    assert row["case"] == "serve_vs_driver"
    # greedy, the same prompts, the same engine: both sides generate the same number of tokens
    assert row["server_tokens"] == row["driver_tokens"] > 0
    for k in ("server_req_s", "server_tok_s", "driver_req_s", "driver_tok_s", "server_overhead"):
        assert row[k] > 0, k


def test_bench_serve_builds_bench_small_without_absl_flags(tmp_path):
    """The full bench's model (bench/sampler.py's builder, an absl program's function) builds from
    serve.py, whose flags are argparse's: bench-small's HF folder and the test tokenizer."""
    script = ("import sys; sys.path.insert(0, 'bench'); import serve; from prover_jax.models import qwen3_5; "
              "qwen3_5.load_hf = lambda *a, **k: None; serve.build_model(sys.argv[1], quick=False)")
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                         timeout=300, cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert out.returncode == 0, out.stderr[-3000:]
    config = json.load(open(tmp_path / "config.json"))
    assert config["hidden_size"] == 512 and os.path.exists(tmp_path / "tokenizer_config.json")
