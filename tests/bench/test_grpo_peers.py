"""bench/grpo_peers.py --smoke runs end to end on the prover_jax side (the TRL and Tunix virtual environments
are not in CI): the shared model folder, prompts and spec are built, prover_jax's driver plays and updates,
its figures reach the table and the JSON line, and a peer whose interpreter is missing is skipped with the
reason, never given numbers. The shared reward is what all three frameworks call."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_grpo_peers_smoke_prover_side(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "grpo_peers.py"), "--smoke",
                          "--peers=prover_jax,trl", "--trl_python=/nonexistent/python", f"--workdir={tmp_path}"],
                         capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("LOAD AVERAGE (1 min) BEFORE:") and "LOAD AVERAGE (1 min) AFTER:" in out.stdout
    record = json.loads(out.stdout.splitlines()[-1])
    assert record["smoke"] and record["load_before"] >= 0 and record["load_after"] >= 0
    assert record["work"]["prompts_per_step"] == 2 and record["work"]["generations"] == 2
    pj = record["peers"]["prover_jax"]
    assert pj["steps"] == 1 and pj["median_s"] > 0 and pj["min_s"] <= pj["median_s"] <= pj["max_s"]
    assert 0 < pj["rollout_share"] < 1 and 0 < pj["update_share"] < 1
    assert 0 < pj["completion_tokens"] <= 8 and pj["weights_changed"]
    assert set(record["peers"]) == {"prover_jax"} and "no interpreter" in record["skipped"]["trl"]
    assert "trl" not in record["ratios_median"]
    spec = json.loads((tmp_path / "spec.json").read_text())
    assert os.path.isfile(os.path.join(spec["model"], "model.safetensors"))
    assert os.path.isfile(os.path.join(spec["model"], "tokenizer.json"))


def test_shared_reward_signatures():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import grpo_peers_reward as r

    assert r.digit_share("a1b2", {"answer": "#### 3"}) == 0.5 and r.digit_share("") == 0.0
    assert r.trl_digit_share(["12", [{"role": "assistant", "content": "x9"}]]) == [1.0, 0.5]
    assert r.tunix_digit_share(["q", "q"], ["ab", "1"], answer=None) == [0.0, 1.0]
