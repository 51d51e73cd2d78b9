"""The household demonstrator: the expert with faults, each at one pivotal rule (what SFT imitates).

A task's faults are drawn from its seed (`Faults.of`); the demonstrator then plays the expert except at
the pivots its faults name, where it makes the mistake and carries on as if nothing were wrong:

  confused   takes (and commits) whichever of the task object and its lookalike it meets first;
  scorch     heats on a stoveburner instead of the microwave (the object is ruined) and commits it;
  premature  commits the task object without cleaning / heating / cooling it first;
  latch      checks the target receptacle first: goes there, opens it and closes it again, which locks
             a receptacle with a door for good (only where the target receptacle has one).

Every fault but `premature` shows only at the end: the demonstrator plays on to the commit (which fails
the task) or to a locked target receptacle, then answers "look" until the turn limit.
`idle` is not a fault: with that probability per turn (from the seed and the turn) the demonstrator
first plays an admissible command that changes nothing (`examine` the receptacle it stands at, `look`,
`inventory`), never twice in a row, so successes and failures differ in routine turns by chance.
"""

from __future__ import annotations

import dataclasses
import random

from prover_jax.envs.household.expert import _bit, _reach, expert_command
from prover_jax.envs.household.world import COMMITTED, HOT, ROOM, RUINED, Layout, State, holding, scorchers

FAULTS = ("confused", "scorch", "premature", "latch")


@dataclasses.dataclass(frozen=True)
class Faults:
    """Per-task shares of the demonstrator's faults (env kwargs demo_confusion, demo_scorch, ...).

    scorch_types: the task object types the scorching fault applies to (None: every type), so that
    whether a task can be scorched is visible in its goal sentence.
    """

    confused: float = 0.0
    scorch: float = 0.0
    premature: float = 0.0
    latch: float = 0.0
    scorch_types: tuple[str, ...] | None = None

    def __post_init__(self):
        for name in FAULTS:
            q = getattr(self, name)
            if not 0.0 <= q <= 1.0:
                kwarg = "demo_confusion" if name == "confused" else f"demo_{name}"
                raise ValueError(f"env.kwargs.{kwarg} must lie in [0, 1], got {q}")

    def drawn(self, name: str, seed: int) -> bool:
        """Whether fault `name` is drawn for the task of generator seed `seed` (before its conditions)."""
        q = getattr(self, name)
        tag = "confusion" if name == "confused" else name  # `confused`'s draw predates the others
        return q > 0 and random.Random(f"household-{tag}-{seed}").random() < q

    def of(self, layout: Layout) -> frozenset[str]:
        """The faults of the demonstrator in this task (each drawn from the seed on its own)."""
        out = {name for name in FAULTS if self.drawn(name, layout.seed)}
        if "scorch" in out and (layout.required != HOT or (self.scorch_types is not None
                                                           and layout.target_type not in self.scorch_types)):
            out.discard("scorch")
        if "latch" in out and (layout.goal == ROOM or not _bit(layout.latching, layout.goal)):
            out.discard("latch")
        return frozenset(out)


def _believed(layout: Layout, state: State, o: int, confused: bool) -> bool:
    """The demonstrator takes object o for a task object (not yet committed)."""
    types = (layout.target_type, layout.decoy_type) if confused else (layout.target_type,)
    return layout.obj_types[o] in types and not state.obj_flags[o] & COMMITTED


def _commit(layout: Layout, state: State, h: int) -> str:
    g = layout.goal
    if _bit(state.locked, g) and not _bit(state.opened, g):
        return "look"
    return _reach(layout, state, g, f"put {layout.objects[h]} in/on {layout.receptacles[g]}")


def faulty_command(layout: Layout, state: State, faults: frozenset[str]) -> str | None:
    """The demonstrator's next command with these faults (always admissible), None once the episode
    is over (see the module docstring)."""
    if state.done:
        return None
    if state.failed:
        return "look"
    g = layout.goal
    h = holding(state)
    if "latch" in faults and not _bit(state.locked, g) and h is None and state.loc in (ROOM, g):
        name = layout.receptacles[g]
        if state.loc != g:
            if not _bit(state.seen, g):
                return f"go to {name}"
        elif not _bit(state.opened, g):
            if not _bit(state.seen, g):
                return f"open {name}"
        else:
            return f"close {name}"
    confused = "confused" in faults
    if h is not None and layout.required and g != ROOM and _believed(layout, state, h, confused):
        flags = state.obj_flags[h]
        if "premature" in faults or ("scorch" in faults and flags & RUINED):
            return _commit(layout, state, h)
        if "scorch" in faults and not flags & (HOT | RUINED):
            burner = scorchers(layout)[0]
            if state.loc != burner:
                return f"go to {layout.receptacles[burner]}"
            return f"heat {layout.objects[h]} with {layout.receptacles[burner]}"
    return expert_command(layout, state, confused=confused)


def idle_command(layout: Layout, state: State) -> str:
    """An admissible command that changes nothing, drawn from the seed and the turn."""
    options = ["look", "inventory"] + ([f"examine {layout.receptacles[state.loc]}"] if state.loc != ROOM else [])
    return random.Random(f"household-idle-{layout.seed}-{state.turn}").choice(options)


def idles(layout: Layout, state: State, p: float) -> bool:
    """Whether the demonstrator idles before its command at this turn (probability p)."""
    return p > 0 and random.Random(f"household-idle?-{layout.seed}-{state.turn}").random() < p
