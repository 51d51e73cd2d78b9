"""bench/rl_step.py, bench/sampler.py, bench/decode_profile.py and bench/cpu_dots.py in --smoke mode
(tiny sizes) run end to end and print every figure their full runs print, so none can rot between the
runs that time them; bench/packing_fill.py runs on the tests' tiny trainer config; a Tunix row that
generated fewer tokens is refused; bench/judge_coverage.py runs on a few credit-hard tasks. (bench/accelerator.py --dry_run and bench/serve.py --quick have
their own tests.)"""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_bench(name: str, *args: str) -> list[dict]:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", name), "--smoke", *args],
                         capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def test_rl_step_smoke(tmp_path):
    *_, out = run_bench("rl_step.py", f"--workdir={tmp_path}", "--variants=grpo,prover,prover_openai,grpo_packed",
                        "--override=rollout.row_buckets=[1,8,32]")  # a value with commas stays one override
    assert set(out["variants"]) == {"grpo", "prover", "prover_openai", "grpo_packed"}
    assert 0 < out["variants"]["grpo_packed"]["batch_fill"] <= 1 and out["grpo_packed_update_over_unpacked"] > 0
    for key in ("grpo_step_s", "prover_step_s", "prover_over_grpo", "prover_openai_over_grpo", "eligible_frac",
                "rollout_tokens_per_s", "decode_step_ms", "decode_host_overhead_ms"):
        assert out[key] >= 0, key
    for name, v in out["variants"].items():
        assert v["step_s"] > 0 and "time/update_s" in v and "compiles" in v and v["prefill_tokens"] > 0, name
    mid, lo, hi = out["prover_over_grpo_paired"]
    assert 0 < lo <= mid <= hi
    low, high = out["prover_over_grpo_ci95"]
    assert low == pytest.approx(out["prover_over_grpo"]) == high  # one timed round: no spread to resample
    assert os.path.isdir(tmp_path / "smoke" / "sft")  # the smoke policy lives beside, not in, the cached one


def test_sampler_smoke():
    header, *rows = run_bench("sampler.py")
    assert {"jax", "torch", "cpus", "load"} <= set(header) and header["load"] >= 0
    by = {r["case"]: r for r in rows}
    assert set(by) == {"decode", "fork", "multiturn"}
    assert by["decode"]["prover_jax_tok_s"] > 0 and by["decode"]["ratio"] > 0
    assert by["decode"]["prover_jax_bf16_tok_s"] > 0 and 0 <= by["decode"]["bf16_greedy_token_agreement_with_fp32"] <= 1
    assert by["decode"]["transformers_bf16_tok_s"] > 0
    assert by["fork"]["speedup"] > 0 and by["multiturn"]["speedup"] > 0
    assert by["multiturn"]["greedy_histories_identical"]  # extension and re-prefill play the same episodes


def test_decode_profile_smoke():
    """The profile charges the step's ops to its parts: the weights' matmuls by the parameters they
    read, the rest by the model's and engine's named scopes, so little is left unattributed."""
    (record,) = run_bench("decode_profile.py")
    parts = {r["part"]: r["thread_ms_per_step"] for r in record["parts"]}
    for part in ("mlp matmuls", "gated deltanet projections", "attention projections", "vocabulary projection",
                 "delta-rule state update", "attention over the cache", "sampling"):
        assert parts.get(part, 0) > 0, (part, parts)
    assert parts.get("bookkeeping (loop, slot masks, copies, embedding lookup)", 0) < 0.5 * sum(parts.values())
    assert record["ms_per_step"][0] > 0 and record["load"] >= 0


def test_cpu_dots_smoke():
    """Every kernel row runs and compiles its dots as named: YNNPACK fusions by default, XLA's own
    dots when the program's compiler options turn them off (else the rows would time one kernel)."""
    (record,) = run_bench("cpu_dots.py")
    kernels = record["kernels"]
    assert set(kernels) == {"xla_ynnpack", "xla_eigen", "torch"}
    assert kernels["xla_ynnpack"]["compiled_as"] == ["__ynn_fusion"]
    assert kernels["xla_eigen"]["compiled_as"] == ["xla dot"]
    for name, row in kernels.items():
        assert row["ms"] > 0 and row["gflop_s"] > 0 and row["ms_min_max"][0] <= row["ms"], name


def test_packing_fill_runs(tmp_path):
    """bench/packing_fill.py on the tests' tiny trainer config (a random policy plays one batch)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "packing_fill.py"),
                          f"--config={ROOT}/tests/helpers/demo_config.py", f"--workdir={tmp_path}"],
                         capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    (row,) = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert row["episodes"] == 4 and 0 < row["unpacked_fill"] <= 1 and 0 < row["packed_fill_mb1"] <= 1
    assert row["packed_fill_mb1"] >= row["unpacked_fill"] * 0.99 or row["packed_rows"] == row["episodes"]


def test_packing_fill_scripted_pod_config(tmp_path):
    """bench/packing_fill.py --scripted on the 2B ALFWorld pod config: the expert's and the wanderer's
    episodes of one shipped task in Qwen3.5's real vocabulary, laid out as the trainer would. (The
    config reads $ALFWORLD_DATA, which importing alfworld in this process sets to its empty default: the
    run gets the environment of a fresh shell, so it plays the shipped tasks.)"""
    env = {k: v for k, v in os.environ.items() if k != "ALFWORLD_DATA"}
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "packing_fill.py"),
                          f"--config={ROOT}/configs/qwen3_5.py:2B,alfworld", "--scripted", "--tasks=1",
                          "--think_tokens=0"], capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [r["success_share"] for r in rows] == [0.0, 0.25, 0.5, 0.75, 1.0]
    (expert,), (wander,) = rows[0]["expert_lengths"], rows[0]["wanderer_lengths"]
    assert 0 < expert < wander <= 4096 and all(r["episodes"] == 128 for r in rows)
    for r in rows:
        wins = int(r["success_share"] * 8)
        assert r["tokens"] == 16 * (wins * expert + (8 - wins) * wander)
        assert r["unpacked_fill"] == r["tokens"] / (128 * r["unpacked_length"])
        assert r["unpacked_fill"] <= r["packed_fill_mb8"] * (1 + 1e-9) <= r["packed_fill_mb1"] * (1 + 1e-9)


def test_rl_step_refuses_trainers_past_the_map_limit(monkeypatch):
    """Past vm.max_map_count XLA's compiler fails and the process crashes: the bench stops first with
    an error that names the limit, when another trainer like the last would not fit (trainers of one
    engine shape share the sampler's programs, so past the first each adds only its update's: the check
    is for variants that differ in shape, here ~16.6k mappings each, limit 65530)."""
    import pytest
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import rl_step
    monkeypatch.setattr(rl_step, "memory_maps", lambda: (37952, 65530))
    rl_step.check_map_headroom([576, 21353, 37952], left=1)  # a third trainer fits
    rl_step.check_map_headroom([37952], left=3)  # nothing built yet: no estimate
    monkeypatch.setattr(rl_step, "memory_maps", lambda: (54600, 65530))
    with pytest.raises(RuntimeError, match="vm.max_map_count=65530"):
        rl_step.check_map_headroom([576, 21353, 37952, 54600], left=1)


def test_rl_step_json_reports_the_load_at_start_and_end(monkeypatch, tmp_path, capsys):
    """load_before is the load average when the bench starts (not when it prints), load_after when it
    ends: the timed steps in between raise it."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import rl_step
    rl_step.FLAGS(["rl_step"], known_only=True)
    for name, value in (("variants", ["grpo"]), ("keep_host_memory", False), ("workdir", str(tmp_path)),
                        ("smoke", False)):
        monkeypatch.setattr(rl_step.FLAGS, name, value)
    loads = iter([(0.5, 0.5, 0.5)] + [(3.0, 3.0, 3.0)] * 4)
    monkeypatch.setattr(rl_step.os, "getloadavg", lambda: next(loads))
    monkeypatch.setattr(rl_step, "start_endpoint", lambda latency: (type("S", (), {"shutdown": lambda s: None})(), ""))
    monkeypatch.setattr(rl_step, "sft_policy", lambda root: root)
    step = {"step_s": 1.0, "step_median_s": 1.0, "step_min_s": 1.0, "step_max_s": 1.0, "steps_s": [1.0],
            "eligible_frac": 0.0, "rollout_tokens_per_s": 1.0}
    monkeypatch.setattr(rl_step, "time_variants", lambda names, *a: {"grpo": step})
    monkeypatch.setattr(rl_step, "decode_overheads", lambda sft_dir: {})
    rl_step.main([])
    out = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (out["load_before"], out["load_after"]) == (0.5, 3.0)


TUNIX_PROBE = """
import sys
sys.path.insert(0, sys.argv[1])
import sampler
from prover_jax.models.qwen3_5 import CONFIGS
try:
    print(sampler.tunix_decode(sys.argv[2], CONFIGS["demo"], 4, 16, 8, 32, 1)["best_s"])
except RuntimeError as e:
    print(e)
"""


def test_a_tunix_row_that_generated_fewer_tokens_is_refused(tmp_path):
    """Tunix stopping early on a prompt would time less work than ours: no ratio is made from it.
    (Its own process: bench/sampler.py and bench/rl_step.py define the same absl flags.)"""
    for ok, want in ((True, "1.0"), (False, "did not generate 8 tokens for each of the 4 prompts")):
        fake = tmp_path / f"python_{ok}"  # stands in for the Tunix venv's python: prints the script's JSON line
        fake.write_text(f"#!/bin/sh\necho '{json.dumps({'best_s': 1.0, 'generated_lengths_ok': ok})}'\n")
        fake.chmod(0o755)
        out = subprocess.run([sys.executable, "-c", TUNIX_PROBE, os.path.join(ROOT, "bench"), str(fake)],
                             capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert out.returncode == 0 and want in out.stdout.strip().splitlines()[-1], out.stderr[-3000:]


def test_judge_coverage_runs(tmp_path):
    """bench/judge_coverage.py on a few credit-hard tasks: every judge gets a row, and the oracle judge's
    proposals are the oracle's turn by construction."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out_file = tmp_path / "coverage.json"
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "judge_coverage.py"), "--tasks=30", "--k=2",
                          "--judges=oracle,contrastive,contrastive:earliest:ignore=seen,random", f"--out={out_file}"],
                         capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    record = json.loads(out_file.read_text())
    assert record["groups_in_band"] > 0 and set(record["judges"]) == {"oracle", "contrastive",
                                                                      "contrastive:earliest:ignore=seen", "random"}
    oracle = record["judges"]["oracle"]
    assert oracle["hit_oracle"] == 1.0 and oracle["hit_pivot"] == 1.0 and 0 <= oracle["accept@2"] <= 1
