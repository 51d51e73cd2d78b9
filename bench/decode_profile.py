"""Where a decode step's time goes: the engine's jitted `generate` on 'bench-small' (random weights),
timed, then traced with jax.profiler; each executed XLA op is charged to a part of the step.

    python bench/decode_profile.py [--batch=16] [--steps_per_call=1] [--repeats=3] [--out=profile.json]
    python bench/decode_profile.py --smoke   # the tiny 'demo' model: runs in seconds

Timing: `calls` generate calls of `steps_per_call` steps each on full slots, `repeats` times; ms per
decode step (median, min-max) and tokens/s. Profile: the ops' own durations summed over XLA's
threads (thread-ms per step, so the parts add up to more than the wall time when ops overlap). An op
is charged by the weight it reads (its operands name parameters: the MLP, the Gated DeltaNet or
attention projections, the tied embedding in the vocabulary projection), else by the named scope it
was traced under (`model.py`, `layers.py`, `engine_fns.py`): the delta-rule state update, attention
over the cache, the rest of each mixer (conv, norms, gates, RoPE, cache writes), sampling, stop checks;
what is left is the step's bookkeeping (the scan loop, slot masks, copies).
"""

from __future__ import annotations

import collections
import glob
import json
import os
import re
import statistics
import tempfile
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("model", "bench-small", "A config of prover_jax.models.qwen3_5.CONFIGS.")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Weights and compute dtype (norms, softmax, "
                  "logits and the delta-rule state stay fp32).")
flags.DEFINE_integer("batch", 16, "Slots decoding at once.")
flags.DEFINE_integer("prompt", 64, "Prompt tokens per slot before decoding.")
flags.DEFINE_integer("max_target_length", 256, "Cache length per slot.")
flags.DEFINE_integer("steps_per_call", 1, "Decode steps per jitted generate call.")
flags.DEFINE_integer("calls", 48, "Timed decode steps per repeat (rounded up to whole calls).")
flags.DEFINE_integer("repeats", 3, "Timed repeats.")
flags.DEFINE_string("out", None, "Write the figures as JSON here.")
flags.DEFINE_bool("smoke", False, "Seconds: the tiny 'demo' config, 4 slots, 8 steps, one repeat. Checks that "
                  "the profile runs and attributes; its figures mean nothing.")

# (part, how it is recognised): parameter-reading ops by a parameter-name pattern, others by scope
BY_PARAM = (("mlp matmuls", r"_mlp_"), ("gated deltanet projections", r"_linear_attn_"),
            ("attention projections", r"_self_attn_"), ("vocabulary projection", r"embed_tokens|lm_head"))
BY_SCOPE = (("vocabulary projection", "/logits"), ("sampling", "/sample"), ("stop checks", "/stop_check"),
            ("delta-rule state update", "/delta_rule_step"), ("attention over the cache", "/cache_attention"),
            ("gated deltanet other (conv, norms, gates)", "/gated_deltanet"),
            ("attention other (norms, rope, cache write)", "/attention"), ("mlp elementwise", "/mlp"))
BOOKKEEPING = "bookkeeping (loop, slot masks, copies, embedding lookup)"


def part_of(line: str) -> str:
    """The part of the step an HLO instruction line belongs to (module docstring)."""
    operands = line.split("(", 1)[1].split("metadata=")[0] if "(" in line else ""
    for part, pattern in BY_PARAM:
        if re.search(r"%params\S*(" + pattern + ")", operands):
            return part
    m = re.search(r'op_name="([^"]*)"', line)
    scope = m.group(1) if m else ""
    for part, key in BY_SCOPE:
        if key + "/" in scope or scope.endswith(key):
            return part
    return BOOKKEEPING


def instruction_parts(hlo_text: str) -> dict[str, str]:
    """instruction name -> part, for every instruction of the compiled module."""
    parts = {}
    for line in hlo_text.splitlines():
        m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = ", line)
        if m:
            parts[m.group(1)] = part_of(line)
    return parts


def setup():
    """bench-small with random weights, an Engine with every slot holding a prompt."""
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from prover_jax.models import qwen3_5
    from prover_jax.sampling import Engine
    from prover_jax.sampling.sampler import SamplingParams

    cfg = qwen3_5.CONFIGS[FLAGS.model]
    dtype = jnp.dtype(FLAGS.dtype)
    model = qwen3_5.Qwen3_5(cfg, rngs=nnx.Rngs(0), dtype=dtype, param_dtype=dtype)
    B, T = FLAGS.batch, FLAGS.prompt
    engine = Engine(model, max_concurrent_decodes=B, max_prefill_length=T,
                    max_target_length=FLAGS.max_target_length)
    params = engine.load_params()
    prompts = np.random.default_rng(0).integers(0, cfg.vocab_size, (B, T))
    prefix = engine.prefill_batch(params=params, padded_tokens=prompts, true_lengths=[T] * B,
                                  samplers=[SamplingParams()] * B, rngs=list(range(B)), num_samples=[1] * B,
                                  existing_prefixes=[None] * B)
    return engine, params, engine.bulk_insert(prefix, engine.init_decode_state(), list(range(B)))


def main(argv):
    del argv
    import jax

    if FLAGS.smoke:
        FLAGS.model, FLAGS.batch, FLAGS.prompt, FLAGS.max_target_length = "demo", 4, 16, 64
        FLAGS.calls, FLAGS.repeats = 8, 1
    load = os.getloadavg()[0]  # the 1-minute load average before the run, in the record
    engine, params, fresh = setup()
    S, B = FLAGS.steps_per_call, FLAGS.batch
    calls = -(-FLAGS.calls // S)
    if calls * S + S > FLAGS.max_target_length - FLAGS.prompt:
        raise app.UsageError("calls * steps_per_call exceed the cache; lower --calls or raise --max_target_length")

    def run(n):
        state = jax.tree.map(lambda a: a.copy(), fresh)
        state, r = engine.generate(params, state, steps=S)  # compiled, and the first step paid
        jax.block_until_ready(r)
        t0 = time.perf_counter()
        for _ in range(n):
            state, r = engine.generate(params, state, steps=S)
        jax.block_until_ready((state, r))
        return (time.perf_counter() - t0) / (n * S), state

    run(1)
    per_step = [run(calls)[0] for _ in range(FLAGS.repeats)]
    ms = sorted(1e3 * t for t in per_step)
    median = statistics.median(ms)
    print(f"{FLAGS.model} ({FLAGS.dtype}), {B} slots, {S} steps per call: {median:.2f} ms per decode step "
          f"(min {ms[0]:.2f}, max {ms[-1]:.2f}, {FLAGS.repeats} repeats of {calls * S} steps); "
          f"{B / (median / 1e3):.0f} tokens/s")

    compiled = engine._generate.lower(params, fresh, engine.no_stops, S, engine._all_allowed).compile()
    parts = instruction_parts(compiled.as_text())
    traced_calls = 8
    with tempfile.TemporaryDirectory() as d:
        state = jax.tree.map(lambda a: a.copy(), fresh)
        with jax.profiler.trace(d):
            for _ in range(traced_calls):
                state, r = engine.generate(params, state, steps=S)
            jax.block_until_ready((state, r))
        data = jax.profiler.ProfileData.from_file(glob.glob(d + "/**/*.xplane.pb", recursive=True)[0])
        by_part, by_op = collections.Counter(), collections.Counter()
        for plane in data.planes:
            for line in plane.lines:
                for ev in line.events:
                    if ev.name in parts:
                        by_part[parts[ev.name]] += ev.duration_ns
                        by_op[ev.name] += ev.duration_ns
    steps = traced_calls * S
    total = sum(by_part.values())
    print(f"\nop time summed over XLA's threads: {total / 1e6 / steps:.2f} thread-ms per step")
    rows = []
    for part, ns in by_part.most_common():
        rows.append({"part": part, "thread_ms_per_step": ns / 1e6 / steps, "share": ns / total})
        print(f"  {ns / 1e6 / steps:7.2f} ms  {100 * ns / total:5.1f}%  {part}")
    print("\ncostliest ops:")
    for name, ns in by_op.most_common(10):
        print(f"  {ns / 1e6 / steps:7.3f} ms  {name:32s} {parts[name]}")
    record = {"model": FLAGS.model, "dtype": FLAGS.dtype, "batch": B, "steps_per_call": S, "load": load,
              "ms_per_step": ms,
              "tokens_per_s": B / (median / 1e3), "parts": rows,
              "ops": [{"op": n, "part": parts[n], "thread_ms_per_step": v / 1e6 / steps}
                      for n, v in by_op.most_common(20)]}
    print(json.dumps(record))
    if FLAGS.out:
        with open(FLAGS.out, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    app.run(main)
