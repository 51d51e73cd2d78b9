"""Fixed stochastic policies pi(a | s) -> {action: probability} for exact DP (`testing.dp`).

    mix(expert, candidates, eps)   (1 - eps) on the expert's action + eps / |candidates| on each candidate
    uniform_policy                 1 / |admissible(s)| over `info["admissible"]`
    mixed_policy(eps)              mix(info["expert"], info["admissible"], eps) (household reports its
                                   expert's command in `info["expert"]`)
    play_demonstrator(env, seed)   one episode of the env's own demonstrator (`expert_action`)
"""

from __future__ import annotations

from typing import Sequence

from prover_jax.envs.base import Env
from prover_jax.envs.testing.dp import Policy


def mix(expert: str | None, candidates: Sequence[str], eps: float) -> dict[str, float]:
    """(1 - eps) on the expert's action + eps spread uniformly over the (deduplicated) candidates; no
    expert: uniform over the candidates; no candidates: the expert's action with certainty."""
    candidates = list(dict.fromkeys(candidates))
    if not candidates:
        return {} if expert is None else {expert: 1.0}
    if expert is None:
        return {a: 1.0 / len(candidates) for a in candidates}
    out = {a: eps / len(candidates) for a in candidates}
    out[expert] = out.get(expert, 0.0) + 1.0 - eps
    return out


def uniform_policy(obs: str, info: dict) -> dict[str, float]:
    """pi(a | s) = 1 / |admissible(s)| over the admissible commands."""
    adm = info["admissible"]
    return {a: 1.0 / len(adm) for a in adm}


def mixed_policy(eps: float) -> Policy:
    """pi(a | s) = (1 - eps) 1[a = expert(s)] + eps / |admissible(s)| (reads `info["expert"]`)."""
    if not 0.0 <= eps <= 1.0:
        raise ValueError(f"eps must be in [0, 1], got {eps}")

    def policy(obs: str, info: dict) -> dict[str, float]:
        return mix(info["expert"], info["admissible"], eps)

    return policy


def play_demonstrator(env: Env, seed: int) -> tuple[bool, list[tuple[str, bool]]]:
    """(success, [(action, valid)]) of the env's demonstrator (`expert_action`, slips and confusions
    included) playing task `seed` to its end."""
    env.reset(seed)
    steps, done, info = [], False, {}
    while not done:
        action = env.expert_action()
        _, _, done, info = env.step(action)
        steps.append((action, info["valid"]))
    return bool(info["success"]), steps
