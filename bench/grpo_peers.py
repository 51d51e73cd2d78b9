"""The GRPO step of prover_jax beside TRL's GRPOTrainer and Tunix's GRPOLearner, on identical work.

    .venv/bin/python bench/grpo_peers.py [--steps=5 --warmup=2] [--peers=prover_jax,trl,tunix] [--smoke]

One command builds the shared inputs in --workdir (a temporary folder by default), then runs each
framework as a subprocess of its own virtual environment and prints a table and one JSON line last:

- the model: a random dense Qwen3 HF folder written by transformers (safetensors; hidden 128, 2 layers,
  4 query / 2 key-value heads of 32, MLP 384, tied embeddings, fp32) with its tokenizer (a byte-level
  BPE of 512 tokens trained on the prompts, eos <|im_end|>, pad <|endoftext|>, a Qwen-style ChatML
  chat template) saved in the same folder: all three load it from there;
- the prompts: a JSONL of arithmetic questions with GSM8K-style answers ({"question", "answer"}), each
  asked as [system, user] chat messages with the same system prompt;
- the reward: bench/grpo_peers_reward.py, the share of digit characters in the completion (non-zero
  advantages for a random policy);
- the sizes: 4 prompts x 8 completions per step, at most 32 new tokens, temperature 1.0, no KL (beta 0),
  one AdamW update per step (lr 1e-5, no weight decay, global-norm clip 1.0, no PPO epochs / one
  iteration, the whole batch in one micro-batch), rewards centred and scaled by the group's std, the
  token-mean clipped loss (eps 0.2), fp32 on the CPU.

Each peer plays --warmup untimed steps (compilation), then --steps timed ones; a step is generation +
reward + advantages + the update (the drivers' docstrings say exactly what each timer spans). Per peer:
mean, median, min and max step seconds, the share of the step spent before the update (generation,
reward, advantages) and in it where the peer reports it; prover_jax / peer (median step seconds).

Ratios are only claimed from one run on an idle machine (bench/README.md): the 1-minute load average
before and after is printed first and last. A peer whose interpreter is missing or whose run fails is
skipped with the reason (the end of its log, kept in WORKDIR/logs/), never given numbers.

`--smoke`: 2 prompts x 2 completions, 8 new tokens, 1 warmup + 1 timed step (tests/bench/test_grpo_peers.py
runs it with --peers=prover_jax: the peers' virtual environments are not in CI).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
PEERS = ("prover_jax", "trl", "tunix")
DRIVERS = {"prover_jax": "grpo_peers_prover.py", "trl": "grpo_peers_trl.py", "tunix": "grpo_peers_tunix.py"}
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the peers' venvs, made by `make peers` (TRL on Python 3.11 with the CPU torch, Tunix on 3.12 with its pins)
PYTHONS = {"prover_jax": sys.executable, "trl": os.path.join(_REPO, ".venv-trl", "bin", "python"),
           "tunix": os.path.join(_REPO, ".venv-tunix", "bin", "python")}
TOKEN_TOLERANCE = 0.01  # the generated tokens per reply must agree with prover_jax's within this share
SYSTEM_PROMPT = "Solve the arithmetic problem. End with the answer on its own line as '#### <number>'."
MODEL = dict(vocab_size=512, hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6, hidden_act="silu", max_position_embeddings=512,
             tie_word_embeddings=True, attention_bias=False)
ROPE_THETA = 10000.0
CHAT_TEMPLATE = ("{%- for message in messages %}"
                 "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
                 "{%- endfor %}"
                 "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# The shared inputs.
def make_rows(n: int, seed: int = 0) -> list[dict]:
    """Arithmetic word questions with GSM8K-style answers (the working, then '#### <number>')."""
    rng = random.Random(seed)
    ops = [("plus", "+", lambda a, b: a + b), ("minus", "-", lambda a, b: a - b), ("times", "*", lambda a, b: a * b)]
    rows, seen = [], set()
    while len(rows) < n:
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        word, sign, fn = rng.choice(ops)
        q = f"What is {a} {word} {b}?"
        if q in seen:
            continue
        seen.add(q)
        rows.append({"question": q, "answer": f"{a} {sign} {b} = {fn(a, b)}\n#### {fn(a, b)}"})
    return rows


def make_tokenizer(rows: list[dict], vocab_size: int):
    """Byte-level BPE trained on the dataset's text, the ChatML specials at ids 0-2, the chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    # the text of every prompt and answer (the system prompt and the roles once per row, as the model reads them)
    texts = [t for r in rows for t in (SYSTEM_PROMPT, "system\n", "user\n", r["question"], "assistant\n", r["answer"])]
    tok.train_from_iterator(texts, trainer=trainer)  # 256 rows fill the vocabulary; fewer leave it smaller
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None, additional_special_tokens=["<|im_start|>"])
    fast.chat_template = CHAT_TEMPLATE
    return fast


def make_model_folder(path: str, rows: list[dict], seed: int = 0) -> dict:
    """The random Qwen3ForCausalLM (transformers, safetensors) and its tokenizer in `path`."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    tok = make_tokenizer(rows, MODEL["vocab_size"])
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    torch.manual_seed(seed)
    config = Qwen3Config(**{**MODEL, "vocab_size": len(tok)}, eos_token_id=eos, pad_token_id=pad, bos_token_id=None,
                         rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA})
    model = Qwen3ForCausalLM(config).eval().to(torch.float32)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad, bos_token_id=None)
    model.save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return {"eos_id": eos, "pad_id": pad, "params": sum(p.numel() for p in model.parameters())}


def chat_prompt(tok, question: str) -> str:
    """The prompt text every peer feeds the model: [system, user] through the chat template, generation prompt."""
    return tok.apply_chat_template([{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}],
                                   tokenize=False, add_generation_prompt=True)


def prompt_lengths(tok, rows: list[dict]) -> list[int]:
    return [len(tok.encode(chat_prompt(tok, r["question"]), add_special_tokens=False)) for r in rows]


def setup(workdir: str, args) -> dict:
    """Writes the model folder, the prompts and spec.json (what every driver reads) into `workdir`."""
    rows = make_rows(args.rows, seed=args.seed)
    data = os.path.join(workdir, "prompts.jsonl")
    with open(data, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    model = os.path.join(workdir, "model")
    if os.path.isdir(model):
        shutil.rmtree(model)
    facts = make_model_folder(model, rows, seed=args.seed)
    from transformers import AutoTokenizer

    lengths = prompt_lengths(AutoTokenizer.from_pretrained(model), rows)
    max_prompt = -(-max(lengths) // 8) * 8
    spec = {"model": model, "data": data, "system_prompt": SYSTEM_PROMPT, "seed": args.seed,
            "prompts_per_step": args.prompts, "generations": args.generations, "max_new_tokens": args.max_new_tokens,
            "temperature": 1.0, "learning_rate": 1e-5, "grad_clip": 1.0, "warmup": args.warmup, "steps": args.steps,
            "max_prompt_tokens": max_prompt, "torch_threads": args.torch_threads, "cache_tokens": max_prompt + args.max_new_tokens,
            "prompt_tokens_mean": statistics.mean(lengths), "prompt_tokens_max": max(lengths), **facts}
    with open(os.path.join(workdir, "spec.json"), "w") as f:
        json.dump(spec, f, indent=1)
    return spec


# Running the peers.
def run_peer(name: str, python: str, workdir: str, timeout: float) -> tuple[dict | None, str]:
    """(the driver's JSON record, "") or (None, why it was skipped)."""
    if not os.path.exists(python):
        return None, f"no interpreter at {python}"
    log_path = os.path.join(workdir, "logs", f"{name}.log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    env = dict(os.environ, JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="", TOKENIZERS_PARALLELISM="false",
               PYTHONPATH=ROOT, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               WANDB_DISABLED="true", PYTHONUNBUFFERED="1")
    env.pop("VIRTUAL_ENV", None)
    cmd = [python, os.path.join(BENCH, DRIVERS[name]), f"--spec={os.path.join(workdir, 'spec.json')}",
           f"--workdir={os.path.join(workdir, name)}"]
    log(f"[grpo_peers] {name}: {' '.join(cmd)} (log: {log_path})")
    t0 = time.perf_counter()
    with open(log_path, "w") as err, tempfile.TemporaryFile("w+") as stdout:
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=err, text=True, cwd=ROOT, env=env)
        peak_rss_mb, returncode = wait_rusage(proc, timeout)
        if returncode is None:
            return None, f"timed out after {timeout:.0f} s (log: {log_path})"
        stdout.seek(0)
        text = stdout.read()
    log(f"[grpo_peers] {name}: finished in {time.perf_counter() - t0:.0f} s, exit {returncode}")
    records = []
    for line in text.splitlines():  # the driver's record; other lines (a trainer's printed logs) are not JSON
        try:
            record = json.loads(line) if line.startswith("{") else None
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and record.get("peer") == name:
            records.append(record)
    if returncode != 0 or not records:
        with open(log_path) as f:
            tail = f.read()[-1500:]
        return None, f"exit {returncode}, no result (log: {log_path}); its end:\n{tail}"
    return dict(records[-1], peak_rss_mb=peak_rss_mb), ""


def wait_rusage(proc: subprocess.Popen, timeout: float) -> tuple[float, int | None]:
    """(the child's peak resident set in MiB, its exit status), or (0, None) after killing it at the timeout.

    os.wait4 gives this child's own rusage (ru_maxrss in KiB on Linux), not the maximum over all children."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return usage.ru_maxrss / 1024, proc.returncode
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    return 0.0, None


def summary(record: dict, spec: dict) -> dict:
    """Step-time statistics, tokens per second at the median step, and the peak RSS.

    generated tokens / step = replies x mean reply length; trained tokens / step = replies x (mean prompt
    length + mean reply length), the rows the update reads."""
    steps = record["step_s"]
    out = {"mean_s": statistics.mean(steps), "median_s": statistics.median(steps), "min_s": min(steps),
           "max_s": max(steps), "steps": len(steps)}
    for part in ("rollout_s", "update_s"):
        if record.get(part):
            out[part.replace("_s", "_share")] = sum(record[part]) / sum(steps)
    for key in ("completion_tokens", "reward_mean"):
        if record.get(key):
            out[key] = statistics.mean(record[key])
    if "completion_tokens" in out:
        replies = spec["prompts_per_step"] * spec["generations"]
        out["generated_tok_s"] = replies * out["completion_tokens"] / out["median_s"]
        out["trained_tok_s"] = replies * (spec["prompt_tokens_mean"] + out["completion_tokens"]) / out["median_s"]
    out["peak_rss_mb"] = record.get("peak_rss_mb")
    out["weights_changed"] = record.get("weights_changed")
    if record.get("timed_step_compiles"):  # a timed step that compiled times the compiler too
        out["timed_step_compiles"] = sum(record["timed_step_compiles"])
    return out


def table(results: dict, skipped: dict) -> str:
    head = (f"{'peer':<11}{'mean s':>9}{'median s':>10}{'min s':>9}{'max s':>9}{'rollout':>9}{'update':>8}"
            f"{'tokens':>8}{'gen t/s':>9}{'train t/s':>10}{'RSS MiB':>9}{'reward':>8}{'pj/peer':>9}")
    lines = [head, "-" * len(head)]
    base = results.get("prover_jax", {}).get("median_s")
    for name in PEERS:
        if name in results:
            s = results[name]
            pct = lambda k: f"{100 * s[k]:.0f}%" if k in s else "-"  # noqa: E731
            num = lambda k, f: format(s[k], f) if k in s else "-"  # noqa: E731
            ratio = f"{base / s['median_s']:.2f}" if base else "-"
            lines.append(f"{name:<11}{s['mean_s']:>9.3f}{s['median_s']:>10.3f}{s['min_s']:>9.3f}{s['max_s']:>9.3f}"
                         f"{pct('rollout_share'):>9}{pct('update_share'):>8}{num('completion_tokens', '.1f'):>8}"
                         f"{num('generated_tok_s', '.0f'):>9}{num('trained_tok_s', '.0f'):>10}{num('peak_rss_mb', '.0f'):>9}"
                         f"{num('reward_mean', '.3f'):>8}{ratio:>9}")
        elif name in skipped:
            lines.append(f"{name:<11}skipped: {skipped[name].splitlines()[0]}")
    lines.append("rollout / update: shares of the step before the update (generation, reward, advantages) and in "
                 "it; tokens: mean completion tokens; gen / train t/s: generated / trained tokens per second at the median "
                 "step; RSS: the process's peak resident set; reward: mean digit share; pj/peer: prover_jax's median step "
                 "over the peer's (< 1: prover_jax is faster)")
    ref = results.get("prover_jax", {}).get("completion_tokens")
    for name, s in results.items():
        if ref and s.get("completion_tokens") and abs(s["completion_tokens"] / ref - 1) > TOKEN_TOLERANCE:
            lines.append(f"NOTE {name}: {s['completion_tokens']:.2f} generated tokens per reply against prover_jax's "
                         f"{ref:.2f} (over {TOKEN_TOLERANCE:.0%}): not the same work")
        if s.get("weights_changed") is False:
            lines.append(f"NOTE {name}: the weights did not change over the run")
        if s.get("timed_step_compiles"):
            lines.append(f"NOTE {name}: {s['timed_step_compiles']} compilations inside timed steps (more --warmup)")
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5, help="timed steps per peer")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (compilation)")
    p.add_argument("--prompts", type=int, default=4, help="prompts per step")
    p.add_argument("--generations", type=int, default=8, help="completions per prompt")
    p.add_argument("--max_new_tokens", type=int, default=32)
    p.add_argument("--rows", type=int, default=256, help="prompts in the generated dataset")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--peers", default=",".join(PEERS), help="comma-separated subset of " + ",".join(PEERS))
    p.add_argument("--workdir", default="", help="where the inputs and logs go (default: a temporary folder)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per peer")
    p.add_argument("--torch_threads", type=int, default=0,
                   help="> 0: torch.set_num_threads in TRL's process (0: torch's default, one per core)")
    for name in PEERS:
        p.add_argument(f"--{name}_python", default=PYTHONS[name], help=f"the interpreter that runs {name}")
    p.add_argument("--smoke", action="store_true", help="2 prompts x 2 completions, 8 tokens, 1 + 1 steps")
    args = p.parse_args(argv)
    if args.smoke:
        args.prompts, args.generations, args.max_new_tokens, args.warmup, args.steps = 2, 2, 8, 1, 1
    peers = [s.strip() for s in args.peers.split(",") if s.strip()]
    bad = [s for s in peers if s not in PEERS]
    if bad:
        p.error(f"--peers: unknown {bad}; expected a subset of {','.join(PEERS)}")
    args.peers = peers
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    load_before = os.getloadavg()[0]
    cpus = os.cpu_count()
    print(f"LOAD AVERAGE (1 min) BEFORE: {load_before:.2f} on {cpus} CPUs"
          + ("" if load_before < 0.5 else "  <-- NOT IDLE: ratios from this run are not claims"), flush=True)
    workdir = args.workdir or tempfile.mkdtemp(prefix="grpo_peers_")
    os.makedirs(workdir, exist_ok=True)
    spec = setup(workdir, args)
    print(f"work: {spec['prompts_per_step']} prompts x {spec['generations']} completions, <= {spec['max_new_tokens']} "
          f"new tokens, T=1.0, beta 0, 1 AdamW update (lr 1e-5) per step, fp32 CPU; model {spec['params']} params "
          f"({spec['model']}); prompts {spec['prompt_tokens_mean']:.1f} tokens on average (max "
          f"{spec['prompt_tokens_max']}); {args.warmup} warmup + {args.steps} timed steps", flush=True)
    results, skipped, records = {}, {}, {}
    for name in args.peers:
        python = getattr(args, f"{name}_python")
        record, why = run_peer(name, python, workdir, args.timeout)
        if record is None:
            skipped[name] = why
            print(f"SKIPPED {name}: {why}", flush=True)
            continue
        records[name] = record
        results[name] = summary(record, spec)
    load_after = os.getloadavg()[0]
    print()
    print(table(results, skipped))
    print()
    print(f"LOAD AVERAGE (1 min) AFTER: {load_after:.2f} on {cpus} CPUs (this run's own load included: the idle "
          "check is the load before)")
    ratios = {f"prover_jax_over_{n}": results["prover_jax"]["median_s"] / results[n]["median_s"]
              for n in results if n != "prover_jax" and "prover_jax" in results}
    print(json.dumps({"bench": "grpo_peers", "smoke": args.smoke, "load_before": load_before, "load_after": load_after,
                      "cpus": cpus, "work": {k: spec[k] for k in ("prompts_per_step", "generations", "max_new_tokens",
                                                                 "temperature", "learning_rate", "warmup", "steps",
                                                                 "params", "prompt_tokens_mean")},
                      "peers": {n: {**results[n], "step_s": records[n]["step_s"], "rollout_s": records[n].get("rollout_s"),
                                    "update_s": records[n].get("update_s"), "versions": records[n].get("versions"),
                                    "notes": records[n].get("notes", "")} for n in results},
                      "skipped": skipped, "ratios_median": ratios, "workdir": workdir}), flush=True)


if __name__ == "__main__":
    main()
