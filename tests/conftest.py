import os

import pytest

# 8 simulated CPU devices for sharding tests; must be set before jax initialises.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# Shared test code is the `helpers` package next to this file (pytest puts this folder on the import
# path). The fixtures below are what several test files would otherwise each build.


@pytest.fixture(scope="session")
def hf_checkpoint(tmp_path_factory):
    """hf_checkpoint(layer_types, tied=True, **overrides) -> the path of helpers.hf.make_text_checkpoint's
    folder (seed 0, fp32), written once per session and argument set. Read-only: copy it to edit it."""
    from helpers.hf import make_text_checkpoint

    made = {}

    def get(layer_types, tied=True, **overrides):
        key = (tuple(layer_types), tied, tuple(sorted(overrides.items())))
        if key not in made:
            path = tmp_path_factory.mktemp("hf_checkpoint")
            make_text_checkpoint(path, layer_types, tied=tied, **overrides)
            made[key] = str(path)
        return made[key]

    return get


@pytest.fixture(scope="session")
def household_tokenizer():
    """The BPE tokenizer (1024 ids) trained on household's corpus of seeds 0..19."""
    from prover_jax.rollout import env_corpus, train_tokenizer

    return train_tokenizer(env_corpus("household", range(20)), vocab_size=1024)


@pytest.fixture(scope="session")
def tiny_engine():
    """An Engine of helpers.tiny's model (seed 0, logits spread x30): 3 slots, prefills of 16 tokens,
    96 in all. Stateless between calls (state lives in the drivers), so tests share its compilations."""
    from helpers.tiny import tiny_model
    from prover_jax.sampling import Engine

    return Engine(tiny_model(logit_scale=30.0), max_concurrent_decodes=3, max_prefill_length=16,
                  max_target_length=96)
