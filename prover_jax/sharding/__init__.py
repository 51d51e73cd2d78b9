"""Logical axis names -> mesh axes (ONE rules table), mesh construction, parameter shardings."""

from prover_jax.sharding.rules import (LOGICAL_RULES, MESH_AXES, constrain, fit_spec, logical_to_spec,
                                       make_mesh, named_sharding, place, tree_shardings)

__all__ = ["LOGICAL_RULES", "MESH_AXES", "constrain", "fit_spec", "logical_to_spec", "make_mesh",
           "named_sharding", "place", "tree_shardings"]
