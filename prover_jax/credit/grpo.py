"""`grpo`: one trajectory-level advantage copied onto every policy token.

    A_i = R_i - mean_g(R)        (/ (std + 1e-6) of the group or the batch: credit.std_scope)
"""

from __future__ import annotations

from typing import Sequence

from prover_jax.credit.base import EXTRA_TOKENS, CreditMethod, CreditOutput, register_credit
from prover_jax.credit.common import grpo_advantages
from prover_jax.rollout.trajectory import Trajectory


@register_credit("grpo")
class GRPO(CreditMethod):
    def assign(self, groups: Sequence[Sequence[Trajectory]]) -> CreditOutput:
        return CreditOutput(grpo_advantages(groups, self.config), {EXTRA_TOKENS: 0})
