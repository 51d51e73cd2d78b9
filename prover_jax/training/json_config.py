"""A run folder's resolved configuration as a config file: `prover-train --config=W/config.json` reads it
through here (`cli.json_config_argv`), i.e. `--config=.../json_config.py:W/config.json`."""

from prover_jax.training.provenance import config_from_json


def get_config(path: str):
    return config_from_json(path)
