import os
import tempfile

import pytest

from helpers import TEST_XLA_FLAGS

# 8 simulated CPU devices for sharding tests, compiled fast (see helpers.TEST_XLA_FLAGS); must be set
# before jax initialises. Processes the tests start inherit both.
os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count=8 {TEST_XLA_FLAGS}")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One persistent compilation cache per `pytest` run, shared by its workers and the processes they start:
# many tests build the same tiny models and trainers, and most of their time is XLA compiling.
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID") or str(os.getpid())
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"prover-jax-tests-{_RUN}"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")

# `make test` runs the suite in two lanes, each test in one (PROVER_TEST_LANE; unset = every test): the
# model, its sharding, rollouts and training, the simulated pod included, on Python 3.12 / jax 0.12 (what
# pod workers resolve); everything else (sampling, serving, credit, environments, judges, compare, TPU
# compilation, conversion, launch, bench) on Python 3.11 / jax 0.10. Both lanes build, sample from and
# train models, so an API change of either jax or flax fails in both.
LANES = {"jax010": (), "jax012": ("models", "sharding", "rollout", "training")}
LANE = os.environ.get("PROVER_TEST_LANE", "")


def lane_of(path) -> str:
    """The lane of a test file: jax012 for the folders listed there, jax010 for the rest."""
    rel = os.path.relpath(str(path), os.path.dirname(os.path.abspath(__file__)))
    return "jax012" if rel.split(os.sep)[0] in LANES["jax012"] else "jax010"


def pytest_configure(config):
    if LANE and LANE not in LANES:
        raise pytest.UsageError(f"PROVER_TEST_LANE={LANE!r}; expected one of {sorted(LANES)} or unset")


def pytest_collection_modifyitems(config, items):
    if not LANE:
        return
    keep = [item for item in items if lane_of(item.path) == LANE]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if lane_of(item.path) != LANE])
        items[:] = keep

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
