"""The demo with more pivots: household tasks of all six ALFWorld types (clean, heat, cool, examine
in light, two objects, plain placement), longer (the expert needs 3-7 turns, the limit is 10). The
second setting of the credit-method comparison (CONFIG=configs/demo_mixed.py bash bench/compare_demo.sh).
"""

import importlib.util
import os


def get_config():
    spec = importlib.util.spec_from_file_location(
        "demo_config", os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo.py"))
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    c = demo.get_config()
    c.env.kwargs.task_type = None  # drawn from the seed among household.gen.TASK_TYPES
    c.env.kwargs.max_turns = 10  # longer tasks need more turns
    c.env.kwargs.expert_turns = (3, 7)  # the expert needs 3-7 turns
    c.tokenizer.corpus_seeds = 400  # six task types' phrasing
    c.sft.steps = 2400  # more SFT for six task types
    c.sft.episodes = 3200  # distinct demonstrations
    return c
