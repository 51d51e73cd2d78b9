"""`make demo`: what runs end to end today, on built-in defaults.

The full job (SFT warm start, then GRPO + ProVer on `household`) arrives with the trainer; until then
the demo shows the parts it will stand on: the built-in environments played by their experts with
exact state restore, and the ~29M-parameter 'bench-small' Qwen3.5 policy computing log-probs.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
from flax import nnx

from prover_jax import envs
from prover_jax.models import qwen3_5


def play_expert(name: str, seeds: range) -> tuple[float, float, float]:
    """Success rate, mean turns, and whether restoring mid-episode replays identically (fraction)."""
    env = envs.make(name)
    wins = turns = exact = 0
    for seed in seeds:
        obs, info = env.reset(seed)
        done, t, mid, trace = False, 0, None, []
        while not done:
            if t == 2:
                mid = (env.snapshot(), len(trace))
            obs, r, done, info = env.step(env.expert_action())
            trace.append(obs)
            t += 1
        wins += info["success"]
        turns += t
        if mid is not None:
            env.restore(mid[0])
            replay, done = [], False
            while not done:
                o, _, done, _ = env.step(env.expert_action())
                replay.append(o)
            exact += replay == trace[mid[1]:]
        else:
            exact += 1
    n = len(seeds)
    return wins / n, turns / n, exact / n


def main():
    print("prover_jax demo: the RL trainer (SFT + GRPO/ProVer) is not built yet; this runs the parts "
          "it will use.\n")
    for name in ("household", "shop", "searchqa"):
        t0 = time.time()
        ok, turns, exact = play_expert(name, range(50))
        print(f"{name:10s} expert success {ok:.0%}  mean turns {turns:4.1f}  exact restore {exact:.0%}  "
              f"({time.time() - t0:.1f}s for 50 episodes)")
    cfg = qwen3_5.CONFIGS["bench-small"]
    model = qwen3_5.Qwen3_5(cfg, rngs=nnx.Rngs(0))
    tokens = jax.random.randint(jax.random.PRNGKey(0), (4, 128), 0, cfg.vocab_size)
    fwd = nnx.jit(lambda m, t: jax.nn.log_softmax(m(t)))
    t0 = time.time()
    logp = fwd(model, tokens).block_until_ready()
    t1 = time.time()
    fwd(model, tokens).block_until_ready()
    t2 = time.time()
    print(f"\nbench-small Qwen3.5 ({cfg.param_count() / 1e6:.1f}M params): log-probs for 4x128 tokens, "
          f"compile+run {t1 - t0:.1f}s, run {t2 - t1:.2f}s, mean logp {float(jnp.mean(logp)):.2f}")


if __name__ == "__main__":
    main()
