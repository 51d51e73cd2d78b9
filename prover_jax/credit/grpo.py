"""`grpo`: one trajectory-level advantage copied onto every policy token.

    A_i = R_i - mean_g(R)        (/ (std + 1e-6) of the group or the batch: credit.std_scope)
"""

from __future__ import annotations

from typing import Sequence

from prover_jax.credit.base import (EXTRA_TOKENS, CreditMethod, CreditOutput, broadcast, group_outcome_advantages,
                                    register_credit)
from prover_jax.rollout.trajectory import Trajectory


@register_credit("grpo")
class GRPO(CreditMethod):
    def assign(self, groups: Sequence[Sequence[Trajectory]]) -> CreditOutput:
        out = [[broadcast(t, a) for t, a in zip(group, adv)]
               for group, adv in zip(groups, group_outcome_advantages(groups, self.config))]
        return CreditOutput(out, {EXTRA_TOKENS: 0})
