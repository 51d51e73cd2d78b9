"""Compiling a Driver's shapes ahead of its first request (`Driver.warmup`).

    seconds = compile_shapes(engine, params, stop_table, min_bucket, steps_per_call)

Every shape the driver can meet: prefill for each (rows, length) bucket (rows: the engine's
row_buckets; lengths `engine_types.all_lengths`: its length_buckets, else the powers of two >=
min_bucket capped at max_prefill_length), the row stacking of extensions, insert for each row bucket
of samples, extract, deactivate (a cancelled sample), and the decode call with `stop_table`.
"""

from __future__ import annotations

import time

import jax
import numpy as np

from prover_jax.sampling.engine_fns import first_row
from prover_jax.sampling.engine_types import all_lengths
from prover_jax.sampling.sampler import SamplingParams
from prover_jax.sampling.stops import StopSpec


def compile_shapes(engine, params, table, min_bucket: int, steps_per_call: int) -> float:
    """Runs each compiled program once on dummy inputs; returns the seconds it took."""
    t0 = time.perf_counter()
    lengths = all_lengths(engine.length_buckets, min_bucket, engine.max_prefill_length)
    one = first_row(engine.prefill_batch(  # a one-row prefix, as the driver's long prompts make
        params=params, padded_tokens=np.zeros((1, 1), np.int32), true_lengths=[1], samplers=[SamplingParams()],
        rngs=[0], num_samples=[1], existing_prefixes=[None]))
    for rows in engine.row_buckets:
        for n, T in enumerate(lengths):
            prefix = engine.prefill_batch(
                params=params, padded_tokens=np.zeros((rows, T), np.int32), true_lengths=[1] * rows,
                samplers=[SamplingParams()] * rows, rngs=[0] * rows, num_samples=[1] * rows,
                existing_prefixes=[one if n == 0 else None] * rows, existing_lengths=[1] * rows)
        state = engine.init_decode_state()
        for count in engine.row_buckets:  # inserts of each padded sample count of an R-row prefix
            n = min(count, engine.max_concurrent_decodes)
            state = engine.bulk_insert(prefix, state, list(range(n)), list(range(n)),
                                       stops=[StopSpec(1)] * n, stop_table=table)
    state, result = engine.generate(params, state, stop_table=table, steps=steps_per_call)
    engine.extract(state, 0)
    engine.deactivate(state, 0)  # Driver.cancel
    jax.block_until_ready(result.tokens)
    return time.perf_counter() - t0
