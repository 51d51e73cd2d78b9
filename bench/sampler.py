"""Sampler benchmark on the 'bench-small' Qwen3.5 config (~29M params), one process, same weights.

    python bench/sampler.py [--cases=decode,fork,multiturn] [--hf=true] [--out=results.json]
    python bench/sampler.py --smoke   # the tiny 'demo' model, a few tokens per case: runs in seconds
    python bench/sampler.py --cases=decode --tunix_python=PY   # adds Tunix's sampler (PY: a Python with
                                                                # google-tunix) on an attention-only Qwen3

decode:    16 prompts x 64 tokens, 128 new tokens each, greedy: prover_jax Engine + Driver vs
           transformers `generate` (batch 16), tokens/s and ratio; greedy token agreement reported.
           With --bf16 (default) both stacks again on bf16 weights.
fork:      K=8 continuations (32 new tokens, temperature 1) of one 512-token prefix: one request with
           num_samples=8 (prefilled once) vs 8 independent requests; reference = one 512-token prefill
           + 8 slots decoding 32 tokens from a short prompt.
multiturn: 8 episodes x 20 turns of 16 observation + 16 action tokens: extension (each turn
           prefills only its new tokens on the kept cache) vs re-prefilling the whole history.
Every timed run follows an identical untimed run (compilation excluded); times are the best of
--repeats runs. The header line has the machine, the versions and the load average at the start.
"""

from __future__ import annotations

import copy
import json
import os
import platform
import tempfile
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_list("cases", ["decode", "fork", "multiturn"], "Which cases to run.")
flags.DEFINE_boolean("hf", True, "Run transformers generate in the decode case.")
flags.DEFINE_integer("repeats", 2, "Timed runs per measurement (best is reported).")
flags.DEFINE_boolean("bf16", True, "The decode case also runs our engine on bf16 weights (bf16 compute, "
                     "fp32 norms, softmax and logits; the peers stay fp32).")
flags.DEFINE_string("tunix_python", None, "A Python with google-tunix installed: the decode case adds a Tunix "
                    "row (bench/tunix_decode.py, an attention-only Qwen3 of bench-small's dims, run by that "
                    "Python right after ours). Default: this Python when it can import tunix, else no row.")
flags.DEFINE_string("out", None, "Write the figures as JSON here.")
flags.DEFINE_bool("smoke", False, "Seconds, not minutes: the tiny 'demo' config, every case at a few tokens, "
                  "one repeat. Checks that the bench runs; its figures mean nothing.")

# the cases' sizes: decode (batch, prompt, new tokens), fork (K, prefix, new tokens),
# multiturn (episodes, turns, observation tokens, action tokens); --smoke uses SMOKE_SIZES
SIZES = {"model": "bench-small", "decode": (16, 64, 128), "fork": (8, 512, 32), "multiturn": (8, 20, 16, 16)}
DECODE_CACHE = 256  # cache tokens per slot in the decode case, ours and Tunix's
SMOKE_SIZES = {"model": "demo", "decode": (4, 16, 8), "fork": (2, 32, 4), "multiturn": (2, 3, 8, 4)}


def sizes() -> dict:
    return SMOKE_SIZES if FLAGS.smoke else SIZES


def best_time(fn, repeats):
    fn()  # compile / warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def build(tmp, model: str | None = None, bf16: bool | None = None):
    """`model` (default: bench-small, --smoke's demo) with random weights, saved as an HF folder and
    loaded by both stacks (ours also in bf16 when `bf16`, default --bf16 with the decode case):
    (model, hf, model_bf16 or None). With both arguments given it reads no flag (other scripts call it)."""
    import torch
    import transformers

    import jax.numpy as jnp

    from prover_jax.models import qwen3_5

    cfg = qwen3_5.CONFIGS[model or sizes()["model"]]
    hf_cfg = transformers.Qwen3_5TextConfig(**{k: v for k, v in cfg.to_hf_dict().items()
                                               if k not in ("architectures", "model_type")})
    torch.manual_seed(0)
    hf = transformers.Qwen3_5ForCausalLM(hf_cfg).eval()
    hf.save_pretrained(tmp)
    if bf16 is None:
        bf16 = FLAGS.bf16 and "decode" in FLAGS.cases  # only the decode case runs it
    return qwen3_5.load_hf(tmp), hf, qwen3_5.load_hf(tmp, dtype=jnp.bfloat16) if bf16 else None


def case_decode(model, hf, repeats, model_bf16=None):
    """Greedy decode of B prompts; with model_bf16 also our engine on bf16 weights (and bf16 compute),
    whose tokens are compared with the fp32 engine's."""
    import numpy as np
    import torch

    from prover_jax.sampling import Driver, Engine, Request

    B, T, N = sizes()["decode"]
    prompts = np.random.default_rng(0).integers(0, model.config.vocab_size, (B, T))
    reqs = [Request(p.tolist(), max_new_tokens=N) for p in prompts]

    def ours_run(m):
        driver = Driver(Engine(m, max_concurrent_decodes=B, max_prefill_length=T, max_target_length=DECODE_CACHE))
        seconds, out = best_time(lambda: driver.run(reqs), repeats)
        return seconds, np.array([c.tokens for [c] in out])

    ours_s, ours = ours_run(model)
    row = {"case": "decode", "batch": B, "prompt": T, "new_tokens": N,
           "prover_jax_tok_s": B * N / ours_s, "prover_jax_s": ours_s}
    if model_bf16 is not None:
        bf16_s, bf16 = ours_run(model_bf16)
        row.update(prover_jax_bf16_tok_s=B * N / bf16_s, prover_jax_bf16_s=bf16_s,
                   bf16_greedy_token_agreement_with_fp32=float((bf16 == ours).mean()))
    if hf is not None:
        ids = torch.as_tensor(prompts)

        def hf_run(m=hf):
            with torch.no_grad():
                return m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=N,
                                  min_new_tokens=N, do_sample=False, pad_token_id=0)
        hf_s, hf_out = best_time(hf_run, repeats)
        theirs = hf_out[:, T:].numpy()
        if model_bf16 is not None:  # and transformers on bf16 weights, the like-for-like peer of our bf16 row
            hf_bf16 = copy.deepcopy(hf).to(torch.bfloat16)
            hf_bf16_s, _ = best_time(lambda: hf_run(hf_bf16), repeats)
            row.update(bf16_ratio=hf_s / bf16_s, transformers_bf16_tok_s=B * N / hf_bf16_s,
                       transformers_bf16_s=hf_bf16_s, bf16_ratio_vs_transformers_bf16=hf_bf16_s / bf16_s)
        row.update(transformers_tok_s=B * N / hf_s, transformers_s=hf_s, ratio=hf_s / ours_s,
                   greedy_rows_identical=int(sum((a == b).all() for a, b in zip(ours, theirs))),
                   greedy_token_agreement=float((ours == theirs).mean()))
    tunix = tunix_python()
    if tunix:
        peer = tunix_decode(tunix, model.config, B, T, N, DECODE_CACHE, repeats)
        row.update(tunix_tok_s=peer["tokens_per_s"], tunix_s=peer["best_s"], tunix_dtype=peer["dtype"],
                   tunix_version=peer["tunix_version"], tunix_jax=peer["jax_version"],
                   ratio_vs_tunix=peer["best_s"] / ours_s)
        if model_bf16 is not None:
            row.update(bf16_ratio_vs_tunix=peer["best_s"] / bf16_s)
    return row


def tunix_python() -> str | None:
    if FLAGS.tunix_python:
        return FLAGS.tunix_python
    import importlib.util
    import sys
    return sys.executable if importlib.util.find_spec("tunix") else None


def tunix_decode(python: str, cfg, B: int, T: int, N: int, cache: int, repeats: int) -> dict:
    """Tunix's sampler on an attention-only Qwen3 of cfg's dims (bench/tunix_decode.py's JSON line)."""
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tunix_decode.py")
    args = [python, script, "--vocab", cfg.vocab_size, "--hidden", cfg.hidden_size,
            "--intermediate", cfg.intermediate_size, "--layers", cfg.num_hidden_layers,
            "--heads", cfg.num_attention_heads, "--kv_heads", cfg.num_key_value_heads, "--head_dim", cfg.head_dim,
            "--batch", B, "--prompt", T, "--new_tokens", N, "--cache", cache, "--repeats", repeats]
    out = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr[-4000:])
        raise RuntimeError(f"bench/tunix_decode.py failed under {python} (exit {out.returncode})")
    peer = json.loads(out.stdout.strip().splitlines()[-1])
    if not peer.get("generated_lengths_ok"):  # fewer tokens than ours: its time would flatter it
        raise RuntimeError(f"Tunix did not generate {N} tokens for each of the {B} prompts in every repeat: "
                           "its time is not comparable")
    return peer


def case_fork(model, repeats):
    import numpy as np

    from prover_jax.sampling import Driver, Engine, Request, SamplingParams

    K, T, N = sizes()["fork"]
    prefix = np.random.default_rng(1).integers(0, model.config.vocab_size, T).tolist()
    engine = Engine(model, max_concurrent_decodes=K, max_prefill_length=T, max_target_length=1024)
    driver = Driver(engine)
    hot = SamplingParams(temperature=1.0)
    fork_s, _ = best_time(lambda: driver.run([Request(prefix, hot, max_new_tokens=N, num_samples=K)]),
                          repeats)
    indep_s, _ = best_time(lambda: driver.run([Request(prefix, hot, max_new_tokens=N, seed=i)
                                               for i in range(K)]), repeats)
    prefill_s, _ = best_time(lambda: driver.run([Request(prefix, max_new_tokens=1)]), repeats)
    short = prefix[:8]
    decode_s, _ = best_time(lambda: driver.run([Request(short, hot, max_new_tokens=N, seed=i)
                                                for i in range(K)]), repeats)
    return {"case": "fork", "K": K, "prefix": T, "new_tokens": N, "fork_s": fork_s,
            "independent_s": indep_s, "speedup": indep_s / fork_s, "one_prefill_s": prefill_s,
            "decode_only_s": decode_s, "fork_over_prefill_plus_decode": fork_s / (prefill_s + decode_s)}


def case_multiturn(model, repeats):
    import numpy as np

    from prover_jax.sampling import Driver, Engine, Request

    E, turns, obs_len, act_len = sizes()["multiturn"]
    rng = np.random.default_rng(2)
    obs = rng.integers(0, model.config.vocab_size, (turns, E, obs_len)).tolist()
    engine = Engine(model, max_concurrent_decodes=E, max_prefill_length=1024, max_target_length=1024)
    driver = Driver(engine)

    def episode(extend: bool):
        per_turn, contexts, history = [], [None] * E, [[] for _ in range(E)]
        for t in range(turns):
            t0 = time.perf_counter()
            if extend:
                reqs = [Request(obs[t][e], max_new_tokens=act_len, context=contexts[e], keep_context=True)
                        for e in range(E)]
            else:
                reqs = [Request(history[e] + obs[t][e], max_new_tokens=act_len) for e in range(E)]
            out = driver.run(reqs)
            per_turn.append(time.perf_counter() - t0)
            for e, [c] in enumerate(out):
                contexts[e] = c.context
                history[e] += obs[t][e] + c.tokens
        return per_turn, history

    rows = {}
    for name, extend in (("extension", True), ("reprefill", False)):
        total, (per_turn, history) = best_time(lambda: episode(extend), repeats)
        rows[name] = {"total_s": total, "first5_turn_s": float(np.mean(per_turn[:5])),
                      "last5_turn_s": float(np.mean(per_turn[-5:])), "history": history}
    same = rows["extension"].pop("history") == rows["reprefill"].pop("history")
    return {"case": "multiturn", "episodes": E, "turns": turns, "obs_tokens": obs_len,
            "action_tokens": act_len, **{f"{k}_{m}": v for k, r in rows.items() for m, v in r.items()},
            "speedup": rows["reprefill"]["total_s"] / rows["extension"]["total_s"],
            "greedy_histories_identical": same}


def main(argv):
    del argv
    import jax
    import torch
    import transformers

    if FLAGS.smoke:
        FLAGS.repeats = 1
    with tempfile.TemporaryDirectory() as tmp:
        model, hf, model_bf16 = build(tmp)
    header = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
              "jax": jax.__version__, "torch": torch.__version__, "transformers": transformers.__version__,
              "torch_threads": torch.get_num_threads(), "date": time.strftime("%Y-%m-%d"),
              "load": os.getloadavg()[0]}  # the 1-minute load average before the cases run
    print(json.dumps(header))
    rows = []
    for case in FLAGS.cases:
        if case == "decode":
            row = case_decode(model, hf if FLAGS.hf else None, FLAGS.repeats, model_bf16)
        elif case == "fork":
            row = case_fork(model, FLAGS.repeats)
        elif case == "multiturn":
            row = case_multiturn(model, FLAGS.repeats)
        else:
            raise app.UsageError(f"unknown case {case!r}; choose from decode, fork, multiturn")
        rows.append(row)
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    if FLAGS.out:
        with open(FLAGS.out, "w") as f:
            json.dump({"header": header, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    app.run(main)
