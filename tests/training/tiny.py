"""The trainer tests' tiny config, at the path some files load it from; the config itself, and its
variants, live in tests/helpers/demo_config.py (read by path here, so this file also works as
`--config=tests/training/tiny.py` outside pytest)."""

import importlib.util
import os

_spec = importlib.util.spec_from_file_location(
    "demo_config", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "helpers", "demo_config.py"))
_demo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_demo)
get_config = _demo.trainer_config
