"""Credit assignment: per-token advantages from task groups, one registry of named methods
(`grpo`, `prover`, and the baselines `budget_grpo`, `gigpo`, `spo_chain`, `critic`).

    from prover_jax.credit import credit_class, make_credit
    needs = credit_class(name).needs(config.credit, groups, group_size)   # what to wire

The contract is `base.py` (CreditMethod, Needs, the registry), the shared maths `common.py`, and
`overlap.py` for methods whose continuations the step pipeline (`pipeline.py`) overlaps with the rollout.
"""

# importing a method's (or a critic's) module registers it
from prover_jax.credit import (budget_grpo, critic, critic_llm, critic_oracle, critic_rules, gigpo, grpo,  # noqa: F401
                               prover, spo_chain)
from prover_jax.credit.base import (COMMON_METRICS, EXTRA_TOKENS, CreditMethod, CreditOutput, Figure, Needs,
                                    credit_class, credit_names, make_credit, register_credit)
from prover_jax.credit.common import group_outcome_advantages, outcome_advantages, rewards, std_scope
from prover_jax.credit.overlap import OverlapCredit
from prover_jax.credit.verify import PolicyVerifier, RolloutVerifier

__all__ = ["COMMON_METRICS", "EXTRA_TOKENS", "CreditMethod", "CreditOutput", "Figure", "Needs", "OverlapCredit",
           "PolicyVerifier", "RolloutVerifier", "credit_class", "credit_names", "group_outcome_advantages",
           "outcome_advantages", "std_scope", "make_credit", "register_credit", "rewards"]
