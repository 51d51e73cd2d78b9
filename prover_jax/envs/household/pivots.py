"""Privileged labels of household turns: which moves are the pivotal choices, right or wrong.

`pivot(layout, state, op)` -> (label, class) for a move at one of the irreversible rules, None for a
routine move. label +1: the right choice where a wrong one was open; -1: the mistake (it makes the task
unwinnable, or commits the agent to an object that cannot count). Classes pair a mistake with the right
choice at the same rule:

  object   take the lookalike (-1) / take a task object while a lookalike is in the room (+1); committing
           a wrong object (a lookalike, or any non-target) is -1 here too
  process  heat a task object on a stoveburner (-1, it is ruined) / give it the required flag where a
           stoveburner could ruin it (+1); committing a ruined or unprocessed task object is -1 here (the
           step it skipped or got wrong)
  latch    close the target receptacle, or a safe holding a task object, before the task is done (-1) /
           walk away from the open target receptacle leaving it open (+1)
  lamp     switch the desklamp on without a task object in hand (-1) / with one (+1)
  commit   put a task object that counts in/on the target receptacle (+1; its mistakes are classed above)

Used by the `rules` turn critic and the `oracle` judge (privileged: the agent sees none of this).
"""

from __future__ import annotations

from prover_jax.envs.household.expert import _bit
from prover_jax.envs.household.world import (APPLIANCES, CLEAN, COLD, COMMITTED, HOT, ROOM, RUINED, Layout, State,
                                             holding, satisfies, scorchers)

OBJECT, PROCESS, LATCH, LAMP, COMMIT = "object", "process", "latch", "lamp", "commit"
CLASSES = (OBJECT, PROCESS, LATCH, LAMP, COMMIT)


def _has(layout: Layout, kind: str) -> bool:
    return kind in layout.obj_types


def pivot(layout: Layout, state: State, op: tuple) -> tuple[int, str] | None:
    """(label, class) of the admissible move `op` from `state`, None for a routine move (see module)."""
    if state.done or state.failed:
        return None
    verb = op[0]
    if verb == "take":
        kind = layout.obj_types[op[1]]
        if kind == layout.decoy_type:
            return -1, OBJECT
        if kind == layout.target_type and _has(layout, layout.decoy_type):
            return +1, OBJECT
        return None
    if verb == "process":
        o, r = op[1], op[2]
        flags = state.obj_flags[o]
        if layout.obj_types[o] != layout.target_type or flags & RUINED:
            return None
        effect = APPLIANCES[layout.kinds[r]][1]
        if effect == "scorch":
            return -1, PROCESS
        gives = {"heat": HOT, "cool": COLD, "clean": CLEAN}[effect]
        if layout.required == gives and not flags & gives and scorchers(layout):
            return +1, PROCESS
        return None
    if verb == "put":
        o, r = op[1], op[2]
        if r != layout.goal:
            return None
        flags = state.obj_flags[o]
        if satisfies(layout, flags, o):
            return +1, COMMIT
        if layout.obj_types[o] != layout.target_type:
            return -1, OBJECT
        return -1, PROCESS  # ruined, or not yet cleaned / heated / cooled
    if verb == "close":
        r = op[1]
        if not _bit(layout.latching, r):
            return None
        holds_target = any(at == r and layout.obj_types[o] == layout.target_type
                           and not state.obj_flags[o] & (RUINED | COMMITTED) for o, at in enumerate(state.obj_loc))
        if r == layout.goal or holds_target:
            return -1, LATCH
        return None
    if verb == "go":
        g = layout.goal
        if g != ROOM and state.loc == g and _bit(layout.latching, g) and _bit(state.opened, g):
            return +1, LATCH
        return None
    if verb == "use":
        h = holding(state)
        return (+1, LAMP) if h is not None and satisfies(layout, state.obj_flags[h], h) else (-1, LAMP)
    return None
