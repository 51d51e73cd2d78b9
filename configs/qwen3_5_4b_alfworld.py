"""Qwen3.5-4B on alfworld: kept for existing launch commands; the same as
configs/qwen3_5.py:4B,alfworld[,SLICE].

    prover-train --config=configs/qwen3_5_4b_alfworld.py[:SLICE] --workdir=gs://BUCKET/run
"""

import os
import runpy

_qwen = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "qwen3_5.py"))
ARGS = _qwen["slices"]("4B")  # accepted config-string arguments (TPU slices)


def get_config(pod: str | None = None):
    return _qwen["make"]("4B", "alfworld", pod)
