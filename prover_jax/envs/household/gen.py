"""Deterministic generation of `household` tasks: room, objects, lookalikes and goal from a seed.

`generate(seed, config)` draws the task type from the seed (unless fixed), then tries layouts drawn
from `random.Random(f"household-{task_type}-{seed}-{attempt}")` until the expert's episode length
lies in `config.expert_turns`; every layout it returns is solved by the expert within `config.max_turns`.
Placement: target objects lie in random receptacles (never the target receptacle; in the safe for
look_at_obj_in_light); lookalike decoys lie in receptacles listed no later than the first target, so a
searcher meets them first.
"""

from __future__ import annotations

import dataclasses
import functools
import random

from prover_jax.envs.household.expert import expert_command
from prover_jax.envs.household.world import (CLEAN, COLD, HOT, OPENABLE_KINDS, ROOM, Layout, State,
                                             apply, commands)

TASK_TYPES = ("pick_and_place", "look_at_obj_in_light", "pick_clean_then_place",
              "pick_heat_then_place", "pick_cool_then_place", "pick_two_obj_and_place")

# Every task object type has a lookalike the room also holds.
LOOKALIKE = {
    "apple": "tomato", "tomato": "apple", "potato": "egg", "egg": "potato", "mug": "cup", "cup": "mug",
    "plate": "bowl", "bowl": "plate", "pan": "pot", "pot": "pan", "knife": "butterknife",
    "butterknife": "knife", "fork": "spoon", "spoon": "fork", "ladle": "spatula", "spatula": "ladle",
    "saltshaker": "peppershaker", "peppershaker": "saltshaker", "soapbar": "soapbottle",
    "soapbottle": "spraybottle", "spraybottle": "soapbottle", "cloth": "handtowel",
    "handtowel": "cloth", "toiletpaper": "tissuebox", "tissuebox": "toiletpaper",
    "cellphone": "remotecontrol", "remotecontrol": "cellphone", "keychain": "creditcard",
    "creditcard": "keychain", "pen": "pencil", "pencil": "pen", "alarmclock": "watch",
    "watch": "alarmclock", "vase": "statue", "statue": "vase",
}

# room -> (receptacle kind -> max count, object types)
ROOMS = {
    "kitchen": (dict(cabinet=6, countertop=2, drawer=4, shelf=2, diningtable=1, coffeemachine=1,
                     toaster=1, garbagecan=1, fridge=1, microwave=1, sinkbasin=1, stoveburner=2),
                ("apple", "tomato", "potato", "egg", "mug", "cup", "plate", "bowl", "pan", "pot",
                 "knife", "butterknife", "fork", "spoon", "ladle", "spatula", "saltshaker",
                 "peppershaker", "bread", "winebottle", "kettle", "dishsponge", "cellphone")),
    "bathroom": (dict(cabinet=4, countertop=1, drawer=3, shelf=2, sinkbasin=1, bathtubbasin=1,
                      toilet=1, towelholder=1, handtowelholder=1, garbagecan=1),
                 ("soapbar", "soapbottle", "spraybottle", "cloth", "handtowel", "toiletpaper",
                  "tissuebox", "candle", "dishsponge")),
    "bedroom": (dict(bed=1, desk=1, sidetable=2, dresser=1, drawer=4, shelf=3, safe=1, armchair=1,
                     laundryhamper=1, garbagecan=1, cabinet=2),
                ("alarmclock", "watch", "cellphone", "remotecontrol", "keychain", "creditcard", "pen",
                 "pencil", "book", "cd", "laptop", "pillow", "mug", "cup", "vase", "statue")),
    "livingroom": (dict(sofa=1, armchair=1, coffeetable=1, sidetable=2, cabinet=3, drawer=3, shelf=2,
                        dresser=1, safe=1, garbagecan=1, tvstand=1, diningtable=1),
                   ("remotecontrol", "cellphone", "keychain", "creditcard", "vase", "statue", "box",
                    "newspaper", "laptop", "plate", "bowl", "pen", "pencil", "watch")),
}

_FOOD_AND_WARE = ("apple", "tomato", "potato", "egg", "mug", "cup", "plate", "bowl")
# task type -> (rooms, target types (None: any with a lookalike in the room), required flag,
#               receptacles the task needs, kinds allowed as target receptacle)
TASKS = {
    "pick_and_place": (("kitchen", "bathroom", "bedroom", "livingroom"), None, 0, (),
                       ("cabinet", "drawer", "safe", "fridge", "microwave")),
    "pick_two_obj_and_place": (("kitchen", "bathroom", "bedroom", "livingroom"), None, 0, (),
                               ("cabinet", "drawer", "safe", "fridge")),
    "look_at_obj_in_light": (("bedroom", "livingroom"),
                             ("alarmclock", "watch", "cellphone", "remotecontrol", "keychain",
                              "creditcard", "pen", "pencil", "vase", "statue"), 0, ("safe",), ()),
    "pick_clean_then_place": (("kitchen", "bathroom"),
                              _FOOD_AND_WARE + ("pan", "pot", "knife", "butterknife", "fork", "spoon",
                                                "ladle", "spatula", "soapbar", "cloth"),
                              CLEAN, ("sinkbasin",),
                              ("cabinet", "countertop", "drawer", "shelf", "diningtable", "fridge",
                               "microwave", "toilet", "towelholder", "garbagecan")),
    "pick_heat_then_place": (("kitchen",), _FOOD_AND_WARE, HOT, ("microwave", "stoveburner"),
                             ("cabinet", "countertop", "shelf", "diningtable", "fridge", "garbagecan")),
    "pick_cool_then_place": (("kitchen",), _FOOD_AND_WARE + ("pan", "pot"), COLD, ("fridge",),
                             ("cabinet", "countertop", "shelf", "diningtable", "microwave",
                              "garbagecan")),
}
GOAL_TEXT = {
    "pick_and_place": ("put a {o} in {r}.", "put some {o} on {r}."),
    "pick_two_obj_and_place": ("put two {o} in {r}.", "find two {o} and put them in {r}."),
    "look_at_obj_in_light": ("look at {o} under the desklamp.", "examine the {o} with the desklamp."),
    "pick_clean_then_place": ("put a clean {o} in {r}.", "clean some {o} and put it in {r}."),
    "pick_heat_then_place": ("put a hot {o} in {r}.", "heat some {o} and put it in {r}."),
    "pick_cool_then_place": ("put a cool {o} in {r}.", "cool some {o} and put it in {r}."),
}
_NO_OBJECTS = frozenset({"stoveburner", "toaster"})
_LAMP_HOLDERS = ("desk", "sidetable", "dresser")


@dataclasses.dataclass(frozen=True)
class Config:
    """Size and length of generated tasks (see `HouseholdEnv` for the meaning of each field)."""

    task_type: str | None = None
    num_receptacles: int | None = None
    num_objects: int | None = None
    num_decoys: int | None = None
    max_turns: int = 30
    expert_turns: tuple[int, int] = (10, 24)
    target_types: tuple[str, ...] | None = None
    attempts: int = 200


def expert_length(layout: Layout) -> int | None:
    """Turns the expert needs from reset, or None when it fails within the turn limit."""
    state = layout.init
    for turn in range(layout.max_turns):
        state, _ = apply(layout, state, commands(layout, state)[expert_command(layout, state)])
        if state.done:
            return turn + 1 if state.success else None
    return None


@functools.lru_cache(maxsize=64)
def generate(seed: int, config: Config) -> Layout:
    """The layout of task `seed` (deterministic; cached)."""
    task_type = config.task_type or random.Random(f"household-type-{seed}").choice(TASK_TYPES)
    lo, hi = config.expert_turns
    best, best_gap = None, None
    for attempt in range(config.attempts):
        layout = _draw(random.Random(f"household-{task_type}-{seed}-{attempt}"), seed, task_type,
                       config)
        if layout is None:
            continue
        n = expert_length(layout)
        if n is None:
            continue
        if lo <= n <= hi:
            return layout
        gap = lo - n if n < lo else n - hi
        if best_gap is None or gap < best_gap:
            best, best_gap = layout, gap
    if best is None:
        raise ValueError(f"household: no solvable {task_type} layout for seed {seed} under {config}")
    return best


def _receptacles(rng: random.Random, room: str, needed: list[str], n: int) -> list[str]:
    caps = ROOMS[room][0]
    kinds = list(needed)
    pool = [k for k, c in caps.items() for _ in range(c)]
    for k in kinds:
        pool.remove(k)
    rng.shuffle(pool)
    kinds += pool[:max(0, n - len(kinds))]
    counts: dict[str, int] = {}
    names = []
    for k in sorted(kinds):
        counts[k] = counts.get(k, 0) + 1
        names.append(f"{k} {counts[k]}")
    return names


def _draw(rng: random.Random, seed: int, task_type: str, config: Config) -> Layout | None:
    rooms, targets, required, needed, goal_kinds = TASKS[task_type]
    room = rng.choice(rooms)
    caps, room_objects = ROOMS[room]
    candidates = [t for t in (targets or room_objects) if LOOKALIKE.get(t) in room_objects
                  and (config.target_types is None or t in config.target_types)]
    if not candidates:
        return None
    target = rng.choice(candidates)
    decoy = LOOKALIKE[target]
    look = task_type == "look_at_obj_in_light"
    need_kinds = list(needed)
    if look:
        need_kinds.append(rng.choice([k for k in _LAMP_HOLDERS if k in caps]))
    else:
        need_kinds.append(rng.choice([k for k in goal_kinds if k in caps]))
    num_recs = config.num_receptacles or rng.randint(8, 13)
    names = _receptacles(rng, room, need_kinds, max(num_recs, len(need_kinds) + 1))
    kinds = tuple(n.rsplit(" ", 1)[0] for n in names)
    openable = sum(1 << i for i, k in enumerate(kinds) if k in OPENABLE_KINDS)
    if look:
        goal = ROOM
        lamp = next(i for i, k in enumerate(kinds) if k == need_kinds[-1])
    else:
        goal = rng.choice([i for i, k in enumerate(kinds) if k == need_kinds[-1]])
        lamp = ROOM
    latching = sum(1 << i for i, k in enumerate(kinds) if k == "safe")
    if goal != ROOM and (openable >> goal) & 1:
        latching |= 1 << goal
    holders = [i for i, k in enumerate(kinds) if i != goal and k not in _NO_OBJECTS]
    if not holders:  # a small room drew only receptacles that hold nothing: try another draw
        return None
    need = 2 if task_type == "pick_two_obj_and_place" else 1
    if look:
        target_at = [kinds.index("safe")]
    else:
        target_at = [rng.choice(holders) for _ in range(need)]
    first = min(target_at)
    num_decoys = config.num_decoys if config.num_decoys is not None else rng.randint(1, 2)
    decoy_at = [rng.choice([i for i in holders if i <= first] or holders) for _ in range(num_decoys)]
    others = [t for t in room_objects if t not in (target, decoy)]
    num_objects = config.num_objects if config.num_objects is not None else rng.randint(4, 10)
    extra = [(rng.choice(others), rng.choice(holders)) for _ in range(num_objects)]
    placed = [(target, r) for r in target_at] + [(decoy, r) for r in decoy_at] + extra
    counts: dict[str, int] = {}
    objects, types, locs = [], [], []
    for t, r in placed:
        counts[t] = counts.get(t, 0) + 1
        objects.append(f"{t} {counts[t]}")
        types.append(t)
        locs.append(r)
    goal_text = rng.choice(GOAL_TEXT[task_type]).format(
        o=target, r=names[goal] if goal != ROOM else "")
    init = State(seed=seed, turn=0, loc=ROOM, obj_loc=tuple(locs), obj_flags=(0,) * len(locs),
                 opened=0, locked=0, seen=0)
    return Layout(seed=seed, task_type=task_type, goal_text=goal_text, receptacles=tuple(names),
                  kinds=kinds, openable=openable, latching=latching, objects=tuple(objects),
                  obj_types=tuple(types), target_type=target, decoy_type=decoy, need=need,
                  required=required, goal=goal, lamp=lamp, max_turns=config.max_turns, init=init)
