"""Ground truth for tests and the credit lab: exact success probabilities under fixed policies.

  dp.py        success_probability(env, policy, snapshot, obs, info): V(s) by memoised recursion
  policies.py  fixed stochastic policies (uniform, expert/uniform mixtures) the DP evaluates
"""

from prover_jax.envs.testing import dp
from prover_jax.envs.testing.dp import Policy, success_probability
from prover_jax.envs.testing.policies import mix, mixed_policy, play_demonstrator, uniform_policy

__all__ = ["Policy", "dp", "mix", "mixed_policy", "play_demonstrator", "success_probability", "uniform_policy"]
