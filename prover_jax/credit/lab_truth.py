"""Exact ground truth for the credit lab (`prover_jax.credit.lab`): a fixed stochastic policy played in a
built-in env without any model, its episodes as `Trajectory` records, and A(s_t, a_t) by dynamic programming.

    policy = mixture_policy(env, eps)                  # (1 - eps) expert + eps uniform over admissible
    group = play_group(env, policy, task_seed, G, rng, uids)
    values, advantages = exact_advantages(env, policy, traj, memo)

V(s) is `envs.testing.dp.success_probability` under the same policy; Q(s_t, a_t) = V(s_{t+1}) (for the last turn:
the episode's success), so A_t = V(s_{t+1}) - V(s_t). Each turn has `tokens_per_turn` synthetic policy
tokens (a token-level advantage maps back to its turn) and a few observation tokens; snapshots[t] is the
state before turn t and snapshots[T] the final state, as the rollout records them.
"""

from __future__ import annotations

import itertools
import zlib
from typing import Any, Iterator, Sequence

import numpy as np

from prover_jax.envs.base import Env
from prover_jax.envs.testing import dp
from prover_jax.rollout.trajectory import DONE, Trajectory, Turn

PROMPT_TOKENS, OBS_TOKENS = 4, 2


def mixture_policy(env: Env, eps: float) -> dp.Policy:
    """pi(a | s) = (1 - eps) 1[a = expert(s)] + eps / |A(s)| over the admissible actions A(s).

    The expert is `info["expert"]` when the env reports it (household), else `env.expert_action()`
    (then `env` must be in the state the (obs, info) came from, as in dp and PolicyVerifier). Admissible
    entries that are templates rather than actions (containing '...', e.g. shop's 'search[...]') are left
    out; an env without an admissible list cannot host the uniform part."""
    if not 0.0 <= eps <= 1.0:
        raise ValueError(f"eps must be in [0, 1], got {eps}")

    def policy(obs: str, info: dict) -> dict[str, float]:
        expert = info["expert"] if "expert" in info else env.expert_action()
        if info.get("admissible") is None:
            raise ValueError(f"env {env.name!r} has no admissible-action list: no uniform part to mix in")
        actions = [a for a in info["admissible"] if "..." not in a]
        if expert is None and not actions:
            raise ValueError("no expert action and no admissible action in this state")
        if expert is None:
            return {a: 1.0 / len(actions) for a in actions}
        out = {a: eps / len(actions) for a in actions} if actions else {}
        out[expert] = out.get(expert, 0.0) + (1.0 - eps if actions else 1.0)
        return out

    return policy


def sample_action(policy: dp.Policy, obs: str, info: dict, rng: np.random.Generator) -> tuple[str, float]:
    probs = policy(obs, info)
    actions = list(probs)
    i = rng.choice(len(actions), p=np.asarray([probs[a] for a in actions], np.float64))
    return actions[i], float(probs[actions[i]])


def play_episode(env: Env, policy: dp.Policy, seed: int, uid: int, rng: np.random.Generator,
                 tokens_per_turn: int = 3, parent: Trajectory | None = None, turn: int = 0) -> Trajectory:
    """One episode of task `seed`, recorded like the rollout does (see module docstring); with `parent`
    and turn > 0, a continuation of `parent` from the start of turn `turn` (its history inherited, as
    `Rollout.continue_many` records one). The (obs, info) shown before each turn are kept in
    `traj.lab_views` (the policy's inputs, which dp needs)."""
    if parent is None or turn == 0:
        obs, info = env.reset(seed)
        traj = Trajectory(env=env.name, seed=int(seed), uid=int(uid), task=obs,
                          parent=None if parent is None else (parent.uid, 0))
        traj.append(range(PROMPT_TOKENS), policy=False)
        traj.snapshots.append(env.snapshot())
        views = [(obs, info)]
    else:
        cut = parent.turns[turn].start
        traj = Trajectory(env=parent.env, seed=parent.seed, uid=int(uid), task=parent.task,
                          tokens=parent.tokens[:cut], policy_mask=parent.policy_mask[:cut],
                          logprobs=parent.logprobs[:cut], turns=parent.turns[:turn],
                          snapshots=parent.snapshots[:turn + 1], parent=(parent.uid, turn))
        views = list(parent.lab_views[:turn + 1])
        env.restore(traj.snapshots[turn])
        obs, info = views[turn]
    done, cap = False, 10 * env.prompt.max_turns + 10
    while not done:
        if traj.num_turns >= cap:
            raise RuntimeError(f"{env.name} episode of task {seed} did not end after {cap} turns")
        action, p = sample_action(policy, obs, info, rng)
        obs, reward, done, info = env.step(action)
        start = len(traj.tokens)
        ids = [16 + (zlib.crc32(action.encode()) + k) % 1000 for k in range(tokens_per_turn)]
        traj.append(ids, policy=True, logprobs=[np.log(p) / tokens_per_turn] * tokens_per_turn)
        traj.turns.append(Turn(start, len(traj.tokens), env.render_action(action), action,
                               bool(info.get("valid", True)), obs, float(reward), "stop"))
        traj.snapshots.append(env.snapshot())
        views.append((obs, info))
        if not done:
            traj.append([1] * OBS_TOKENS, policy=False)
    traj.success, traj.score = bool(info["success"]), float(info.get("score", float(info["success"])))
    traj.termination = DONE
    traj.lab_views = views  # plain attribute: not part of the Trajectory record
    return traj


class TrajectoryVerifier:
    """Like `PolicyVerifier` (the same policy in the same env), but its continuations are `Trajectory`
    records (`play_episode` from the start turn): for methods that train on extra episodes."""

    def __init__(self, env: Env, policy: dp.Policy, seed: int = 0, tokens_per_turn: int = 3,
                 uids: Iterator[int] | None = None):
        self.env, self.policy, self.tokens_per_turn = env, policy, tokens_per_turn
        self.rng = np.random.default_rng(seed)
        self.uids = itertools.count(1 << 40) if uids is None else uids

    def run(self, starts: Sequence[tuple[Trajectory, int, int]]) -> list[list[Trajectory]]:
        return [[play_episode(self.env, self.policy, traj.seed, next(self.uids), self.rng, self.tokens_per_turn,
                              parent=traj, turn=turn) for _ in range(k)] for traj, turn, k in starts]


def play_group(env: Env, policy: dp.Policy, seed: int, size: int, rng: np.random.Generator,
               uids: Iterator[int] | None = None, tokens_per_turn: int = 3) -> list[Trajectory]:
    uids = itertools.count() if uids is None else uids
    return [play_episode(env, policy, seed, next(uids), rng, tokens_per_turn) for _ in range(size)]


def state_value(env: Env, policy: dp.Policy, snapshot: Any, obs: str, info: dict, memo: dict) -> float:
    """V(snapshot) by exact dp (the env restored first: a policy may read the env's state)."""
    env.restore(snapshot)
    return dp.success_probability(env, policy, snapshot, obs, info, _memo=memo)


def exact_advantages(env: Env, policy: dp.Policy, traj: Trajectory, memo: dict) -> tuple[np.ndarray, np.ndarray]:
    """(V [T+1], A [T]): V[t] = V(s_t) for t < T, V[T] = the episode's success; A[t] = Q(s_t, a_t) - V(s_t)
    = V[t+1] - V[t]. `memo` is the dp memo of this policy (shared by every task: snapshots carry the seed)."""
    T = traj.num_turns
    v = np.empty(T + 1, np.float64)
    for t in range(T):
        v[t] = state_value(env, policy, traj.snapshots[t], *traj.lab_views[t], memo)
    v[T] = float(traj.success)
    return v, np.diff(v)


def turn_credit(traj: Trajectory, advantages: np.ndarray) -> np.ndarray:
    """float [T]: the mean per-token advantage over each turn's policy tokens."""
    adv = np.asarray(advantages, np.float64)
    return np.asarray([adv[t.start:t.end].mean() if t.end > t.start else 0.0 for t in traj.turns])


class RecordingVerifier:
    """Wraps a verifier (e.g. `PolicyVerifier`): counts the env steps of its continuations and records, per
    call, every start's (uid, turn, mean success) for the segment estimates."""

    def __init__(self, verifier):
        self.verifier, self.steps, self.calls = verifier, 0, []

    def run(self, starts: Sequence[tuple[Trajectory, int, int]]):
        out = self.verifier.run(starts)
        record = []
        for (traj, turn, _), runs in zip(starts, out):
            # an Outcome counts its turns; a Trajectory continuation its turns after the start
            self.steps += sum(c.turns if isinstance(c.turns, int) else len(c.turns) - turn for c in runs)
            record.append((traj.uid, int(turn), float(np.mean([c.success for c in runs])) if runs else np.nan))
        self.calls.append(record)
        return out

    def segments(self) -> list[tuple[int, int, int, float]]:
        """(uid, t_a, t_b, estimated V(s_b) - V(s_a)) for consecutive distinct start turns of one trajectory
        within one call (ProVer: its (s_pre, s_post) pair; a chain of cut points: each link)."""
        out = []
        for record in self.calls:
            by_uid: dict[int, dict[int, list[float]]] = {}
            for uid, turn, mean in record:
                by_uid.setdefault(uid, {}).setdefault(turn, []).append(mean)
            for uid, turns in by_uid.items():
                ts = sorted(turns)
                for a, b in zip(ts, ts[1:]):
                    out.append((uid, a, b, float(np.mean(turns[b]) - np.mean(turns[a]))))
        return out


# ------------------------------------------------------------------------------------------------ metrics

def ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties get their average rank."""
    x = np.asarray(x, np.float64)
    uniq, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return (start + (counts + 1) / 2.0)[inv]


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation; NaN when either side is constant (or has < 2 values)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(np.corrcoef(ranks(x), ranks(y))[0, 1])


def credit_metrics(truth: Sequence[np.ndarray], credit: Sequence[np.ndarray], baseline: Sequence[float],
                   threshold: float) -> dict[str, float]:
    """Per-turn credit against the true advantage, episodes as lists of [T] arrays (see `lab` for the
    definitions); baseline[i] is episode i's group-level (GRPO) advantage."""
    a, c = np.concatenate(truth), np.concatenate(credit)
    turn_part = np.concatenate([ci - b for ci, b in zip(credit, baseline)])
    piv = np.abs(a) > threshold
    moved = piv & (turn_part != 0)
    within = []
    for ai, ci in zip(truth, credit):
        if len(ai) >= 2 and np.ptp(ai) > 0:
            within.append(0.0 if np.ptp(ci) == 0 else spearman(ci, ai))
    mass = lambda v: float(np.abs(v[piv]).sum() / np.abs(v).sum()) if np.abs(v).sum() > 0 else float("nan")
    return {"spearman": spearman(c, a),
            "spearman_within": float(np.mean(within)) if within else float("nan"),
            "pivotal_mass": mass(c),
            "sign_agreement": float(np.mean(np.sign(c[piv]) == np.sign(a[piv]))) if piv.any() else float("nan"),
            "turn_pivotal_mass": mass(turn_part),
            "turn_sign": (float(np.mean(np.sign(turn_part[moved]) == np.sign(a[moved]))) if moved.any()
                          else float("nan"))}
