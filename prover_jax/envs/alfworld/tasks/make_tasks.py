"""Writes the shipped ALFWorld tasks: `<split>/<task_dir>/<trial_dir>/{initial_state.pddl, traj_data.json,
game.tw-pddl}`, the layout ALFWorld's own data uses.

Each task is a small room (a handful of receptacles, the goal objects and a few distractors) written as a
PDDL problem over ALFWorld's domain (`alfworld/data/alfred.pddl`); object properties (canContain,
cleanable, heatable, coolable, toggleable, openable) come from ALFWorld's own tables. A task is marked
solvable only after the planner expert's plan, executed in the engine, reaches the goal.

    python -m prover_jax.envs.alfworld.tasks.make_tasks      # needs the `alfworld` extra
"""

from __future__ import annotations

import json
import os
import shutil
from typing import NamedTuple

HERE = os.path.dirname(os.path.abspath(__file__))

KITCHEN = ("CounterTop", "Cabinet", "Drawer", "Fridge", "Microwave", "SinkBasin", "DiningTable", "GarbageCan")
BEDROOM = ("Bed", "Desk", "SideTable", "Drawer", "Dresser", "Shelf", "GarbageCan")

# The goal sentence, one fixed template per task type (ALFWorld's first template for each).
GOAL_TEXT = {
    "pick_and_place_simple": "put a {obj} in {recep}",
    "look_at_obj_in_light": "look at {obj} under the {toggle}",
    "pick_clean_then_place_in_recep": "put a clean {obj} in {recep}",
    "pick_heat_then_place_in_recep": "put a hot {obj} in {recep}",
    "pick_cool_then_place_in_recep": "put a cool {obj} in {recep}",
    "pick_two_obj_and_place": "put two {obj} in {recep}",
}
ANNOTATION = {
    "pick_and_place_simple": "Move the {obj} over to the {recep}.",
    "look_at_obj_in_light": "Pick up the {obj} and turn on the {toggle} to look at it.",
    "pick_clean_then_place_in_recep": "Rinse the {obj} in the sink, then leave it in the {recep}.",
    "pick_heat_then_place_in_recep": "Warm the {obj} in the microwave, then set it in the {recep}.",
    "pick_cool_then_place_in_recep": "Chill the {obj} in the fridge, then set it in the {recep}.",
    "pick_two_obj_and_place": "Gather both {obj}s and put them in the {recep}.",
}


class Task(NamedTuple):
    """One task: `placements` lists (object type, receptacle type) for every object in the room."""

    split: str
    task_type: str
    scene: int
    receptacles: tuple[str, ...]
    placements: tuple[tuple[str, str], ...]
    obj: str
    recep: str = ""
    toggle: str = ""


TASKS = (
    Task("train", "pick_and_place_simple", 1, KITCHEN,
         (("Mug", "CounterTop"), ("Bread", "DiningTable"), ("Spoon", "Drawer"), ("Egg", "Fridge")),
         "Mug", recep="Cabinet"),
    Task("train", "pick_and_place_simple", 2, BEDROOM,
         (("CellPhone", "Drawer"), ("Book", "Desk"), ("Pen", "SideTable"), ("KeyChain", "Dresser")),
         "CellPhone", recep="Bed"),
    Task("train", "look_at_obj_in_light", 3, BEDROOM,
         (("Book", "Bed"), ("DeskLamp", "Desk"), ("Pencil", "Drawer"), ("CD", "Shelf")),
         "Book", toggle="DeskLamp"),
    Task("train", "look_at_obj_in_light", 4, BEDROOM,
         (("AlarmClock", "Drawer"), ("DeskLamp", "SideTable"), ("Book", "Desk"), ("CellPhone", "Bed")),
         "AlarmClock", toggle="DeskLamp"),
    Task("train", "pick_clean_then_place_in_recep", 5, KITCHEN,
         (("Plate", "DiningTable"), ("Mug", "CounterTop"), ("Apple", "Fridge"), ("Spoon", "Drawer")),
         "Plate", recep="Cabinet"),
    Task("train", "pick_clean_then_place_in_recep", 6, KITCHEN,
         (("Fork", "Drawer"), ("Knife", "CounterTop"), ("Bread", "DiningTable"), ("Cup", "Cabinet")),
         "Fork", recep="DiningTable"),
    Task("train", "pick_heat_then_place_in_recep", 7, KITCHEN,
         (("Egg", "Fridge"), ("Apple", "DiningTable"), ("Mug", "Cabinet"), ("Spoon", "CounterTop")),
         "Egg", recep="CounterTop"),
    Task("train", "pick_heat_then_place_in_recep", 8, KITCHEN,
         (("Potato", "CounterTop"), ("Tomato", "Fridge"), ("Plate", "Cabinet"), ("Fork", "Drawer")),
         "Potato", recep="DiningTable"),
    Task("train", "pick_cool_then_place_in_recep", 9, KITCHEN,
         (("Tomato", "DiningTable"), ("Potato", "Cabinet"), ("Egg", "CounterTop"), ("Knife", "Drawer")),
         "Tomato", recep="CounterTop"),
    Task("train", "pick_cool_then_place_in_recep", 10, KITCHEN,
         (("Cup", "Microwave"), ("Mug", "DiningTable"), ("Bread", "CounterTop"), ("Spoon", "Drawer")),
         "Cup", recep="Cabinet"),
    Task("train", "pick_two_obj_and_place", 11, KITCHEN,
         (("Apple", "CounterTop"), ("Apple", "DiningTable"), ("Tomato", "CounterTop"), ("Egg", "Cabinet")),
         "Apple", recep="Fridge"),
    Task("train", "pick_two_obj_and_place", 12, BEDROOM,
         (("CD", "Desk"), ("CD", "Drawer"), ("Pen", "Shelf"), ("Book", "Bed")),
         "CD", recep="Shelf"),
    Task("valid_seen", "pick_and_place_simple", 13, BEDROOM,
         (("KeyChain", "SideTable"), ("CD", "Desk"), ("Pencil", "Drawer")),
         "KeyChain", recep="Dresser"),
    Task("valid_seen", "look_at_obj_in_light", 14, BEDROOM,
         (("CD", "Shelf"), ("DeskLamp", "Desk"), ("Pen", "Bed")),
         "CD", toggle="DeskLamp"),
    Task("valid_seen", "pick_clean_then_place_in_recep", 15, KITCHEN,
         (("Mug", "Cabinet"), ("Cup", "CounterTop"), ("Bread", "Fridge")),
         "Mug", recep="DiningTable"),
    Task("valid_seen", "pick_heat_then_place_in_recep", 16, KITCHEN,
         (("Apple", "DiningTable"), ("Potato", "Fridge"), ("Cup", "Cabinet")),
         "Apple", recep="GarbageCan"),
    Task("valid_seen", "pick_cool_then_place_in_recep", 17, KITCHEN,
         (("Bread", "CounterTop"), ("Apple", "Microwave"), ("Plate", "Cabinet")),
         "Bread", recep="DiningTable"),
    Task("valid_seen", "pick_two_obj_and_place", 18, BEDROOM,
         (("Pencil", "Desk"), ("Pencil", "SideTable"), ("Pen", "Drawer"), ("Book", "Shelf")),
         "Pencil", recep="Dresser"),
)


def _receptacle_id(rtype: str, k: int) -> str:
    return f"Sink_bar_{k}_bar_SinkBasin" if rtype == "SinkBasin" else f"{rtype}_bar_{k}"


def _location(i: int, scene: int) -> str:
    x, z = (3 * i + scene) % 9 - 4, (5 * i + 2 * scene) % 7 - 3
    enc = lambda v: f"_minus_{-v}" if v < 0 else str(v)  # noqa: E731
    return f"loc_bar_{enc(x)}_bar_{enc(z)}_bar_{i % 4}_bar_{(15 * i) % 60}"


def problem_pddl(task: Task) -> str:
    """The PDDL problem of `task` over ALFWorld's `alfred` domain."""
    from alfworld.gen import constants as C

    rec = {r: (_receptacle_id(r, 1), _location(i + 1, task.scene)) for i, r in enumerate(task.receptacles)}
    counts: dict[str, int] = {}
    objs = []  # (id, type, receptacle type)
    for otype, rtype in task.placements:
        assert rtype in rec, (task, rtype)
        counts[otype] = counts.get(otype, 0) + 1
        objs.append((f"{otype}_bar_{counts[otype]}", otype, rtype))
    otypes = sorted({t for _, t, _ in objs})
    start = _location(0, task.scene)
    toggleable = C.VAL_ACTION_OBJECTS["Toggleable"]

    decl = ["agent1 - agent"] + [f"{t}Type - otype" for t in otypes]
    decl += [f"{r}Type - rtype" for r in sorted(rec)] + [f"{i} - object" for i, _, _ in objs]
    decl += [f"{rid} - receptacle" for rid, _ in rec.values()]
    decl += [f"{loc} - location" for loc in sorted({loc for _, loc in rec.values()} | {start})]
    init = [f"(atLocation agent1 {start})"]
    for r, (rid, loc) in sorted(rec.items()):
        init += [f"(receptacleType {rid} {r}Type)", f"(receptacleAtLocation {rid} {loc})"]
        if r in C.OPENABLE_CLASS_SET:
            init.append(f"(openable {rid})")
        init += [f"(canContain {r}Type {t}Type)" for t in otypes if t in C.VAL_RECEPTACLE_OBJECTS.get(r, ())]
    for oid, t, r in objs:
        init += [f"(objectType {oid} {t}Type)", f"(inReceptacle {oid} {rec[r][0]})",
                 f"(objectAtLocation {oid} {rec[r][1]})"]
        if t in toggleable:
            init.append(f"(toggleable {oid})")
        else:
            init.append(f"(pickupable {oid})")
        for prop, key in (("cleanable", "Cleanable"), ("heatable", "Heatable"), ("coolable", "Coolable")):
            if t in C.VAL_ACTION_OBJECTS[key]:
                init.append(f"({prop} {oid})")
        if t == task.obj:
            init.append(f"(wasInReceptacle {oid} {rec[r][0]})")
    if task.recep:
        assert task.obj in C.VAL_RECEPTACLE_OBJECTS[task.recep], task
    goal = _goal(task)
    ind = "\n        "
    return (f"(define (problem alfworld_task_{task.scene})\n    (:domain alfred)\n    (:objects{ind}"
            + ind.join(decl) + f"\n    )\n    (:init{ind}" + ind.join(init) + f"\n    )\n{goal}\n)\n")


def _goal(task: Task) -> str:
    o, r, t = task.obj, task.recep, task.toggle
    state = {"pick_clean_then_place_in_recep": "(cleanable ?o) (isClean ?o)",
             "pick_heat_then_place_in_recep": "(heatable ?o) (isHot ?o)",
             "pick_cool_then_place_in_recep": "(coolable ?o) (isCool ?o)",
             "pick_and_place_simple": ""}
    if task.task_type in state:
        return ("    (:goal (exists (?r - receptacle ?o - object) (and (objectType ?o " + o + "Type) "
                f"(receptacleType ?r {r}Type) (inReceptacle ?o ?r) {state[task.task_type]})))")
    if task.task_type == "pick_two_obj_and_place":
        return ("    (:goal (exists (?r - receptacle ?o1 - object ?o2 - object) (and (not (= ?o1 ?o2)) "
                f"(objectType ?o1 {o}Type) (objectType ?o2 {o}Type) (receptacleType ?r {r}Type) "
                "(inReceptacle ?o1 ?r) (inReceptacle ?o2 ?r))))")
    assert task.task_type == "look_at_obj_in_light", task
    return ("    (:goal (and (exists (?t - object ?r - receptacle ?a - agent ?l - location) (and "
            f"(objectType ?t {t}Type) (toggleable ?t) (isToggled ?t) (receptacleAtLocation ?r ?l) "
            "(atLocation ?a ?l) (inReceptacle ?t ?r))) "
            f"(exists (?o - object ?a - agent) (and (objectType ?o {o}Type) (holds ?a ?o)))))")


def traj_data(task: Task) -> dict:
    """The fields of ALFRED's traj_data.json that ALFWorld reads."""
    words = dict(obj=task.obj.lower(), recep=task.recep.lower(), toggle=task.toggle.lower())
    return {
        "task_id": f"trial_P{task.scene:04d}",
        "task_type": task.task_type,
        "scene": {"floor_plan": f"FloorPlanP{task.scene}", "scene_num": task.scene},
        "pddl_params": {"object_target": task.obj, "parent_target": task.recep, "toggle_target": task.toggle,
                        "mrecep_target": "", "object_sliced": False},
        "turk_annotations": {"anns": [{"task_desc": ANNOTATION[task.task_type].format(**words),
                                       "high_descs": [], "votes": [1]}]},
    }


def task_dir(task: Task) -> str:
    name = f"{task.task_type}-{task.obj}-None-{task.recep or task.toggle}-{task.scene}"
    return os.path.join(task.split, name, f"trial_P{task.scene:04d}")


def write_all(root: str = HERE) -> list[str]:
    """Writes every task under `root`, checks it with the planner expert; returns the game paths."""
    import alfworld

    data = os.path.join(os.path.dirname(alfworld.__file__), "data")
    domain = open(os.path.join(data, "alfred.pddl")).read()
    grammar = open(os.path.join(data, "alfred.twl2")).read()
    for split in ("train", "valid_seen", "valid_unseen"):
        shutil.rmtree(os.path.join(root, split), ignore_errors=True)
    paths = []
    for task in TASKS:
        folder = os.path.join(root, task_dir(task))
        os.makedirs(folder)
        pddl, traj = problem_pddl(task), traj_data(task)
        words = dict(obj=task.obj.lower(), recep=task.recep.lower(), toggle=task.toggle.lower())
        goal = GOAL_TEXT[task.task_type].format(**words)
        game = {"pddl_domain": domain, "grammar": grammar.replace("UNKNOWN GOAL", goal),
                "pddl_problem": pddl, "solvable": None, "walkthrough": None}
        with open(os.path.join(folder, "initial_state.pddl"), "w") as f:
            f.write(pddl)
        with open(os.path.join(folder, "traj_data.json"), "w") as f:
            json.dump(traj, f, indent=1, sort_keys=True)
        path = os.path.join(folder, "game.tw-pddl")
        with open(path, "w") as f:
            json.dump(game, f)
        game["walkthrough"] = _solve(path)
        game["solvable"] = game["walkthrough"] is not None
        assert game["solvable"], f"planner cannot solve {folder}"
        with open(path, "w") as f:
            json.dump(game, f)
        paths.append(path)
    return paths


def _solve(path: str) -> list[str] | None:
    """The planner expert's walkthrough of the game at `path`, if playing it in the engine wins."""
    from prover_jax.envs.alfworld.env import _engine

    engine = _engine()
    engine.frame(path, (), exact=True)
    plan = engine.plan()
    return plan if plan and engine.frame(path, plan)[1] else None


if __name__ == "__main__":
    for p in write_all():
        print(p)
