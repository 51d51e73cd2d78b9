"""Peer benchmark: greedy decode throughput of Tunix's Sampler on CPU.

Builds Tunix's Qwen3 model (attention-only decoder: GQA, q/k RMSNorm, SwiGLU
MLP, tied embeddings) with random fp32 weights at the given dims, wraps it in
`tunix.generate.sampler.Sampler`, and times full `Sampler.__call__` generations
(prefill + jitted decode loop + host-side detokenisation) of --batch prompts of
exactly --prompt random token ids, --new_tokens greedy tokens each. One untimed
warm-up call compiles; --repeats timed calls follow.

Tokens/s = batch * new_tokens / best seconds. The eos id lies outside the
vocabulary, so every row generates exactly --new_tokens tokens; this is checked.

Run (any Python with google-tunix installed):

    PY312_WITH_TUNIX bench/tunix_decode.py [flags]

Defaults are the bench-small dims of our own model. Logging goes to stderr;
stdout gets exactly one JSON line.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402
from tunix.generate import sampler as sampler_lib  # noqa: E402
from tunix.models.qwen3 import model as qwen3_lib  # noqa: E402

DTYPE = jnp.float32


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class IdTokenizer:
    """Minimal tokenizer for Tunix's Sampler: text is space-separated token ids.

    bos_id is 0 (falsy, so the sampler prepends nothing); pad_id is 0 (prompts
    use ids in [1, vocab)); eos_id is `vocab`, which greedy argmax over the
    vocabulary can never emit.
    """

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab

    def encode(self, text: str, **_: object) -> list[int]:
        return [int(tok) for tok in text.split()]

    def decode(self, ids: list[int], **_: object) -> str:
        return " ".join(str(i) for i in ids)

    def bos_id(self) -> int:
        return 0

    def pad_id(self) -> int:
        return 0

    def eos_id(self) -> int:
        return self.vocab


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in [
        ("vocab", 4096), ("hidden", 512), ("intermediate", 1536),
        ("layers", 8), ("heads", 8), ("kv_heads", 2), ("head_dim", 64),
        ("batch", 16), ("prompt", 64), ("new_tokens", 128), ("cache", 256),
        ("repeats", 3),
    ]:
        p.add_argument(f"--{name}", type=int, default=default)
    return p.parse_args()


def model_config(a: argparse.Namespace) -> qwen3_lib.ModelConfig:
    return qwen3_lib.ModelConfig(
        num_layers=a.layers,
        vocab_size=a.vocab,
        embed_dim=a.hidden,
        hidden_dim=a.intermediate,
        num_heads=a.heads,
        head_dim=a.head_dim,
        num_kv_heads=a.kv_heads,
        rope_theta=1_000_000,
        norm_eps=1e-6,
        use_tied_embedding=True,
        dtype=DTYPE,
        param_dtype=DTYPE,
    )


def build_model(config: qwen3_lib.ModelConfig) -> qwen3_lib.Qwen3:
    """Qwen3 with random weights; Tunix zero-inits the MLP, so re-draw it."""
    rngs = nnx.Rngs(0)
    model = qwen3_lib.Qwen3(config, rngs=rngs)
    init = nnx.initializers.lecun_normal()
    for layer in model.layers:
        for proj in (layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj):
            proj.kernel.set_value(init(rngs.params(), proj.kernel.shape, DTYPE))
    return model


def build_sampler(model: qwen3_lib.Qwen3, a: argparse.Namespace) -> sampler_lib.Sampler:
    cache_config = sampler_lib.CacheConfig(
        cache_size=a.cache,
        num_layers=a.layers,
        num_kv_heads=a.kv_heads,
        head_dim=a.head_dim,
    )
    return sampler_lib.Sampler(model, IdTokenizer(a.vocab), cache_config)


def random_prompts(batch: int, prompt: int, vocab: int) -> list[str]:
    ids_bp = np.random.default_rng(0).integers(1, vocab, size=(batch, prompt))
    return [" ".join(str(i) for i in row) for row in ids_bp]


def generate(sampler: sampler_lib.Sampler, prompts: list[str], a: argparse.Namespace):
    return sampler(
        prompts,
        max_generation_steps=a.new_tokens,
        max_prompt_length=a.prompt,
        echo=False,
        temperature=0.0,  # no top_p / beam_size: greedy (argmax) mode
    )


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    a = parse_args()
    if a.prompt + a.new_tokens > a.cache:
        raise SystemExit(f"--prompt + --new_tokens must be <= --cache ({a.cache})")
    log(f"devices: {jax.devices()}  args: {vars(a)}")
    sampler = build_sampler(build_model(model_config(a)), a)
    prompts = random_prompts(a.batch, a.prompt, a.vocab)
    warm_s, _ = timed(lambda: generate(sampler, prompts, a))
    log(f"warm-up (compile + run): {warm_s:.3f}s")
    seconds: list[float] = []
    lengths_ok = True
    for i in range(a.repeats):
        dt, out = timed(lambda: generate(sampler, prompts, a))
        lengths = [len(t) for t in out.tokens]
        lengths_ok &= len(lengths) == a.batch and all(n == a.new_tokens for n in lengths)
        log(f"repeat {i}: {dt:.3f}s  generated lengths: {sorted(set(lengths))}")
        seconds.append(dt)
    best_s = min(seconds)
    print(json.dumps({
        "peer": "tunix",
        "tunix_version": importlib.metadata.version("google-tunix"),
        "jax_version": jax.__version__,
        "model": "qwen3 attention-only",
        "dtype": jnp.dtype(DTYPE).name,
        "batch": a.batch,
        "prompt": a.prompt,
        "new_tokens": a.new_tokens,
        "seconds": [round(s, 4) for s in seconds],
        "best_s": round(best_s, 4),
        "tokens_per_s": round(a.batch * a.new_tokens / best_s, 1),
        "generated_lengths_ok": bool(lengths_ok),
    }))


if __name__ == "__main__":
    main()
