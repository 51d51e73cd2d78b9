"""Qwen3.5-2B on ALFWorld, the real text engine (GRPO + ProVer).

    prover-train --config=configs/qwen3_5_2b_alfworld.py[:POD] --workdir=gs://BUCKET/run

POD: one of ARGS (layouts and the default in configs/_pod.py).
Data: $ALFWORLD_DATA (the downloaded ALFWorld data) on every worker.
"""

import os
import runpy

_pod = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_pod.py"))
SIZE = "2B"
ARGS = _pod["pods"](SIZE)  # accepted config-string arguments (accelerator types)


def get_config(pod: str | None = None):
    return _pod["make"](SIZE, "alfworld", pod)
