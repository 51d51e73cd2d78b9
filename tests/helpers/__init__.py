"""What several test files share: tiny models and configs, HF checkpoints, the serving checkpoint, credit
fakes. pytest puts `tests/` (tests/conftest.py's folder, prepend import mode) on the import path, so any
test imports these as `from helpers.tiny import tiny_config`. The session fixtures are in tests/conftest.py.

demo_config.py and aot_config.py are also prover config files (`--config=tests/helpers/demo_config.py:pod`)
that the processes a test starts load by path: they import nothing from the tests."""
