"""The `household` expert: the next command of a searcher that knows only what the agent has seen.

Like ALFWorld's hand-coded expert it searches receptacles in listing order (skipping the target
receptacle) until it has seen what it needs, then fetches, processes and commits. It uses the same
information as the agent (object positions in receptacles it has seen, which it tracks as the agent
moves them) and never makes an irreversible mistake: it never closes anything, never takes a lookalike,
never heats on a stoveburner, and commits only objects that count. From any
solvable state it reaches success; from a dead state it answers "look".
"""

from __future__ import annotations

from prover_jax.envs.household.world import (APPLIANCES, CLEAN, COLD, COMMITTED, HAND, HOT, LAMP, ROOM,
                                             RUINED, Layout, State, accessible, holding)

_PROCESS_EFFECT = {HOT: "heat", COLD: "cool", CLEAN: "clean"}  # required flag -> appliance effect


def _bit(mask: int, i: int) -> bool:
    return bool((mask >> i) & 1)


def _reach(layout: Layout, state: State, r: int, then: str) -> str:
    """`then` if the agent is at r with r accessible; else the step that gets it there."""
    name = layout.receptacles[r]
    if state.loc != r:
        return f"go to {name}"
    if not accessible(layout, state, r):
        return f"open {name}"
    return then


def _usable(layout: Layout, state: State, o: int, confused: bool = False) -> bool:
    """A target object that can still count: not ruined, not committed, not locked away (confused:
    the lookalike is taken for a target too)."""
    at = state.obj_loc[o]
    types = (layout.target_type, layout.decoy_type) if confused else (layout.target_type,)
    return (layout.obj_types[o] in types
            and not state.obj_flags[o] & (RUINED | COMMITTED)
            and (at == HAND or not (_bit(state.locked, at) and not accessible(layout, state, at))))


def _search(layout: Layout, state: State) -> str | None:
    """Next step of the in-order search of unseen receptacles (None when nothing is left to see)."""
    for r in range(len(layout.receptacles)):
        if r == layout.goal or _bit(state.seen, r):
            continue
        if state.loc == r and _bit(state.locked, r):
            continue
        if _bit(state.locked, r) and not accessible(layout, state, r):
            continue
        return _reach(layout, state, r, f"examine {layout.receptacles[r]}")
    return None


def _appliance(layout: Layout) -> int:
    effect = _PROCESS_EFFECT[layout.required]
    return next(r for r, k in enumerate(layout.kinds) if k in APPLIANCES and APPLIANCES[k][1] == effect)


def _drop_spot(layout: Layout, state: State) -> int | None:
    for r in range(len(layout.receptacles)):
        if r != layout.goal and (accessible(layout, state, r) or not _bit(state.locked, r)):
            return r
    return None


def expert_command(layout: Layout, state: State, confused: bool = False) -> str | None:
    """The expert's next command (always admissible), or None once the episode is over.

    confused=True plays a demonstrator who cannot tell the task object from its lookalike: it takes
    and commits whichever of the two it meets first (decoys lie no later than the first target, so it
    usually commits the decoy and fails), otherwise acting as the expert."""
    if state.done:
        return None
    if state.failed:
        return "look"
    h = holding(state)
    if h is not None:
        name = layout.objects[h]
        if not _usable(layout, state, h, confused):
            if state.loc not in (ROOM, layout.goal) and not (
                    _bit(state.locked, state.loc) and not accessible(layout, state, state.loc)):
                return _reach(layout, state, state.loc, f"put {name} in/on {layout.receptacles[state.loc]}")
            spot = _drop_spot(layout, state)
            if spot is None:
                return "look"
            return _reach(layout, state, spot, f"put {name} in/on {layout.receptacles[spot]}")
        if layout.goal == ROOM:
            if layout.lamp < 0 or state.lamp_used:
                return "look"
            if not _bit(state.seen, layout.lamp):
                return _search(layout, state) or "look"
            return _reach(layout, state, layout.lamp, f"use {LAMP}")
        if layout.required and not state.obj_flags[h] & layout.required:
            app = _appliance(layout)
            verb = APPLIANCES[layout.kinds[app]][0]
            if state.loc != app:
                return f"go to {layout.receptacles[app]}"
            return f"{verb} {name} with {layout.receptacles[app]}"
        g = layout.goal
        if _bit(state.locked, g) and not accessible(layout, state, g):
            return "look"
        return _reach(layout, state, g, f"put {name} in/on {layout.receptacles[g]}")
    known = [o for o, at in enumerate(state.obj_loc)
             if at >= 0 and at != layout.goal and _bit(state.seen, at) and _usable(layout, state, o, confused)]
    if known:
        here = [o for o in known if state.obj_loc[o] == state.loc]
        o = min(here or known, key=lambda i: (state.obj_loc[i], layout.objects[i]))
        r = state.obj_loc[o]
        return _reach(layout, state, r, f"take {layout.objects[o]} from {layout.receptacles[r]}")
    return _search(layout, state) or "look"
