"""Exact dynamic programming over a built-in environment's state space.

For a fixed stochastic policy pi(a | s) over finitely many actions,

    V(s) = 1[success]                              if s is terminal
    V(s) = sum_a pi(a | s) * V(step(s, a))         otherwise

computed by memoised recursion over `snapshot()` records (built-in snapshots are hashable and include
the turn counter, so the recursion is finite: every path ends by the turn limit). This is the ground
truth tests use for credit estimates: delta(l, r) = V(s_post) - V(s_pre).
"""

from __future__ import annotations

from typing import Callable, Hashable

from prover_jax.envs.base import Env

# policy(obs, info) -> {action: probability}; probabilities must sum to 1.
Policy = Callable[[str, dict], dict[str, float]]


def success_probability(env: Env, policy: Policy, snapshot: Hashable, obs: str, info: dict,
                        _memo: dict | None = None) -> float:
    """V(snapshot) under `policy`: probability that following it from this state ends in success.

    `obs`/`info` are what the env showed in that state (the policy's inputs). The env is left restored
    to `snapshot` on return.
    """
    memo = {} if _memo is None else _memo
    if snapshot in memo:
        return memo[snapshot]
    value = 0.0
    for action, p in policy(obs, info).items():
        if p <= 0.0:
            continue
        env.restore(snapshot)
        nobs, _, done, ninfo = env.step(action)
        if done:
            value += p * float(ninfo["success"])
        else:
            value += p * success_probability(env, policy, env.snapshot(), nobs, ninfo, memo)
    env.restore(snapshot)
    memo[snapshot] = value
    return value
