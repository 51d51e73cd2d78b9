"""The judge contract: propose ONE pivotal segment of a successful trajectory, never crash.

    judge = make_judge("contrastive", config.judge, workdir)
    judge.begin_step()                                   # once per optimizer step (resets budgets)
    p = judge.propose(success, failures, max_segment_turns=4, rng=np.random.default_rng(0))
    if p.ok: l, r = p.segment                            # else p.reason says why it was dropped

A segment (l, r) is a pair of turn indices of `success`, inclusive, and is valid when (checked in this
order, the first failing rule names the drop reason):

    schema          l and r are integers (bools excluded)
    out_of_bounds   0 <= l <= r < num_turns
    too_long        r - l + 1 <= max_segment_turns
    terminal        r < num_turns - 1 (the segment may not include the last turn)
    invalid_action  every turn in l..r has turn.valid True

Other drop reasons a judge may report: no_tool_call, no_proposal, timeout, rate_limited, api_error,
budget, no_candidate, judge_error (an exception inside a judge: `Judge.propose` turns every exception
into a dropped proposal, so training never stops because of a judge; a judge that raises after
spending sets the exception's `spent` attribute to a Proposal with its counters, which the dropped
proposal keeps: calls, tokens, cost and repairs are never lost).

`Judge.propose` (template method) times the call, catches exceptions and re-validates what the judge
returned; judges implement `_propose`. A successful trajectory without any valid segment (one turn, or
every non-terminal turn invalid) is dropped as no_candidate without asking the judge (no call is spent).
Judges register under a name with `@register(name)`; the trainer builds them with
`make_judge(name, config_section, workdir)` (built-in judges are imported lazily, so the openai client
is only imported when the openai judge is used).
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from prover_jax.registry import Registry

if TYPE_CHECKING:  # the rollout package imports jax; judges only read the records
    from prover_jax.rollout.trajectory import Trajectory, Turn

log = logging.getLogger(__name__)

OK = "ok"
SCHEMA, OUT_OF_BOUNDS, TOO_LONG, TERMINAL, INVALID_ACTION = (
    "schema", "out_of_bounds", "too_long", "terminal", "invalid_action")
NO_TOOL_CALL, NO_PROPOSAL, NO_CANDIDATE = "no_tool_call", "no_proposal", "no_candidate"
TIMEOUT, RATE_LIMITED, API_ERROR, BUDGET, JUDGE_ERROR = (
    "timeout", "rate_limited", "api_error", "budget", "judge_error")
SPEND_FIELDS = ("calls", "input_tokens", "output_tokens", "cost_usd", "repairs", "cached")


@dataclasses.dataclass
class Proposal:
    """A judge's answer for one task group.

    segment: (l, r) turn indices of the successful trajectory (inclusive), None when dropped.
    reason: 'ok' or the drop reason (see module docstring).
    rationale / failure_mode: the judge's explanation (or what went wrong, for a drop).
    calls, input_tokens, output_tokens, cost_usd: LLM usage (cache hits cost nothing and are not calls).
    seconds: wall time of `propose`; repairs: repair turns used; cached: every LLM response came from
    the on-disk cache (and there was at least one).
    """

    segment: tuple[int, int] | None = None
    reason: str = OK
    rationale: str = ""
    failure_mode: str = ""
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    repairs: int = 0
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.reason == OK and self.segment is not None

    @property
    def num_turns(self) -> int:
        return 0 if self.segment is None else self.segment[1] - self.segment[0] + 1

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["segment"] = None if self.segment is None else list(self.segment)
        return out


# ------------------------------------------------------------------------------------------ validation

def _as_index(x) -> int | None:
    if isinstance(x, (bool, np.bool_)):
        return None
    if isinstance(x, (int, np.integer)):
        return int(x)
    return None


def segment_problem(traj: Trajectory, l, r, max_segment_turns: int) -> tuple[str, str] | None:
    """(reason, explanation) of the first rule (l, r) breaks, None if it is a valid segment."""
    li, ri = _as_index(l), _as_index(r)
    n = traj.num_turns
    if li is None or ri is None:
        return SCHEMA, f"start and end must be integers, got {l!r} and {r!r}"
    if li < 0 or ri >= n or li > ri:
        return OUT_OF_BOUNDS, (f"({li}, {ri}) is not a range of turns: need 0 <= start <= end <= {n - 1} "
                               f"(the trajectory has {n} turns)")
    if ri - li + 1 > max_segment_turns:
        return TOO_LONG, f"({li}, {ri}) spans {ri - li + 1} turns; at most {max_segment_turns} are allowed"
    if ri >= n - 1:
        return TERMINAL, (f"the segment may not include the last turn ({n - 1}); end must be <= {n - 2}")
    bad = [t for t in range(li, ri + 1) if not traj.turns[t].valid]
    if bad:
        return INVALID_ACTION, f"turn(s) {bad} are invalid actions; the segment must cover valid turns only"
    return None


def validate_segment(traj: Trajectory, l, r, max_segment_turns: int) -> str | None:
    """The drop reason of segment (l, r) of `traj`, or None when it is valid."""
    problem = segment_problem(traj, l, r, max_segment_turns)
    return None if problem is None else problem[0]


def valid_segments(traj: Trajectory, max_segment_turns: int) -> list[tuple[int, int]]:
    """Every valid (l, r) of `traj`, in (l, r) order."""
    out = []
    last = traj.num_turns - 2  # the largest allowed end
    for l in range(max(last + 1, 0)):
        for r in range(l, min(l + max_segment_turns - 1, last) + 1):
            if not traj.turns[r].valid:
                break
            out.append((l, r))
    return out


# ------------------------------------------------------------------------------------------- rendering

def clip_text(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:max(n - 3, 0)] + "..."


def action_text(turn: Turn) -> str:
    """The turn's action, or its raw response when no action could be extracted."""
    if turn.action is not None:
        return turn.action
    return f"(no action; response: {clip_text(turn.response, 120)!r})"


def turn_text(turn: Turn) -> str:
    """Action + observation of one turn (what the failure search indexes)."""
    return f"{action_text(turn)} -> {turn.observation}"


def outcome_text(traj: Trajectory) -> str:
    what = "SUCCESS" if traj.success else "FAILURE"
    return f"{what} after {traj.num_turns} turns (ended: {traj.termination or 'unfinished'}, score {traj.score:g})"


def render_trajectory(traj: Trajectory, full: bool = True, max_chars: int | None = None,
                      obs_chars: int | None = None, task_chars: int = 3000) -> str:
    """Text rendering of a trajectory.

    full=True: the task, the outcome and every turn (index, action, VALID/INVALID, observation).
    full=False: a compact preview: outcome, then one line per turn with the action and a short
    observation snippet; when longer than max_chars (default 2500) the middle turns are elided.
    """
    if full:
        obs_chars = 1000 if obs_chars is None else obs_chars
        lines = [f"Task: {clip_text(traj.task, task_chars)}", f"Outcome: {outcome_text(traj)}"]
        for t, turn in enumerate(traj.turns):
            flag = "valid" if turn.valid else "INVALID"
            lines.append(f"[turn {t}] ({flag}) action: {action_text(turn)}")
            lines.append(f"    observation: {clip_text(turn.observation, obs_chars)}")
        text = "\n".join(lines)
        return text if max_chars is None or len(text) <= max_chars else text[:max_chars - 3] + "..."
    obs_chars = 80 if obs_chars is None else obs_chars
    max_chars = 2500 if max_chars is None else max_chars
    head = f"Outcome: {outcome_text(traj)}"
    lines = [f"t{t}{'' if turn.valid else ' INVALID'}: {clip_text(action_text(turn), 100)} -> "
             f"{clip_text(turn.observation, obs_chars)}" for t, turn in enumerate(traj.turns)]
    if len(head) + sum(len(x) + 1 for x in lines) <= max_chars:
        return "\n".join([head] + lines)
    budget = max_chars - len(head) - 60
    first, last, used = [], [], 0
    i, j = 0, len(lines) - 1
    while i <= j:  # alternate: keep the opening and the ending of the run
        take_first = len(first) <= len(last)
        line = lines[i] if take_first else lines[j]
        if used + len(line) + 1 > budget:
            break
        used += len(line) + 1
        if take_first:
            first.append(line)
            i += 1
        else:
            last.insert(0, line)
            j -= 1
    omitted = j - i + 1
    middle = [f"... ({omitted} turns omitted: t{i}..t{j}) ..."] if omitted > 0 else []
    return "\n".join([head] + first + middle + last)


# ---------------------------------------------------------------------------------------------- judges

def config_get(section: Any, key: str, default: Any = None) -> Any:
    """section[key] for a dict / ConfigDict / object, default if absent or section is None."""
    if section is None:
        return default
    if isinstance(section, dict):
        return section.get(key, default)
    try:
        return section.get(key, default)  # ConfigDict
    except (AttributeError, TypeError):
        return getattr(section, key, default)


class Judge(abc.ABC):
    """Base class of judges (see module docstring)."""

    name: str = "judge"
    local: bool = False  # answers on this host at no cost: a step may ask again as a group plays (speculate)

    @classmethod
    def from_config(cls, section: Any, workdir: str | None = None, **kwargs) -> "Judge":
        """Builds the judge from the trainer's `judge` config section (default: ignores it)."""
        return cls(**kwargs)

    def begin_step(self) -> None:
        """Called once per optimizer step before its proposals (resets per-step budgets)."""

    def propose(self, success: Trajectory, failures: Sequence[Trajectory], *, max_segment_turns: int,
                rng: np.random.Generator | None = None) -> Proposal:
        """ONE segment of `success` that probably made the difference against `failures`.
        Never raises (except KeyboardInterrupt / SystemExit): failures are dropped proposals."""
        start = time.perf_counter()
        rng = np.random.default_rng() if rng is None else rng
        try:
            if not valid_segments(success, int(max_segment_turns)):  # nothing to ask a judge for
                p = Proposal(None, NO_CANDIDATE, rationale=f"no valid segment in the successful trajectory "
                                                           f"({success.num_turns} turns)")
            else:
                p = self._propose(success, list(failures), max_segment_turns=int(max_segment_turns), rng=rng)
            if not isinstance(p, Proposal):
                raise TypeError(f"{type(self).__name__}._propose returned {type(p).__name__}, not a Proposal")
        except Exception as e:  # noqa: BLE001  (a judge must never stop training)
            log.exception("judge %s failed", self.name)
            p = Proposal(None, JUDGE_ERROR, rationale=f"{type(e).__name__}: {e}")
            spent = getattr(e, "spent", None)
            if isinstance(spent, Proposal):
                for field in SPEND_FIELDS:
                    setattr(p, field, getattr(spent, field))
        if p.reason == OK:
            seg = p.segment
            if seg is None or not isinstance(seg, (tuple, list)) or len(seg) != 2:
                problem = (SCHEMA, f"segment {seg!r} is not a pair (l, r)")
            else:
                problem = segment_problem(success, seg[0], seg[1], max_segment_turns)
            if problem is None:
                p.segment = (int(seg[0]), int(seg[1]))
            else:
                p.reason = problem[0]
                p.rationale = f"{p.rationale}\n[rejected {seg!r}: {problem[1]}]".strip()
        if p.reason != OK:
            p.segment = None
        if not p.seconds:
            p.seconds = time.perf_counter() - start
        return p

    @abc.abstractmethod
    def _propose(self, success: Trajectory, failures: list[Trajectory], *, max_segment_turns: int,
                 rng: np.random.Generator) -> Proposal:
        """The judge's logic; may raise (propose() turns exceptions into dropped proposals, keeping the
        spend of an exception's `spent` Proposal)."""

    def close(self) -> None:
        """Releases resources (HTTP clients)."""


JUDGES: Registry = Registry("judge", field="judge.name", lazy={
    "random": "prover_jax.judges.random_judge", "contrastive": "prover_jax.judges.contrastive",
    "openai": "prover_jax.judges.openai_judge", "oracle": "prover_jax.judges.oracle"})


def register(name: str):
    """Class decorator: `make_judge(name, ...)` builds this judge through its `from_config`."""

    def deco(cls):
        JUDGES.add(name, cls)
        cls.name = name
        return cls

    return deco


def names() -> list[str]:
    return JUDGES.names()


def make_judge(name: str, config_section: Any = None, workdir: str | None = None, **kwargs) -> Judge:
    """Builds judge `name` from the trainer's `judge` config section (config.judge); `workdir` is where
    judges keep state (the openai judge's response cache); kwargs override / extend the config."""
    factory = JUDGES.get(name)
    if hasattr(factory, "from_config"):
        return factory.from_config(config_section, workdir, **kwargs)
    return factory(config_section, workdir, **kwargs)


def needs_env(name: str) -> bool:
    """Whether judge `name` reads the run's env (its class sets `needs_env`): build it with
    make_judge(..., env_name=config.env.name, env_kwargs=the env's kwargs)."""
    return bool(getattr(JUDGES.get(name), "needs_env", False))


def summarize(proposals: Sequence[Proposal]) -> dict[str, float]:
    """Scalars for logs: counts per reason, usage totals, mean segment length of valid proposals."""
    reasons = collections.Counter(p.reason for p in proposals)
    valid = [p for p in proposals if p.ok]
    out = {"proposals": float(len(proposals)), "valid": float(len(valid)),
           "calls": float(sum(p.calls for p in proposals)),
           "input_tokens": float(sum(p.input_tokens for p in proposals)),
           "output_tokens": float(sum(p.output_tokens for p in proposals)),
           "cost_usd": float(sum(p.cost_usd for p in proposals)),
           "seconds": float(sum(p.seconds for p in proposals)),
           "repairs": float(sum(p.repairs for p in proposals)),
           "cached": float(sum(p.cached for p in proposals)),
           "mean_segment_turns": float(np.mean([p.num_turns for p in valid])) if valid else 0.0}
    for reason, n in sorted(reasons.items()):
        if reason != OK:
            out[f"drop/{reason}"] = float(n)
    return out
