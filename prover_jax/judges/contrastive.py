"""`contrastive`: the last point where the successful run did something that the failed runs that got
there did not (no LLM; makes offline runs meaningful).

All trajectories of a group share the task and the start state. The rule:

1. States. The state before turn t of a trajectory is its snapshot `snapshots[t]`, compared with `==`
   after dropping bookkeeping fields (`ignore_fields`, default `turn`, `note` and `done`) from dataclass
   snapshots: the built-in families count turns (and shop keeps the last step's note) inside the
   snapshot, which would otherwise make states reached at different turns never equal; `done` records
   that the episode ended, not what the world is (a failed household run cut at the turn limit gets
   done=True in its last snapshot, which would otherwise never equal the successful run's state there
   and make a false departure of a routine turn); a success is still told apart by `success`. If a
   trajectory lacks snapshots (fewer than num_turns + 1) or comparing snapshots raises, states are the
   observation history instead: (task, observation of turn 0, ..., observation of turn t-1).
2. Moves. Turn t of a trajectory moves it from state s_t to s_{t+1}. A failed run "was in an
   equivalent state" when it took a turn from a state equal to the successful run's s_t.
3. Departures. Turn u of the successful run is a (strict) departure when some failed run took a turn
   from a state equal to s_u, no failed run made the same move (s_u -> s_{u+1}) from it, and the move
   changes the state (s_{u+1} != s_u: a no-op such as an invalid action cannot be what made the
   difference). In a deterministic environment, a failed run that made the same move from the same
   state was still on the successful path, so a departure is where the successful run did something
   none of the failed runs that got there did. A departure is shared by the distinct failed runs that
   took a turn from s_u (all of which moved elsewhere).
4. Choice. The proposal is the LATEST departure: the last state the successful run shared with a
   failed run and left by a move none of them made there, where the success's path parted from theirs
   for the last time (with several pivots, the earliest departure is usually a routine difference such
   as the order of a search, shared by every run that passes the start; `bench/judge_coverage.py`).
   `choice="shared"` proposes the departure shared by the most failed runs (ties to the later turn),
   `choice="earliest"` the first one (the rule before these).
   If no turn is a departure, the loose rule: the turns u where some failed run was in a state equal
   to s_u and moved elsewhere (took a different action), each shared by the distinct failed runs that
   did so; the same choice.
5. No shared state at all: the end of the longest common action prefix with any failed run (the first
   turn where the successful run's action differs from that failed run's).
6. The segment is (t, t): one turn. If turn t is the last turn or an invalid action, the nearest
   earlier valid non-terminal turn is used; none -> 'no_candidate' (also with no failed runs). The
   rationale says how many failed runs share the departure.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from prover_jax.judges.base import NO_CANDIDATE, Judge, Proposal, action_text, register

IGNORED_FIELDS = ("turn", "note", "done")  # bookkeeping, not the world (module docstring)
CHOICES = ("latest", "shared", "earliest")  # the departure proposed: the last | most failed runs share it | the first


def state_key(snapshot: Any, ignore_fields: Sequence[str] = IGNORED_FIELDS) -> Any:
    """What is compared for state equivalence: a dataclass snapshot without its bookkeeping fields."""
    if dataclasses.is_dataclass(snapshot) and not isinstance(snapshot, type):
        return (type(snapshot).__qualname__,) + tuple(
            (f.name, getattr(snapshot, f.name)) for f in dataclasses.fields(snapshot)
            if f.name not in ignore_fields)
    return snapshot


class Interner:
    """Integer ids of equal values (hash when possible, else a linear scan with ==; may raise)."""

    def __init__(self):
        self._table: dict = {}
        self._unhashable: list = []

    def __call__(self, value) -> int:
        try:
            return self._table.setdefault(value, len(self._table) + len(self._unhashable))
        except TypeError:
            pass
        for i, other in self._unhashable:
            if bool(other == value):
                return i
        i = len(self._table) + len(self._unhashable)
        self._unhashable.append((i, value))
        return i


def _norm(action: str | None) -> str | None:
    return None if action is None else " ".join(action.lower().split())


def _snapshot_ids(trajs, ignore_fields) -> list[list[int]] | None:
    if any(len(t.snapshots) < t.num_turns + 1 for t in trajs):
        return None
    intern = Interner()
    try:
        return [[intern(state_key(s, ignore_fields)) for s in t.snapshots[:t.num_turns + 1]] for t in trajs]
    except Exception:  # noqa: BLE001  (snapshots that cannot be compared: fall back to text)
        return None


def _history_ids(trajs) -> list[list[int]]:
    intern = Interner()
    out = []
    for t in trajs:
        history = [t.task]
        ids = [intern(tuple(history))]
        for turn in t.turns:
            history.append(turn.observation)
            ids.append(intern(tuple(history)))
        out.append(ids)
    return out


def _lcp(a: Sequence, b: Sequence) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _departure(succ: Sequence[int], moves: dict, strict: bool, choice: str = "latest") -> tuple[int, int] | None:
    """(u, number of distinct failed runs) of the successful run's turn u whose state some failed runs
    left by another move than s_u -> s_{u+1}: the last such u (latest), the first (earliest), or the one
    the most failed runs left, ties to the later turn (shared); strict: only departures (no failed run
    made the same move, and the move changes the state). None: no such u."""
    best = None
    for u in range(len(succ) - 1):
        s, nxt = succ[u], succ[u + 1]
        out = moves.get(s, ())
        if strict and (nxt == s or any(m[2] == nxt for m in out)):
            continue
        shared = len({i for i, _, m_next in out if m_next != nxt})
        if shared and choice == "earliest":
            return u, shared
        if shared and (best is None or shared >= best[1] or choice == "latest"):
            best = (u, shared)
    return best


@register("contrastive")
class ContrastiveJudge(Judge):
    """See the module docstring. ignore_fields: dataclass snapshot fields left out of state equality;
    choice: "latest" (the rule above), "shared" or "earliest" (see the module docstring)."""

    local = True

    def __init__(self, ignore_fields: Sequence[str] = IGNORED_FIELDS, choice: str = "latest"):
        if choice not in CHOICES:
            raise ValueError(f"judge.contrastive.choice must be one of {CHOICES}, got {choice!r}")
        self.ignore_fields, self.choice = tuple(ignore_fields), choice

    @classmethod
    def from_config(cls, section, workdir=None, **kwargs):
        if section is not None:  # None: built without a config
            kwargs.setdefault("ignore_fields", tuple(section.contrastive.ignore_fields))
            kwargs.setdefault("choice", section.contrastive.get("choice", "latest"))
        return cls(**kwargs)

    def _propose(self, success, failures, *, max_segment_turns: int, rng: np.random.Generator) -> Proposal:
        n = success.num_turns
        if not failures:
            return Proposal(None, NO_CANDIDATE, rationale="no failed trajectories to contrast with")
        trajs = [success] + list(failures)
        ids = _snapshot_ids(trajs, self.ignore_fields)
        mode = "snapshot"
        if ids is None:
            ids, mode = _history_ids(trajs), "observation-history"
        succ, fails = ids[0], ids[1:]
        # moves[state] = [(failure index, turn, next state)] over every turn a failed run took
        moves: dict[int, list[tuple[int, int, int]]] = {}
        for i, (f, traj) in enumerate(zip(fails, failures)):
            for t in range(traj.num_turns):
                moves.setdefault(f[t], []).append((i, t, f[t + 1]))

        t, how = None, ""
        for strict, rule in ((True, "no failed run that reached this state made the same move"),
                             (False, "loose rule: some failed run in this state moved elsewhere")):
            best = _departure(succ, moves, strict, self.choice)
            if best is not None:
                t, shared = best
                how = f"shared by {shared} failed run{'' if shared == 1 else 's'} ({rule})"
                break
        if t is None:  # no shared state: end of the longest common action prefix
            acts = [_norm(x.action) for x in success.turns]
            t = max(_lcp(acts, [_norm(x.action) for x in f.turns]) for f in failures)
            how = "no shared state; end of the longest common action prefix"
        found = t
        t = min(t, n - 2)
        while t >= 0 and not success.turns[t].valid:
            t -= 1
        if t < 0:
            return Proposal(None, NO_CANDIDATE,
                            rationale=f"departure at turn {found} ({how}) has no valid non-terminal turn "
                                      "at or before it")
        others = sorted({action_text(failures[i].turns[ft]) for i, ft, _ in moves.get(succ[t], ())})[:5]
        rationale = (f"[{mode}] departure at turn {found}: {how}; proposing turn {t} "
                     f"({action_text(success.turns[t])!r})")
        if others:
            rationale += f"; failed runs in that state did: {others}"
        return Proposal((t, t), rationale=rationale)
