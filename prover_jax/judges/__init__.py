"""Judges: propose the pivotal segment of a successful trajectory for ProVer (see `base`).

    from prover_jax.judges import make_judge
    judge = make_judge(config.judge.name, config.judge, workdir)
    judge.begin_step()
    proposal = judge.propose(success, failures, max_segment_turns=4, rng=rng)

Built-in judges: random (uniform valid segment), contrastive (the departure from the failed runs that
most of them share, no LLM), oracle (the pivot the failed runs most often got wrong, from the env's
privileged rules; built with env_name / env_kwargs, see `needs_env`), openai (agentic LLM judge;
imported on first use).
"""

from prover_jax.judges.base import (API_ERROR, BUDGET, INVALID_ACTION, JUDGE_ERROR, NO_CANDIDATE,
                                    NO_PROPOSAL, NO_TOOL_CALL, OK, OUT_OF_BOUNDS, RATE_LIMITED, SCHEMA,
                                    TERMINAL, TIMEOUT, TOO_LONG, Judge, Proposal, make_judge, names, needs_env,
                                    register, render_trajectory, segment_problem, summarize,
                                    valid_segments, validate_segment)
from prover_jax.judges.contrastive import ContrastiveJudge
from prover_jax.judges.random_judge import RandomJudge

__all__ = ["API_ERROR", "BUDGET", "INVALID_ACTION", "JUDGE_ERROR", "NO_CANDIDATE", "NO_PROPOSAL",
           "NO_TOOL_CALL", "OK", "OUT_OF_BOUNDS", "RATE_LIMITED", "SCHEMA", "TERMINAL", "TIMEOUT", "TOO_LONG",
           "ContrastiveJudge", "Judge", "Proposal", "RandomJudge", "make_judge", "names", "needs_env", "register",
           "render_trajectory", "segment_problem", "summarize", "valid_segments", "validate_segment"]
