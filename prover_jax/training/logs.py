"""Console logging of the entry points (prover-train, `make demo`, prover-compare): third-party INFO
chatter off unless `--third_party_logs` is given.

    quiet_third_party(FLAGS.third_party_logs)     # first thing in main(), after absl parsed the flags

Orbax logs every checkpoint save at INFO (~40 lines each) through absl's logger, the logger this
project's own lines use too: records below WARNING on the `absl` logger are dropped unless they come
from a prover_jax file, and the other libraries' loggers (THIRD_PARTY) are set to WARNING. Their
warnings and errors always show. `--third_party_logs` (or verbose=True) restores INFO everywhere.
"""

from __future__ import annotations

import logging
import os

from absl import flags

flags.DEFINE_bool("third_party_logs", False, "Show the INFO logging of orbax, jax, absl, grain, etils, "
                  "HTTP clients, ... (default: their warnings and errors only).")

THIRD_PARTY = ("orbax", "jax", "jaxlib", "flax", "etils", "grain", "tensorstore", "urllib3", "httpx",
               "httpcore", "openai", "fsspec", "gcsfs", "google", "filelock", "huggingface_hub",
               "transformers", "tokenizers", "tensorboardX", "matplotlib", "PIL")
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class _OwnOrWarning(logging.Filter):
    """On the `absl` logger: a prover_jax file's records, and everyone's warnings and errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or os.path.abspath(record.pathname).startswith(_PACKAGE)


_FILTER = _OwnOrWarning()


def quiet_third_party(verbose: bool = False) -> None:
    """Third-party loggers at WARNING (verbose: INFO); idempotent."""
    absl_logger = logging.getLogger("absl")
    absl_logger.removeFilter(_FILTER)
    if not verbose:
        absl_logger.addFilter(_FILTER)
    for name in THIRD_PARTY:
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.WARNING)
