"""Qwen3.5-2B on searchqa: kept for existing launch commands; the same as
configs/qwen3_5.py:2B,searchqa[,SLICE].

    prover-train --config=configs/qwen3_5_2b_searchqa.py[:SLICE] --workdir=gs://BUCKET/run
"""

import os
import runpy

_qwen = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "qwen3_5.py"))
ARGS = _qwen["slices"]("2B")  # accepted config-string arguments (TPU slices)


def get_config(pod: str | None = None):
    return _qwen["make"]("2B", "searchqa", pod)
