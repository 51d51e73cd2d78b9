"""`oracle`: the pivot the failed runs most often got wrong, read from the env's privileged rules.

An upper bound for judges that must find the pivot themselves (the LLM judge, `contrastive`). On an
env with the `pivot` hook (`Env.pivot`; household: `envs.household.pivots`):

1. Each failed run's first mistake: its first turn t with pivot(s_t, a_t) = (-1, class).
2. The class most failed runs made their first mistake in (ties: the class whose mistakes came later,
   closer to the outcome).
3. The success's matching turn: its first turn with (+1, that class) that may start a segment (not
   its last turn); where the success has none, the next class in that order.

The proposal is that one turn (t, t). no_candidate when no failed run made a pivotal mistake (e.g. all
ran out of turns) or the success has no matching turn for any of their classes.
"""

from __future__ import annotations

import collections
import threading

import numpy as np

from prover_jax.envs.base import lacks_hook, make, no_pivot_rules, pivot_labels
from prover_jax.judges.base import NO_CANDIDATE, Judge, Proposal, register


@register("oracle")
class OracleJudge(Judge):
    """See the module docstring. Built with the run's env (`needs_env`): env_name, env_kwargs."""

    local = True
    needs_env = True

    def __init__(self, env_name: str, env_kwargs: dict | None = None):
        if lacks_hook(env_name, "pivot"):
            raise ValueError(no_pivot_rules(env_name, "judge.name='oracle'"))
        self.env = make(env_name, **dict(env_kwargs or {}))
        self._lock = threading.Lock()  # the env is not thread-safe; groups are judged from worker threads

    @classmethod
    def from_config(cls, section, workdir=None, env_name: str | None = None, env_kwargs: dict | None = None,
                    **kwargs):
        if env_name is None:
            raise ValueError("judge.name='oracle' reads the env's pivot rules: build it with env_name (and env_kwargs)")
        return cls(env_name, env_kwargs)

    def _labels(self, traj):
        with self._lock:
            return pivot_labels(self.env, traj)

    def _propose(self, success, failures, *, max_segment_turns: int, rng: np.random.Generator) -> Proposal:
        counts, latest = collections.Counter(), {}
        for f in failures:
            mistake = next(((t, p[1]) for t, p in enumerate(self._labels(f)) if p is not None and p[0] < 0), None)
            if mistake is not None:
                counts[mistake[1]] += 1
                latest[mistake[1]] = max(latest.get(mistake[1], -1), mistake[0])
        if not counts:
            return Proposal(None, NO_CANDIDATE, rationale=f"none of the {len(failures)} failed runs made a pivotal mistake")
        order = sorted(counts, key=lambda c: (-counts[c], -latest[c], c))
        labels = self._labels(success)
        for cls in order:
            t = next((t for t, p in enumerate(labels[:-1]) if p == (1, cls) and success.turns[t].valid), None)
            if t is not None:
                return Proposal((t, t), rationale=f"{counts[cls]} of {len(failures)} failed runs first erred at "
                                                  f"'{cls}'; the success got it right at turn {t} "
                                                  f"({success.turns[t].action!r})")
        return Proposal(None, NO_CANDIDATE, rationale=f"the success has no non-terminal right choice of the classes "
                                                      f"the failed runs got wrong ({dict(counts)})")

    def close(self) -> None:
        self.env.close()
