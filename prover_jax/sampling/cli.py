"""prover-generate: sample from a policy checkpoint (HF folder or prover orbax checkpoint) of any family.

    prover-generate --model=CKPT --prompt_ids="1,2,3;4,5" --max_new_tokens=32          # greedy
    prover-generate --model=CKPT --prompt="Hello" --temperature=1 --num_samples=4 --stop="\\n"
    prover-generate --model=CKPT --prompt_ids="1,2,3" --max_new_tokens=256 --benchmark

Prints one JSON line per sample: {"prompt_index", "sample_index", "tokens" (new ids), "logprobs"
(log-probabilities under the raw policy), "finish_reason"} plus "text" when the model folder has a
tokenizer. Sample j of prompt i draws with request seed --seed + i (the driver derives the per-sample
keys), so a prompt's samples do not depend on the other prompts. Generation ends at the policy's EOS ids
(models.hf_folder.eos_ids: config.json, generation_config.json, the tokenizer's eos token and <|im_end|>;
--ignore_eos disables), a --stop string, or --max_new_tokens.
--benchmark runs everything once to compile, then again timed, and prints a last line
{"generated_tokens", "seconds", "tokens_per_s", "warmup_seconds"}.
Bad flags exit with status 2, an unreadable model with status 1; both print one line to stderr. A value
absl itself cannot parse (--max_new_tokens=abc, --dtype=float16) gets absl's message and status 1.
"""

from __future__ import annotations

import json
import os
import sys
import time

import jax.numpy as jnp
from absl import app, flags, logging

from prover_jax.sampling.driver import Driver, Request
from prover_jax.sampling.engine import Engine
from prover_jax.sampling.engine_types import MIN_PROMPT_BUCKET, bucket
from prover_jax.sampling.loader import CliError, PolicyFolder
from prover_jax.sampling.sampler import SamplingParams

DEFAULT_MAX_SLOTS = 64  # decode slots when --max_concurrent_decodes is not given

FLAGS = flags.FLAGS
flags.DEFINE_string("model", None, "HF checkpoint folder (config.json + *.safetensors) or prover "
                    "(orbax) checkpoint folder.")
flags.DEFINE_string("prompt_ids", None, "Prompts as token ids: commas between ids, semicolons between "
                    "prompts, e.g. '1,2,3;4,5'.")
flags.DEFINE_multi_string("prompt", None, "Prompt text, tokenised with the model folder's tokenizer "
                          "(repeat for several prompts).")
flags.DEFINE_integer("max_new_tokens", 64, "Most tokens generated per sample.")
flags.DEFINE_float("temperature", 0.0, "Sampling temperature; 0 = greedy.")
flags.DEFINE_float("top_p", 1.0, "Nucleus sampling mass; 1 = off.")
flags.DEFINE_integer("top_k", 0, "Keep the k most likely tokens; 0 = off.")
flags.DEFINE_integer("seed", 0, "PRNG seed; prompt i uses seed + i.")
flags.DEFINE_integer("num_samples", 1, "Samples per prompt.")
flags.DEFINE_integer("max_concurrent_decodes", None, "Decode slots (default: prompts x samples, at "
                     f"most {DEFAULT_MAX_SLOTS}).")
flags.DEFINE_integer("max_prefill_length", None, "Longest prompt piece prefilled at once (default: "
                     f"the longest prompt, rounded up to a power of two >= {MIN_PROMPT_BUCKET}).")
flags.DEFINE_integer("max_target_length", None, "Cache length per slot, prompt + generated (default: "
                     "longest prompt + max_new_tokens, rounded up to a power of two).")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Parameter and compute dtype.")
flags.DEFINE_multi_string("stop", None, "Stop string (repeatable); needs a tokenizer.")
flags.DEFINE_bool("ignore_eos", False, "Do not stop at the model's EOS ids.")
flags.DEFINE_bool("benchmark", False, "Run once to compile, then time a second run.")


def parse_prompt_ids(text: str) -> list[list[int]]:
    """'1,2,3;4,5' -> [[1, 2, 3], [4, 5]]; CliError on anything else."""
    prompts = []
    for i, part in enumerate(text.split(";")):
        items = [x.strip() for x in part.split(",")]
        if items == [""]:
            raise CliError(f"--prompt_ids: prompt {i} is empty (in {text!r})")
        try:
            prompts.append([int(x) for x in items])
        except ValueError:
            bad = next(x for x in items if not _is_int(x))
            raise CliError(f"--prompt_ids: {bad!r} in prompt {i} is not an integer token id "
                           f"(expected e.g. '1,2,3;4,5')") from None
    return prompts


def _is_int(x: str) -> bool:
    try:
        int(x)
        return True
    except ValueError:
        return False


def _positive(name: str, value) -> None:
    if value is not None and value < 1:
        raise CliError(f"--{name} must be >= 1, got {value}")


def generate() -> list[str]:
    """Runs the flags' request; returns the output lines (JSON)."""
    path = FLAGS.model
    if not path:
        raise CliError("--model is required")
    if (FLAGS.prompt_ids is None) == (not FLAGS.prompt):
        raise CliError("give exactly one of --prompt_ids and --prompt")
    for name in ("max_new_tokens", "num_samples", "max_concurrent_decodes", "max_prefill_length",
                 "max_target_length"):
        _positive(name, getattr(FLAGS, name))
    try:
        sampling = SamplingParams(temperature=FLAGS.temperature, top_k=FLAGS.top_k, top_p=FLAGS.top_p)
    except ValueError as e:
        raise CliError(str(e)) from None
    if not os.path.isdir(path):
        raise CliError(f"--model: no such folder {path}", code=1)
    try:
        folder = PolicyFolder.open(path)
    except (OSError, ValueError) as e:
        raise CliError(f"--model: {e}", code=1) from None
    cfg, tokenizer, why_not = folder.config, folder.tokenizer, folder.tokenizer_problem
    if FLAGS.prompt_ids is not None:
        prompts = parse_prompt_ids(FLAGS.prompt_ids)
    else:
        if tokenizer is None:
            raise CliError(f"--prompt needs a tokenizer: {why_not}; give --prompt_ids instead")
        prompts = [list(tokenizer.encode(text)) for text in FLAGS.prompt]
        if not all(prompts):
            raise CliError("--prompt: a prompt tokenises to no tokens")
    for i, p in enumerate(prompts):
        bad = sorted({t for t in p if not 0 <= t < cfg.vocab_size})
        if bad:
            raise CliError(f"prompt {i} has token ids outside the vocabulary [0, {cfg.vocab_size}): "
                           f"{bad[:8]}")
    stops = tuple(FLAGS.stop or ())
    if stops and tokenizer is None:
        raise CliError(f"--stop needs a tokenizer: {why_not}")
    if any(not s for s in stops):
        raise CliError("--stop strings must be non-empty")

    longest, n_new, K = max(len(p) for p in prompts), FLAGS.max_new_tokens, FLAGS.num_samples
    max_target = FLAGS.max_target_length or max(bucket(longest + n_new), FLAGS.max_prefill_length or 1)
    max_prefill = FLAGS.max_prefill_length or min(bucket(longest, MIN_PROMPT_BUCKET), max_target)
    if max_prefill > max_target:
        raise CliError(f"--max_prefill_length {max_prefill} exceeds --max_target_length {max_target}")
    if longest > max_target:
        raise CliError(f"a prompt of {longest} tokens does not fit --max_target_length {max_target}")
    slots = FLAGS.max_concurrent_decodes or min(len(prompts) * K, DEFAULT_MAX_SLOTS)
    try:
        eos = () if FLAGS.ignore_eos else folder.eos_ids()
        model = folder.load_model(jnp.dtype(FLAGS.dtype))
    except (OSError, ValueError) as e:
        raise CliError(str(e), code=1) from None
    try:
        engine = Engine(model, max_concurrent_decodes=slots, max_prefill_length=max_prefill,
                        max_target_length=max_target)
    except ValueError as e:
        raise CliError(str(e)) from None
    decode = None if tokenizer is None else (lambda ids: tokenizer.decode(ids, skip_special_tokens=False))
    driver = Driver(engine, eos_ids=eos, decode_fn=decode)
    requests = [Request(p, sampling, max_new_tokens=n_new, seed=FLAGS.seed + i, num_samples=K,
                        stop_strings=stops) for i, p in enumerate(prompts)]
    t0 = time.perf_counter()
    try:
        results = driver.run(requests)
        warmup = time.perf_counter() - t0
        if FLAGS.benchmark:
            t0 = time.perf_counter()
            results = driver.run(requests)
            seconds = time.perf_counter() - t0
    except ValueError as e:  # a request the driver refuses
        raise CliError(str(e)) from None

    lines = []
    for i, samples in enumerate(results):
        for j, c in enumerate(samples):
            out = {"prompt_index": i, "sample_index": j, "tokens": [int(t) for t in c.tokens],
                   "logprobs": [float(x) for x in c.logprobs], "finish_reason": c.finish_reason}
            if tokenizer is not None:
                out["text"] = decode(list(c.tokens))
            lines.append(json.dumps(out))
    if FLAGS.benchmark:
        n = sum(len(c.tokens) for samples in results for c in samples)
        lines.append(json.dumps({"generated_tokens": n, "seconds": round(seconds, 6),
                                 "tokens_per_s": round(n / max(seconds, 1e-9), 3),
                                 "warmup_seconds": round(warmup, 6)}))
    return lines


def main(argv) -> int:
    if not FLAGS["verbosity"].present:  # keep stderr for problems (not JAX's backend probing)
        logging.set_verbosity(logging.WARNING)
    if len(argv) > 1:
        print(f"prover-generate: error: unexpected arguments {argv[1:]}", file=sys.stderr)
        return 2
    try:
        lines = generate()
    except CliError as e:
        print(f"prover-generate: error: {e}", file=sys.stderr)
        return e.code
    for line in lines:
        print(line)
    sys.stdout.flush()
    return 0


def run(argv=None):
    app.run(main, argv=argv)


if __name__ == "__main__":
    run()
