"""Log-probs of token sequences under given params, outside the train step: the reference
(loss.kl_coef > 0) and proximal (loss.tis_cap > 0) passes over a train batch, and re-scoring.

    logprob_fn = make_logprob_fn(graphdef)            # fn(params, tokens, valid, ...) -> logp [B, L]
    pass_ = LogprobPass(graphdef, mesh)               # pass_(params, batch) -> logp [M, mb, L], like the batch
"""

from __future__ import annotations

import jax
from flax import nnx

from prover_jax.training.loss import token_logprobs


def make_logprob_fn(graphdef, *, logprob_chunk: int | None = None):
    """Jitted fn(params, tokens [B, L], valid [B, L], segment_ids [B, L] | None, at [B, P] | None) ->
    logp [B, L] (0 at t = 0 and padding), for reference-policy log-probs and re-scoring;
    segment_ids for packed rows, `at` to score only those positions (0 elsewhere)."""

    @jax.jit
    def logprob_fn(params, tokens_BxL, valid_BxL, segment_ids_BxL=None, at_BxP=None):
        model = nnx.merge(graphdef, params)
        return token_logprobs(model, tokens_BxL, valid_BxL, chunk=logprob_chunk, with_entropy=False,
                              segment_ids_BxL=segment_ids_BxL, at_BxP=at_BxP)[0]

    return logprob_fn


def make_batch_logprob_fn(graphdef, *, logprob_chunk: int | None = None, out_sharding=None):
    """Jitted fn(params, rows) -> logp [M, mb, L]: `make_logprob_fn` over a train batch's micro-batches
    (lax.map), rows = {tokens, valid, and segment_ids / policy_at when the batch has them}, each
    [M, mb, .]. The reference (loss.kl_coef > 0) and proximal (loss.tis_cap > 0) log-prob pass; the
    output laid out as `out_sharding` (the batch's)."""
    one = make_logprob_fn(graphdef, logprob_chunk=logprob_chunk)
    return jax.jit(lambda p, rows: jax.lax.map(lambda r: one(p, r["tokens"], r["valid"], r.get("segment_ids"),
                                                             r.get("policy_at")), rows),
                   out_shardings=out_sharding)


LOGPROB_KEYS = ("tokens", "valid", "segment_ids", "policy_at")  # the batch keys the log-prob pass reads


class LogprobPass:
    """`make_batch_logprob_fn` on a mesh: `pass_(params, batch) -> logp [M, mb, L]` laid out like the
    batch, run by the executable `precompile` compiled for the batch's shapes, else jitted on first use.
    Precompiled executables take params laid out like the abstract ones they were compiled for."""

    def __init__(self, graphdef, mesh, logprob_chunk: int | None = None):
        self.graphdef, self.mesh, self.chunk = graphdef, mesh, logprob_chunk
        self._jitted: dict = {}  # rows' (key, shape, dtype) -> jax.jit program
        self._compiled: dict = {}  # the same keys -> executables from precompile

    @staticmethod
    def rows(batch) -> dict:
        """The batch keys the pass reads."""
        return {k: batch[k] for k in LOGPROB_KEYS if k in batch}

    def _rows(self, batch):
        rows = self.rows(batch)
        return rows, tuple((k, tuple(v.shape), str(v.dtype)) for k, v in sorted(rows.items()))

    def program(self, rows):
        """The jitted pass for rows of these shapes (one program per shape set, reused)."""
        return self._fn(self._rows(rows)[1], rows)

    def _fn(self, key, rows):
        from prover_jax.distributed.arrays import batch_sharding

        if key not in self._jitted:
            self._jitted[key] = make_batch_logprob_fn(self.graphdef, logprob_chunk=self.chunk,
                                                      out_sharding=batch_sharding(self.mesh, rows["tokens"].shape))
        return self._jitted[key]

    def precompile(self, params, batches) -> int:
        """Compiles the pass for `params` (ShapeDtypeStructs with shardings) and each abstract batch;
        returns how many were compiled."""
        n = 0
        for b in batches:
            rows, key = self._rows(b)
            if key not in self._compiled:
                self._compiled[key] = self._fn(key, rows).lower(params, rows).compile()
                n += 1
        return n

    def __call__(self, params, batch):
        rows, key = self._rows(batch)
        return (self._compiled.get(key) or self._fn(key, rows))(params, rows)
