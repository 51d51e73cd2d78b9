"""`random`: a uniformly random valid segment (the paper's ablation baseline).

Uniform over all valid (l, r) pairs of the successful trajectory (see `base.valid_segments`), drawn
with the caller's numpy Generator; 'no_candidate' when the trajectory has none (e.g. one turn, or every
non-terminal turn invalid). Ignores the failed trajectories.
"""

from __future__ import annotations

import numpy as np

from prover_jax.judges.base import NO_CANDIDATE, Judge, Proposal, register, valid_segments


@register("random")
class RandomJudge(Judge):
    local = True

    def _propose(self, success, failures, *, max_segment_turns: int, rng: np.random.Generator) -> Proposal:
        candidates = valid_segments(success, max_segment_turns)
        if not candidates:
            return Proposal(None, NO_CANDIDATE, rationale="no valid segment in the successful trajectory")
        l, r = candidates[int(rng.integers(len(candidates)))]
        return Proposal((l, r), rationale=f"uniform over {len(candidates)} valid segments")
