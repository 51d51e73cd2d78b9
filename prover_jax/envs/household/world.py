"""Rules of one `household` room: the static layout, the dynamic state and the text they produce.

A room is a `Layout` (fixed by the seed) plus a `State` (everything that changes). `commands(layout,
state)` maps every admissible command, in ALFWorld's wording, to the operation it performs, and
`apply(layout, state, op)` returns the next state and the observation. Both are pure functions of
their arguments, so a `State` is a complete snapshot.

Objects carry flags: CLEAN, HOT, COLD (HOT and COLD exclude each other), RUINED (permanent: the object
no longer counts for any task) and COMMITTED (it was put in/on the task's target receptacle and can no
longer be taken). The pivotal rules are listed in `household.env`'s module docstring.
"""

from __future__ import annotations

import dataclasses

HAND = -1  # obj_loc value of the carried object
ROOM = -1  # loc value of "the middle of the room"

CLEAN, HOT, COLD, RUINED, COMMITTED = 1, 2, 4, 8, 16
FLAG_WORDS = ((CLEAN, "clean"), (HOT, "hot"), (COLD, "cool"), (RUINED, "ruined"))

OPENABLE_KINDS = frozenset({"cabinet", "drawer", "fridge", "microwave", "safe"})
# receptacle kind -> (verb, effect) of the processing command available there
APPLIANCES = {
    "microwave": ("heat", "heat"),
    "stoveburner": ("heat", "scorch"),
    "fridge": ("cool", "cool"),
    "sinkbasin": ("clean", "clean"),
    "bathtubbasin": ("clean", "clean"),
}
LAMP = "desklamp 1"


@dataclasses.dataclass(frozen=True)
class State:
    """Everything that changes during an episode (hashable; a complete snapshot with the seed).

    Attributes:
      seed: the task's seed (the layout is regenerated from it on restore).
      turn: turns taken so far (valid or not).
      loc: receptacle index the agent stands at, or ROOM.
      obj_loc: per object, the receptacle index holding it, or HAND.
      obj_flags: per object, an OR of CLEAN/HOT/COLD/RUINED/COMMITTED.
      opened / locked / seen: receptacle bitmasks (open now; latched shut for good; contents observed).
      lamp_used: the desklamp has been switched on (its bulb works once).
      failed: an irreversible task failure happened (a wrong object committed, the lamp wasted).
      done / success: the episode is over / it ended in success.
    """

    seed: int
    turn: int
    loc: int
    obj_loc: tuple[int, ...]
    obj_flags: tuple[int, ...]
    opened: int
    locked: int
    seen: int
    lamp_used: bool = False
    failed: bool = False
    done: bool = False
    success: bool = False


@dataclasses.dataclass(frozen=True)
class Layout:
    """The static part of a task (fixed by seed and kwargs).

    Attributes:
      receptacles / kinds: receptacle names in listing (alphabetical) order, and their kinds.
      openable / latching: receptacle bitmasks (has a door; locks for good once closed).
      objects / obj_types: object names ("apple 1") and their types ("apple").
      target_type / decoy_type: the task's object type and its lookalike.
      need: how many target objects must be committed (2 for pick_two_obj_and_place, else 1).
      required: the flag the committed objects need (CLEAN, HOT, COLD or 0).
      goal: target receptacle index (ROOM for look_at_obj_in_light); lamp: receptacle with the desklamp.
      init: the state after reset.
    """

    seed: int
    task_type: str
    goal_text: str
    receptacles: tuple[str, ...]
    kinds: tuple[str, ...]
    openable: int
    latching: int
    objects: tuple[str, ...]
    obj_types: tuple[str, ...]
    target_type: str
    decoy_type: str
    need: int
    required: int
    goal: int
    lamp: int
    max_turns: int
    init: State


# ---------------------------------------------------------------------------------------------- queries


def scorchers(layout: Layout) -> list[int]:
    """Indices of the receptacles whose appliance ruins what is processed there (stoveburners)."""
    return [r for r, k in enumerate(layout.kinds) if k in APPLIANCES and APPLIANCES[k][1] == "scorch"]


def holding(state: State) -> int | None:
    """Index of the carried object, or None."""
    try:
        return state.obj_loc.index(HAND)
    except ValueError:
        return None


def accessible(layout: Layout, state: State, r: int) -> bool:
    """Whether receptacle r's contents can be seen and reached (no door, or its door is open)."""
    return not (layout.openable >> r) & 1 or bool((state.opened >> r) & 1)


def satisfies(layout: Layout, flags: int, obj: int) -> bool:
    """Whether object `obj` with `flags` counts for the task."""
    return (layout.obj_types[obj] == layout.target_type and not flags & RUINED
            and (not layout.required or bool(flags & layout.required)))


def contents(layout: Layout, state: State, r: int) -> list[str]:
    """Names of what lies in/on receptacle r (the desklamp first), sorted."""
    names = sorted(layout.objects[o] for o, at in enumerate(state.obj_loc) if at == r)
    return ([LAMP] if r == layout.lamp else []) + names


# ------------------------------------------------------------------------------------------------- text


def listing(names: list[str]) -> str:
    """ALFWorld's enumeration: 'a x', 'a x, and a y', 'a x, a y, and a z'."""
    items = [f"a {n}" for n in names]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + ", and " + items[-1]


def room_text(layout: Layout) -> str:
    return ("You are in the middle of a room. Looking quickly around you, you see "
            f"{listing(list(layout.receptacles))}.")


def intro_text(layout: Layout) -> str:
    """The first observation: the room and the task."""
    return f"{room_text(layout)}\n\nYour task is to: {layout.goal_text}"


def view_text(layout: Layout, state: State, r: int) -> str:
    """What is visible at receptacle r (closed door, open door with contents, or a surface)."""
    name = layout.receptacles[r]
    inside = contents(layout, state, r)
    seen = f"you see {listing(inside)}." if inside else "you see nothing."
    if not (layout.openable >> r) & 1:
        return f"On the {name}, {seen}"
    if (state.opened >> r) & 1:
        return f"The {name} is open. In it, {seen}"
    return f"The {name} is closed."


def describe_object(layout: Layout, state: State, o: int) -> str:
    words = [w for f, w in FLAG_WORDS if state.obj_flags[o] & f]
    if not words:
        return f"There's nothing special about {layout.objects[o]}."
    return f"The {layout.objects[o]} is {' and '.join(words)}."


# --------------------------------------------------------------------------------------------- commands

# An op is a tuple (verb, *indices); indices are receptacle/object positions in the layout.
Op = tuple


def commands(layout: Layout, state: State) -> dict[str, Op]:
    """Every admissible command in the current state (in a fixed order) -> its op."""
    if state.done:
        return {}
    out: dict[str, Op] = {}
    recs = layout.receptacles
    for r, name in enumerate(recs):
        if r != state.loc:
            out[f"go to {name}"] = ("go", r)
    h = holding(state)
    r = state.loc
    if r != ROOM:
        name = recs[r]
        if (layout.openable >> r) & 1:
            if (state.opened >> r) & 1:
                out[f"close {name}"] = ("close", r)
            elif not (state.locked >> r) & 1:
                out[f"open {name}"] = ("open", r)
        if accessible(layout, state, r):
            if h is None:
                for o in sorted((o for o, at in enumerate(state.obj_loc) if at == r),
                                key=layout.objects.__getitem__):
                    if not state.obj_flags[o] & COMMITTED:
                        out[f"take {layout.objects[o]} from {name}"] = ("take", o, r)
            else:
                out[f"put {layout.objects[h]} in/on {name}"] = ("put", h, r)
        if h is not None and layout.kinds[r] in APPLIANCES:
            verb = APPLIANCES[layout.kinds[r]][0]
            out[f"{verb} {layout.objects[h]} with {name}"] = ("process", h, r)
        if r == layout.lamp and not state.lamp_used:
            out[f"use {LAMP}"] = ("use", r)
        out[f"examine {name}"] = ("examine", r)
    if h is not None:
        out[f"examine {layout.objects[h]}"] = ("examine_obj", h)
    out["inventory"] = ("inventory",)
    out["look"] = ("look",)
    return out


def _set(seq: tuple, i: int, v) -> tuple:
    return seq[:i] + (v,) + seq[i + 1:]


def apply(layout: Layout, state: State, op: Op) -> tuple[State, str]:
    """Applies an admissible op: (next state without the turn update, observation)."""
    verb = op[0]
    recs, objs = layout.receptacles, layout.objects
    if verb == "go":
        r = op[1]
        seen = state.seen | (1 << r) if accessible(layout, state, r) else state.seen
        nxt = dataclasses.replace(state, loc=r, seen=seen)
        return nxt, f"You arrive at {recs[r]}. {view_text(layout, nxt, r)}"
    if verb == "open":
        r = op[1]
        nxt = dataclasses.replace(state, opened=state.opened | (1 << r), seen=state.seen | (1 << r))
        return nxt, f"You open the {recs[r]}. {view_text(layout, nxt, r)}"
    if verb == "close":
        r = op[1]
        latch = bool((layout.latching >> r) & 1)
        nxt = dataclasses.replace(state, opened=state.opened & ~(1 << r),
                                  locked=state.locked | (1 << r) if latch else state.locked)
        text = f"You close the {recs[r]}."
        if latch:
            text += f" The {recs[r]} locks with a click; it cannot be opened again."
        return nxt, text
    if verb == "take":
        o, r = op[1], op[2]
        return (dataclasses.replace(state, obj_loc=_set(state.obj_loc, o, HAND)),
                f"You pick up the {objs[o]} from the {recs[r]}.")
    if verb == "put":
        return _put(layout, state, op[1], op[2])
    if verb == "process":
        return _process(layout, state, op[1], op[2])
    if verb == "use":
        h = holding(state)
        ok = h is not None and satisfies(layout, state.obj_flags[h], h)
        text = f"You turn on the {LAMP}."
        if not ok:
            text += " Its old bulb flickers and burns out."
        nxt = dataclasses.replace(state, lamp_used=True, failed=state.failed or not ok,
                                  done=ok and not state.failed, success=ok and not state.failed)
        return nxt, text
    if verb == "examine":
        return state, view_text(layout, state, op[1])
    if verb == "examine_obj":
        return state, describe_object(layout, state, op[1])
    if verb == "inventory":
        h = holding(state)
        return state, ("You are not carrying anything." if h is None
                       else f"You are carrying: a {objs[h]}.")
    if verb == "look":
        if state.loc == ROOM:
            return state, room_text(layout)
        return state, f"You are facing the {recs[state.loc]}. Next to it, you see nothing."
    raise ValueError(f"unknown op {op!r}")


def _put(layout: Layout, state: State, o: int, r: int) -> tuple[State, str]:
    text = f"You put the {layout.objects[o]} in/on the {layout.receptacles[r]}."
    obj_loc = _set(state.obj_loc, o, r)
    if r != layout.goal:
        return dataclasses.replace(state, obj_loc=obj_loc), text
    flags = _set(state.obj_flags, o, state.obj_flags[o] | COMMITTED)
    failed = state.failed or not satisfies(layout, state.obj_flags[o], o)
    good = sum(1 for i, at in enumerate(obj_loc)
               if at == r and flags[i] & COMMITTED and satisfies(layout, flags[i], i))
    won = not failed and good >= layout.need
    return dataclasses.replace(state, obj_loc=obj_loc, obj_flags=flags, failed=failed, done=won,
                               success=won), text


def _process(layout: Layout, state: State, o: int, r: int) -> tuple[State, str]:
    verb, effect = APPLIANCES[layout.kinds[r]]
    name, rname = layout.objects[o], layout.receptacles[r]
    flags = state.obj_flags[o]
    text = f"You {verb} the {name} using the {rname}."
    if effect == "heat":
        flags = (flags | HOT) & ~COLD
    elif effect == "cool":
        flags = (flags | COLD) & ~HOT
    elif effect == "scorch":
        flags |= RUINED
        text += f" The {name} is scorched: it is ruined."
    else:
        flags |= CLEAN
    return dataclasses.replace(state, obj_flags=_set(state.obj_flags, o, flags)), text
