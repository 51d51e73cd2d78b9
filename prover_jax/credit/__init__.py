"""Credit assignment: per-token advantages from task groups (`grpo`, `prover`), one registry.

    from prover_jax.credit import make_credit
"""

from prover_jax.credit import grpo, prover  # noqa: F401  (register the built-in methods)
from prover_jax.credit.base import (CreditMethod, CreditOutput, credit_names, group_advantages,
                                    make_credit, register_credit, rewards)
from prover_jax.credit.verify import PolicyVerifier, RolloutVerifier

__all__ = ["CreditMethod", "CreditOutput", "PolicyVerifier", "RolloutVerifier", "credit_names",
           "group_advantages", "make_credit", "register_credit", "rewards"]
