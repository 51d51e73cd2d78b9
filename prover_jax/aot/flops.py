"""Matmul flops of a traced program, loops counted per iteration.

XLA's `cost_analysis()` counts the body of a while loop ONCE (a scan over layers or micro-batches is
undercounted by its trip count), so `prover-aot` counts flops on the jaxpr instead:

    flops = sum over dot_general equations of 2 * |batch| * |lhs free| * |contract| * |rhs free|

recursing into nested jaxprs: a scan's body times its length, a cond's costliest branch, remat,
pjit and custom-vjp bodies once; a while loop's body once (its trip count is not static) and counted
in `while_loops`. Elementwise work is ignored (a few % of a transformer step). Pallas kernels count
what their `cost_estimate` says, when they give one.
"""

from __future__ import annotations

import math

import numpy as np


def sub_jaxprs(params: dict):
    """The jaxprs nested in an equation's params (scan / cond / pjit / remat bodies), on jax 0.10 and
    0.12 alike (jax.core.jaxprs_in_params is gone in 0.12)."""
    for v in params.values():
        for x in v if isinstance(v, (tuple, list)) else (v,):
            if hasattr(x, "eqns"):
                yield x
            elif hasattr(getattr(x, "jaxpr", None), "eqns"):
                yield x.jaxpr


def equations(jaxpr):
    """Every equation of `jaxpr` and of the jaxprs nested in it (each body once)."""
    todo = [getattr(jaxpr, "jaxpr", jaxpr)]
    while todo:
        j = todo.pop()
        for eqn in j.eqns:
            yield eqn
            todo.extend(sub_jaxprs(eqn.params))


def _dot_flops(eqn) -> float:
    lhs, rhs = (v.aval.shape for v in eqn.invars[:2])
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    batch = math.prod(lhs[i] for i in lb)
    contract = math.prod(lhs[i] for i in lc)
    lfree = math.prod(d for i, d in enumerate(lhs) if i not in lc and i not in lb)
    rfree = math.prod(d for i, d in enumerate(rhs) if i not in rc and i not in rb)
    return 2.0 * batch * contract * lfree * rfree


def count(jaxpr) -> dict:
    """{"flops", "while_loops", "pallas_calls", "pallas_flops"} of a Jaxpr or ClosedJaxpr (global,
    i.e. summed over devices for a sharded program)."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    out = {"flops": 0.0, "while_loops": 0, "pallas_calls": 0, "pallas_flops": 0.0}
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            out["flops"] += _dot_flops(eqn)
            continue
        if name == "pallas_call":
            out["pallas_calls"] += 1
            est = float(getattr(eqn.params.get("cost_estimate"), "flops", 0) or 0)
            out["flops"] += est
            out["pallas_flops"] += est
            continue
        subs = [count(j) for j in sub_jaxprs(eqn.params)]
        if not subs:
            continue
        if name == "cond":
            best = max(subs, key=lambda c: c["flops"])
            subs, times = [best], 1
        elif name == "scan":
            times = int(eqn.params["length"])
        else:
            times = 1
            if name == "while":
                out["while_loops"] += 1
        for c in subs:
            out["flops"] += times * c["flops"]
            out["while_loops"] += c["while_loops"]
            out["pallas_calls"] += c["pallas_calls"]
            out["pallas_flops"] += times * c["pallas_flops"]
    return out


def nbytes(tree) -> int:
    """Bytes of the arrays (or ShapeDtypeStructs) of a pytree, global shapes."""
    import jax
    return int(sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree)
                   if hasattr(x, "shape")))
