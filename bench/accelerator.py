"""One short run on whatever accelerator is present (GPU, TPU or CPU), printing one JSON line per result:

    python bench/accelerator.py                 # the real sizes (<= ~8 minutes on one H100 / H200)
    python bench/accelerator.py --dry_run       # tiny model, short lengths, on CPU: every field, seconds
                                                # (--smoke is the same)

Lines (each has "bench" and "device"):
  train     random-init Qwen3.5 of each --sizes (0.8B, 2B) at --tokens tokens (one row), AdamW with fp32
            master weights and bf16 compute, the backend's runtime (GPU: cuDNN attention, delta rule
            chunk 64 in bf16), layers scanned, each block rematerialised: step_s, tokens_per_s,
            model_flops (6 N T + attention), mfu against the chip's peak (prover_jax.aot.chips; None for
            a chip not in the table)
  decode    the engine's greedy decode step of the first size at each --batches (64, 256) slots of
            --context tokens, bf16: step_ms, tokens_per_s, floor_tokens_per_s (weights + caches read once per step
            at the chip's HBM bandwidth) and vs_floor (achieved / floor)
  torch     the same model, batch and dtype (bf16) in transformers + torch on the same device (greedy
            steps with its cache): tokens_per_s and jax_over_torch; skipped with a reason when torch cannot use
            the device (e.g. a CPU-only torch on a GPU host)
  rl_step   a ProVer RL step of the demo setting, timed as bench/rl_step.py times it (its functions:
            SFT warm start cached in --workdir, then --warmup untimed and --steps timed steps)
  summary   every line above in one object
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave GPU memory to torch's turn
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import app, flags  # noqa: E402

import rl_step  # noqa: E402  (its flags: --workdir, --sft_steps, --warmup, --steps, --variants)

FLAGS = flags.FLAGS
flags.DEFINE_bool("dry_run", False, "Tiny model and lengths on CPU: runs every part in seconds.")
flags.DEFINE_list("sizes", ["0.8B", "2B"], "Model sizes (prover_jax.models.qwen3_5.CONFIGS) for the train step.")
flags.DEFINE_integer("tokens", 4096, "Tokens of the train step's one row.")
flags.DEFINE_integer("train_steps", 3, "Timed train steps (after one compile step).")
flags.DEFINE_list("batches", ["64", "256"], "Decode batch sizes (engine slots).")
flags.DEFINE_integer("context", 2048, "Cache length per slot for the decode runs.")
flags.DEFINE_integer("prompt", 128, "Prompt tokens prefilled before decoding.")
flags.DEFINE_integer("decode_steps", 32, "Timed decode steps.")
flags.DEFINE_bool("torch", True, "Also time transformers + torch decode.")
flags.DEFINE_bool("rl", True, "Also time a ProVer RL step of the demo setting.")

TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=16, linear_value_head_dim=16)


def emit(row: dict, rows: list):
    rows.append(row)
    print(json.dumps(row), flush=True)


def device_info() -> dict:
    """The first device, its platform and its entry of the chip table (None when not there)."""
    import jax

    from prover_jax.aot.chips import CHIPS
    d = jax.devices()[0]
    kind = d.device_kind.lower()
    key = next((k for k in ("h200", "h100") if k in kind), None)
    if key is None and d.platform == "tpu":
        key = {"tpu v5 lite": "v5e", "tpu v5e": "v5e", "tpu v5": "v5p", "tpu v5p": "v5p",
               "tpu v6 lite": "v6e", "tpu v6e": "v6e"}.get(kind)
    return {"device": d.device_kind, "platform": d.platform, "chip": key, "spec": CHIPS.get(key)}


def model_config(size: str):
    from prover_jax.models import qwen3_5
    if FLAGS.dry_run:
        return qwen3_5.Qwen3_5Config(layer_types=(qwen3_5.LINEAR, qwen3_5.LINEAR, qwen3_5.LINEAR, qwen3_5.FULL),
                                     **TINY)
    return qwen3_5.CONFIGS[size]


def train(size: str, dev: dict) -> dict:
    """Steady-state time of one AdamW step over one row of --tokens tokens."""
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    from prover_jax.aot.programs import attention_flops_per_token, matmul_params
    from prover_jax.models import qwen3_5
    cfg = model_config(size)
    T = FLAGS.tokens
    model = qwen3_5.Qwen3_5(cfg, rngs=nnx.Rngs(0), dtype=jnp.bfloat16, param_dtype=jnp.float32)
    model.runtime = qwen3_5.resolve_runtime(dev["platform"], scan_layers=True, remat="full")
    graphdef, params = nnx.split(model)
    opt = optax.adamw(1e-5)
    opt_state = opt.init(params)
    tokens = jax.random.randint(jax.random.PRNGKey(1), (1, T + 1), 0, cfg.vocab_size)

    def loss_fn(p):
        logits = nnx.merge(graphdef, p)(tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    @jax.jit
    def step(p, s):
        loss, g = jax.value_and_grad(loss_fn)(p)
        updates, s = opt.update(g, s, p)
        return optax.apply_updates(p, updates), s, loss

    params, opt_state, loss = step(params, opt_state)  # compile
    jax.block_until_ready(loss)
    t0 = time.perf_counter()
    for _ in range(FLAGS.train_steps):
        params, opt_state, loss = step(params, opt_state)
    jax.block_until_ready(loss)
    dt = (time.perf_counter() - t0) / FLAGS.train_steps
    flops = (6.0 * matmul_params(cfg) + 3.0 * attention_flops_per_token(cfg, T // 2)) * T
    peak = dev["spec"].peak_flops if dev["spec"] else None
    return {"bench": "train", "size": size, "tokens": T, "attention": model.runtime.attention,
            "step_s": dt, "tokens_per_s": T / dt, "model_flops": flops,
            "mfu": flops / dt / peak if peak else None, "loss": float(loss)}


def decode(size: str, batch: int, dev: dict) -> dict:
    """The engine's greedy decode step at `batch` busy slots, bf16 weights and caches."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from prover_jax.models import qwen3_5
    from prover_jax.sampling import Engine, SamplingParams
    cfg = model_config(size)
    model = qwen3_5.Qwen3_5(cfg, rngs=nnx.Rngs(0), dtype=jnp.bfloat16, param_dtype=jnp.bfloat16)
    engine = Engine(model, max_concurrent_decodes=batch, max_prefill_length=FLAGS.prompt,
                    max_target_length=FLAGS.context)
    params = engine.load_params()
    prompt = np.random.default_rng(0).integers(3, cfg.vocab_size, FLAGS.prompt)
    state = engine.init_decode_state()
    prefix, _ = engine.prefill_multisampling(params=params, padded_tokens=prompt, num_samples=batch,
                                             sampler=SamplingParams(), rng=0)  # greedy, as torch_decode
    state = engine.bulk_insert(prefix, state, list(range(batch)))
    state, res = engine.generate(params, state)  # compile
    jax.block_until_ready(res.tokens)
    t0 = time.perf_counter()
    for _ in range(FLAGS.decode_steps):
        state, res = engine.generate(params, state)
    jax.block_until_ready(res.tokens)
    dt = (time.perf_counter() - t0) / FLAGS.decode_steps
    nbytes = lambda tree: sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))  # noqa: E731
    read = nbytes(params) + nbytes(state.cache)
    floor = read / dev["spec"].hbm_bandwidth if dev["spec"] else None
    return {"bench": "decode", "size": size, "batch": batch, "context": FLAGS.context, "dtype": "bfloat16",
            "step_ms": 1e3 * dt,
            "tokens_per_s": batch / dt, "bytes_per_step": read,
            "floor_tokens_per_s": batch / floor if floor else None, "vs_floor": floor / dt if floor else None}


def torch_decode(size: str, batch: int, jax_row: dict) -> dict:
    """transformers + torch greedy decode of the same architecture (random weights) on the same device, in
    bf16 as the engine's decode (on CPU too)."""
    out = {"bench": "torch", "size": size, "batch": batch}
    try:
        import torch
        import transformers
    except ImportError as e:
        return {**out, "skipped": f"no torch / transformers: {e}"}
    platform = device_info()["platform"]
    if platform == "gpu" and not torch.cuda.is_available():
        return {**out, "skipped": "torch has no CUDA here (the test extra pins a CPU build)"}
    if platform not in ("gpu", "cpu"):
        return {**out, "skipped": f"torch does not run on {platform}"}
    device = "cuda" if platform == "gpu" else "cpu"
    cfg = model_config(size)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg.to_hf_dict(), f)
        hf_cfg = transformers.AutoConfig.from_pretrained(d)
    dtype = torch.bfloat16
    model = transformers.AutoModelForCausalLM.from_config(hf_cfg, dtype=dtype).to(device).eval()
    ids = torch.randint(3, cfg.vocab_size, (batch, FLAGS.prompt), device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with torch.no_grad():
        o = model(ids, use_cache=True)
        cache, tok = o.past_key_values, o.logits[:, -1:].argmax(-1)
        for _ in range(2):  # warm-up steps
            o = model(tok, past_key_values=cache, use_cache=True)
            cache, tok = o.past_key_values, o.logits[:, -1:].argmax(-1)
        sync()
        t0 = time.perf_counter()
        for _ in range(FLAGS.decode_steps):
            o = model(tok, past_key_values=cache, use_cache=True)
            cache, tok = o.past_key_values, o.logits[:, -1:].argmax(-1)
        sync()
    dt = (time.perf_counter() - t0) / FLAGS.decode_steps
    del model, cache, o
    if device == "cuda":
        torch.cuda.empty_cache()
    return {**out, "device": device, "dtype": "bfloat16", "step_ms": 1e3 * dt, "tokens_per_s": batch / dt,
            "jax_over_torch": jax_row["tokens_per_s"] / (batch / dt)}


def rl(dev: dict) -> dict:
    """A ProVer RL step of the demo setting, through bench/rl_step.py's own functions."""
    root = os.path.abspath(FLAGS.workdir)
    os.makedirs(root, exist_ok=True)
    server, base_url = rl_step.start_endpoint(FLAGS.judge_latency_s)
    try:
        sft_dir = rl_step.sft_policy(root)
        r = rl_step.time_variants(["prover"], sft_dir, root, base_url)["prover"]
    finally:
        server.shutdown()
    return {"bench": "rl_step", "variant": "prover", "sft_steps": FLAGS.sft_steps, "steps": FLAGS.steps,
            "step_s": r["step_s"], "rollout_tokens_per_s": r["rollout_tokens_per_s"],
            "update_s": r.get("time/update_s"), "rollout_s": r.get("time/rollout_s")}


def main(argv):
    del argv
    FLAGS.dry_run = FLAGS.dry_run or FLAGS.smoke  # --smoke (rl_step's flag) is this bench's --dry_run
    if FLAGS.dry_run:
        import jax
        jax.config.update("jax_platforms", "cpu")
        FLAGS.sizes, FLAGS.tokens, FLAGS.train_steps = ["tiny"], 64, 1
        FLAGS.batches, FLAGS.context, FLAGS.prompt, FLAGS.decode_steps = ["4", "8"], 64, 8, 2
        FLAGS.sft_steps, FLAGS.warmup, FLAGS.steps = 1, 0, 1
        FLAGS.override = list(FLAGS.override) + [  # a short RL step: no precompile, short responses
            "train.precompile=false", "rollout.max_action_tokens=8"]
        if FLAGS.workdir == "runs/bench_rl_step":
            FLAGS.workdir = tempfile.mkdtemp(prefix="bench_accelerator_")
    from absl import logging
    logging.set_verbosity(logging.WARNING)
    dev = device_info()
    head = {"device": dev["device"], "platform": dev["platform"], "chip": dev["chip"]}
    rows: list = []
    t_start = time.perf_counter()
    for size in FLAGS.sizes:
        emit({**head, **train(size, dev)}, rows)
    for b in FLAGS.batches:
        row = {**head, **decode(FLAGS.sizes[0], int(b), dev)}
        emit(row, rows)
        if FLAGS.torch:
            emit({**head, **torch_decode(FLAGS.sizes[0], int(b), row)}, rows)
    if FLAGS.rl:
        emit({**head, **rl(dev)}, rows)
    emit({**head, "bench": "summary", "wall_s": time.perf_counter() - t_start, "rows": rows[:]}, rows)


if __name__ == "__main__":
    app.run(main)
