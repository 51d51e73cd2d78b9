"""Episodes on disk: what the policy saw and did, a few per RL step and per evaluation.

    records = step_records(trajs, advantages, notes, tokenizer, n)   # the step's trained episodes
    records = eval_records(trajs, tokenizer, n)                      # greedy held-out episodes
    write(root, "step_3", records)                                   # W/episodes/step_3.jsonl
    read(root / "episodes" / "step_3.jsonl")                         # the records back

With train.dump_episodes = N, the trainer writes N of each step's trained episodes (W/episodes/step_<k>.jsonl,
k the step's number in metrics.jsonl) and N of each evaluation's (W/episodes/eval_<k>.jsonl, k the step
evaluated), one JSON object per line:

    task, seed, uid, success, reward, termination
    text       the whole token sequence decoded with special tokens kept, exactly as the policy saw it
    tokens     its token ids: what the rollout wrote re-encodes from `text` piece by piece; a policy
               response re-encodes to its sampled ids when they are the tokenizer's own encoding of it
               (a sampled tokenization need not be)
    turns[t]   action, response (the policy's text), observation, valid, reward, policy_tokens,
               advantage (mean over the turn's policy tokens; null in an evaluation), span
               ([a, b): the response's characters in `text`)
    credit     the credit method's own fields for this episode (`CreditOutput.notes`; ProVer: the
               segment, delta, acceptance, bonus and up to `credit.common.NOTED_CONTINUATIONS`
               continuations per boundary)

Which episodes: those with credit notes first (the ones a method singled out), then round-robin over the
groups (each group's first episode, then each group's second, ...), so N < the batch covers many tasks.
Every process offers its first N and process 0 writes the first N of all.
"""

from __future__ import annotations

import json
from typing import Sequence

import numpy as np

from prover_jax import distributed as dist
from prover_jax.rollout.trajectory import Trajectory
from prover_jax.training.workdir import write_atomic

FOLDER = "episodes"


def decode(tokenizer, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def record(traj: Trajectory, tokenizer, advantage: np.ndarray | None = None, credit: dict | None = None) -> dict:
    """One episode as a JSON-able dict (module docstring); `advantage` float [len(tokens)] or None."""
    text = decode(tokenizer, traj.tokens)
    turns = []
    for turn in traj.turns:
        a = len(decode(tokenizer, traj.tokens[:turn.start]))
        b = len(decode(tokenizer, traj.tokens[:turn.end]))
        n = turn.end - turn.start
        adv = None if advantage is None or n == 0 else float(np.mean(advantage[turn.start:turn.end]))
        turns.append({"action": turn.action, "response": turn.response, "observation": turn.observation,
                      "valid": bool(turn.valid), "reward": float(turn.reward), "policy_tokens": n,
                      "advantage": adv, "span": [a, b]})
    return {"task": traj.task, "seed": int(traj.seed), "uid": int(traj.uid), "success": bool(traj.success),
            "reward": float(traj.score), "termination": traj.termination, "text": text,
            "tokens": [int(x) for x in traj.tokens], "turns": turns,
            "credit": credit or {}}


def order(groups: Sequence[Sequence[Trajectory]], noted: set[int]) -> list[tuple[int, int]]:
    """(group, index) pairs: the noted episodes (by uid) first, then round-robin over the groups."""
    first = [(g, i) for g, group in enumerate(groups) for i, t in enumerate(group) if t.uid in noted]
    width = max((len(group) for group in groups), default=0)
    rest = [(g, i) for i in range(width) for g, group in enumerate(groups)
            if i < len(group) and (g, i) not in first]
    return first + rest


def step_records(groups: Sequence[Sequence[Trajectory]], advantages: Sequence[Sequence[np.ndarray]],
                 notes: dict[int, dict], tokenizer, n: int, trained: set[int] | None = None) -> list[dict]:
    """Up to n records of the step's groups (with the advantages trained on); `trained`: the uids in
    the loss (others are skipped), None for all."""
    out = []
    for g, i in order(groups, set(notes)):
        t = groups[g][i]
        if trained is not None and t.uid not in trained:
            continue
        if len(out) == n:
            break
        out.append(record(t, tokenizer, advantages[g][i], notes.get(t.uid)))
    return out


def eval_records(trajs: Sequence[Trajectory], tokenizer, n: int) -> list[dict]:
    return [record(t, tokenizer) for t in list(trajs)[:n]]


def write(root, name: str, records: list[dict], n: int) -> None:
    """The first n records over every process, written by process 0 to W/episodes/<name>.jsonl
    (every process must call it)."""
    every = [r for part in dist.allgather_json(records) for r in part][:n]
    if not dist.is_primary():
        return
    folder = root / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / f"{name}.jsonl", "".join(json.dumps(r) + "\n" for r in every))


def read(path) -> list[dict]:
    """The records of one episode file; a line that is not a JSON object raises naming the file and line."""
    out = []
    with open(path) as f:
        for k, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{k}: not a JSON episode record ({e.msg})") from None
            if not isinstance(row, dict) or "turns" not in row:
                raise ValueError(f"{path}:{k}: not an episode record (no `turns`)")
            out.append(row)
    return out
