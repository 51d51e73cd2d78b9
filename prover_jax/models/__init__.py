"""Model families. Each folder holds config, pure modules, and its HF key-mapping table; `families` is
the table that finds a family by name or by a checkpoint folder's config.json."""

from prover_jax.models.families import (DEFAULT_FAMILY, Family, family, family_for, known_families, load_hf,
                                        read_config, register_family, save_hf)

__all__ = ["DEFAULT_FAMILY", "Family", "family", "family_for", "known_families", "load_hf", "read_config",
           "register_family", "save_hf"]
