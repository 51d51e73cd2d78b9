"""What several test files share: tiny models and configs, HF checkpoints, the serving checkpoint, credit
fakes. pytest puts `tests/` (tests/conftest.py's folder, prepend import mode) on the import path, so any
test imports these as `from helpers.tiny import tiny_config`. The session fixtures are in tests/conftest.py.

demo_config.py and aot_config.py are also prover config files (`--config=tests/helpers/demo_config.py:pod`)
that the processes a test starts load by path: they import nothing from the tests."""

# XLA's CPU backend at its lowest optimisation level: the suite's time is mostly compiling many small
# programs that then run for milliseconds (measured: XLA compile time of tests/models/test_runtime.py
# 249 s -> 162 s). Numerics are IEEE either way (no fast math on CPU).
TEST_XLA_FLAGS = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
