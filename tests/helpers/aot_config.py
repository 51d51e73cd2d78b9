"""prover-aot's tests' config: a tiny Qwen3.5 read from an HF folder, layers scanned, full remat, 2 x 8
rollouts in micro-batches of 8, short sequences. A prover config file too
(`--config=tests/helpers/aot_config.py:MODEL_PATH`, read by path in the processes the tests start): it
imports nothing from the tests."""

import os

from prover_jax.training.config import default_config

PATH = os.path.abspath(__file__)


def aot_config(path: str, mesh=(1, 8, 1), **kw):
    """The config; kw: SECTION__FIELD=value overrides (rollout__max_concurrent_decodes=16384)."""
    c = default_config()
    c.model.init, c.model.path, c.model.dtype = "hf", path, "bfloat16"
    c.model.scan_layers, c.train.remat = True, "full"
    c.mesh.data, c.mesh.fsdp, c.mesh.tensor = mesh
    c.rollout.groups_per_step, c.rollout.group_size, c.train.micro_batch_size = 2, 8, 8
    c.rollout.max_target_length, c.rollout.max_prefill_length = 256, 128
    c.rollout.max_concurrent_decodes = 16
    c.train.logprob_chunk = 64
    for k, v in kw.items():
        section, name = k.split("__")
        setattr(c[section], name, v)
    return c


def get_config(path: str):
    return aot_config(path)
