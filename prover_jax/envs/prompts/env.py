"""`prompts`: single-turn prompt tasks with a reward function, the GSM8K-style setting of TRL, verl and Tunix.

    make("prompts", path="gsm8k.jsonl", reward_fn="gsm8k")          # JSONL rows {"question", "answer"}
    make("prompts", path="/data/gsm8k", split="train", eval_split="test", reward_fn="my.module:fn")

One episode is one turn: the observation is the row's prompt (`prompt_field`), the policy's whole reply
(up to its end token, reasoning removed by the rollout when thinking) is the completion, and
reward = reward_fn(completion, row), with the row's answer (`answer_field`) also under row["answer"]
(`rewards.reward_fn`: exact_match, gsm8k, or module:function). success = reward >= success_threshold;
score = reward. An empty reply is an invalid turn (reward 0). The expert (SFT) answers with the row's
answer text. Data and splits: `data.load`. Credit methods that credit parts of an episode between turns
(`Needs.several_turns`) are refused on it by name.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from prover_jax.envs.base import Env, PromptSpec, info_dict, register, split_seed
from prover_jax.envs.prompts import data
from prover_jax.envs.prompts.rewards import reward_fn as resolve_reward
from prover_jax.envs.splits import EVAL_FRACTION

SYSTEM = {"gsm8k": "Solve the problem step by step. End your reply with the final answer on its own line as "
                   "'#### <number>'.",
          "exact_match": "Reply with the answer only."}
DEFAULT_SYSTEM = "Answer the user's request."
_CACHE: dict[tuple, tuple] = {}
_LOCK = threading.Lock()


@register("prompts")
class Prompts(Env):
    name = "prompts"

    def __init__(self, path: str = "", split: str = "train", eval_split: str = "test", eval_path: str = "",
                 eval_fraction: float = EVAL_FRACTION, prompt_field: str = "question", answer_field: str = "answer",
                 reward_fn: str = "exact_match", system_prompt: str = "", success_threshold: float = 1.0,
                 max_turns: int = 1):
        if int(max_turns) != 1:
            raise ValueError(f"prompts: env.kwargs.max_turns={max_turns}; a prompt task is one turn")
        key = (path, split, eval_split, eval_path, float(eval_fraction), prompt_field, answer_field)
        with _LOCK:
            if key not in _CACHE:
                _CACHE[key] = data.load(path, split, eval_split, eval_path, eval_fraction, prompt_field, answer_field)
        self.rows, self.split = _CACHE[key]
        self.prompt_field, self.answer_field = prompt_field, answer_field
        self.reward_name, self.reward = str(reward_fn), resolve_reward(reward_fn)
        self.threshold = float(success_threshold)
        self._prompt = PromptSpec(system=system_prompt or SYSTEM.get(self.reward_name, DEFAULT_SYSTEM),
                                  stop_strings=(), max_turns=1, show_admissible=False)
        self.index, self.done, self.last = None, False, 0.0

    @property
    def prompt(self) -> PromptSpec:
        return self._prompt

    def _row(self) -> dict:
        row = self.rows[self.index]
        return {**row, "answer": row[self.answer_field]}

    def reset(self, seed: int) -> tuple[str, dict]:
        self.index, self.done, self.last = self.split.index(seed), False, 0.0
        return self.rows[self.index][self.prompt_field], info_dict()

    def extract_action(self, response: str) -> str | None:
        return response.strip() or None

    def render_action(self, action: str) -> str:
        return action

    def step(self, action: str | None) -> tuple[str, float, bool, dict]:
        if self.index is None:
            raise RuntimeError("prompts: step before reset")
        if self.done:
            return "The task is over.", 0.0, True, info_dict(success=self.last >= self.threshold, score=self.last,
                                                             valid=False)
        self.done = True
        if action is None:
            self.last = 0.0
            return "The reply was empty.", 0.0, True, info_dict(valid=False, score=0.0)
        try:
            reward = float(self.reward(action, self._row()))
        except Exception as e:  # noqa: BLE001 - a user function: name it and the task
            raise ValueError(f"prompts: env.kwargs.reward_fn={self.reward_name!r} failed on task "
                             f"{self.split.ids[self.index]} ({type(e).__name__}: {e})") from e
        if not math.isfinite(reward):
            raise ValueError(f"prompts: env.kwargs.reward_fn={self.reward_name!r} returned {reward}")
        self.last = reward
        return "", reward, True, info_dict(success=reward >= self.threshold, score=reward)

    def expert_action(self) -> str | None:
        return None if self.done or self.index is None else str(self.rows[self.index][self.answer_field])

    def snapshot(self) -> Any:
        return (self.index, self.done, self.last)

    def restore(self, snapshot: Any) -> None:
        self.index, self.done, self.last = snapshot

    def task_id(self, seed: int, split: str = "train") -> str:
        return self.split.task_id(split_seed(seed, split))

    def split_sizes(self) -> dict[str, int | None]:
        return self.split.sizes()
