"""The engine's jitted device programs, built once per engine shape in a process and shared.

    programs = Programs.of(model, slots=32, max_target_length=2048, cache_dtype=jnp.bfloat16, mesh=mesh,
                           stop_strings=8)
    state = programs.init_state()
    prefix = programs.prefill(params, cache_R, tokens_RxT, ...)        # engine_fns.prefill_rows
    state, result = programs.generate(params, state, table, steps, allowed_SxW)

A jitted program holds its compiled executables (XLA:CPU maps each program's kernels into memory,
bench/RESULTS.md), so engines of the same shape, the model's graph (not its weights), the slots, the
cache length and dtype, the mesh and the stop-string rows, take the same `Programs`: several trainers in
one process (bench/rl_step.py) compile the sampler once, not once each. The programs close over the
graph and an abstract copy of the model (shapes only, no weights); the weights are always an argument.
A set lives while an engine holds it (a weak table), and its executables go with it.
"""

from __future__ import annotations

import weakref
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from prover_jax.sampling.engine_fns import (decode_steps, extract_slot, init_state, insert_samples, prefill_rows,
                                            state_axes)
from prover_jax.sampling.engine_types import DecodeState
from prover_jax.sampling.rows import CacheRows
from prover_jax.sharding import tree_shardings

_SHARED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # shape key -> Programs


class Programs:
    """The jitted programs of engines of one shape (module docstring): init_state, prefill, generate,
    insert, extract, deactivate, and the cache rows' stacking (`rows`)."""

    @classmethod
    def of(cls, model: Any, *, slots: int, max_target_length: int, cache_dtype: Any, mesh: Mesh | None,
           stop_strings: int) -> "Programs":
        """The process's Programs for this shape, built on first use."""
        graphdef = nnx.graphdef(model)
        key = (graphdef, int(slots), int(max_target_length), jnp.dtype(cache_dtype), mesh, int(stop_strings))
        try:
            hash(key)
        except TypeError:  # a graph with an unhashable static attribute: this engine's own programs
            return cls(model, *key)
        programs = _SHARED.get(key)
        if programs is None:
            programs = cls(model, *key)
            _SHARED[key] = programs
        return programs

    def __init__(self, model: Any, graphdef: Any, slots: int, max_target_length: int, cache_dtype: Any,
                 mesh: Mesh | None, stop_strings: int):
        # the programs read this copy's config and cache layout (shapes only), never weights
        abstract = nnx.merge(graphdef, jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
                                                    nnx.state(model)))
        length = int(max_target_length)

        def init():
            return init_state(abstract, slots, length, cache_dtype, stop_strings)

        def prefill(params, cache, *args):
            return prefill_rows(nnx.merge(graphdef, params), cache, *args)

        def generate(params, state: DecodeState, table, steps: int, allowed_SxW):
            state, r = decode_steps(nnx.merge(graphdef, params), state, table, steps, allowed_SxW, length)
            if steps == 1:  # [slots] results cut in the program (eagerly: three dispatches per call)
                r = r.replace(tokens=r.tokens[0], logprobs=r.logprobs[0], valid=r.valid[0])
            return state, r

        self.init_fn = init  # unjitted: prover-aot traces it for the state's shapes
        state_sh = None
        if mesh is not None:
            axes = state_axes(abstract, mesh.shape.get("tensor", 1))
            state_sh = tree_shardings(axes, jax.eval_shape(init), mesh)
        self.state_shardings = state_sh  # the decode state's layout (None: no mesh)
        self.rows = CacheRows(abstract, length, cache_dtype, mesh)
        self.init_state = jax.jit(init, out_shardings=state_sh)
        self.prefill = jax.jit(prefill)
        self.generate = jax.jit(generate, donate_argnums=(1,), static_argnums=(3,),
                                out_shardings=None if state_sh is None else (state_sh, None))
        self.insert = jax.jit(insert_samples, donate_argnums=(1,), out_shardings=state_sh)
        self.extract = jax.jit(extract_slot, out_shardings=self.rows.prefix_shardings())  # ready to stack
        self.deactivate = jax.jit(lambda s, slot: s.replace(active_S=s.active_S.at[slot].set(False)),
                                  donate_argnums=(0,), out_shardings=state_sh)

    def compiled_shapes(self) -> dict[str, int]:
        """Number of compiled variants per entry point, over every engine that shares these programs."""
        return {name: fn._cache_size() for name, fn in (("prefill", self.prefill), ("generate", self.generate),
                                                        ("insert", self.insert))}
