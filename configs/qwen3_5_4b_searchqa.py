"""Qwen3.5-4B on Search-R1 style QA over user data (GRPO + ProVer).

    prover-train --config=configs/qwen3_5_4b_searchqa.py[:POD] --workdir=gs://BUCKET/run

POD: one of ARGS (layouts and the default in configs/_pod.py).
Data on every worker: $SEARCHQA_QA (QA JSON/JSONL) and
$SEARCHQA_CORPUS (JSONL passages, local BM25) or $SEARCHQA_RETRIEVER_URL (a Search-R1 retrieval server).
"""

import os
import runpy

_pod = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_pod.py"))
SIZE = "4B"
ARGS = _pod["pods"](SIZE)  # accepted config-string arguments (accelerator types)


def get_config(pod: str | None = None):
    return _pod["make"](SIZE, "searchqa", pod)
