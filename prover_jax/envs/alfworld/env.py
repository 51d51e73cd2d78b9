"""ALFWorld over its real text engine (TextWorld's PDDL environment + ALFWorld's naming and planner).

Games are ALFWorld `game.tw-pddl` files found under

    <data_dir>/json_2.1.1/<split>/**/game.tw-pddl     (the layout of the downloaded ALFWorld data), or
    <data_dir>/<split>/**/game.tw-pddl                (the shipped tasks, `prover_jax/envs/alfworld/tasks`)

with `data_dir` = kwarg, else `$ALFWORLD_DATA`, else the shipped tasks (see `resolve_data_dir`).
Games marked unsolvable, sliced or movable-receptacle games are skipped, as ALFWorld does.

Splits: train tasks are the games of `split` (default "train"), eval tasks those of `eval_split`
("valid_seen", the default when split="train"; "valid_unseen" for ALFWorld's out-of-distribution
games; "" for none), both under the same data directory: train seed s plays train game s % n_train
of the sorted paths (as before), eval task i plays eval game i % n_eval. The shipped tasks hold 12
train and 6 valid_seen games (each task type in both) and no valid_unseen. Task ids are
`<task folder>/<trial folder>`; the two splits may not share one, nor be the same split (ValueError).

State and restore: the engine (fast-downward) cannot be copied, but it is deterministic, so a state is
`Snapshot(gamefile, actions)` and restore is reset + replay of the admissible actions. Requires the
`alfworld` extra (`pip install prover_jax[alfworld]`).

One engine per process: fast-downward keeps global state, so every `AlfredEnv` of a process shares ONE
engine; each env keeps its own history and the engine is re-synchronised (reset + replay) when envs
interleave. Correct, but interleaving is slow: run many envs in separate processes (`envs.pool`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
from typing import ClassVar, Sequence

from prover_jax.envs.base import Env, PromptSpec, info_dict, register, split_seed
from prover_jax.envs.splits import IndexSplit

SHIPPED_TASKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tasks")
TASK_TYPES = ("pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
              "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place")
MAX_ACTION_CHARS = 200
NOTHING = "Nothing happens."

SYSTEM_PROMPT = """You are an agent in a household (ALFWorld, a text version of ALFRED). Each turn you see \
what happened and the commands you can use now. Reach the goal stated after "Your task is to:".
Commands look like: go to <receptacle>, open/close <receptacle>, take <object> from <receptacle>, \
move <object> to <receptacle>, heat/cool/clean <object> with <receptacle>, use <lamp>, examine <thing>, \
look, inventory.
Think briefly, then give exactly one command, copied from the list, as <action>command</action>."""

# (observation, won, admissible commands) after a number of engine actions.
Frame = tuple[str, bool, tuple[str, ...]]


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """An ALFWorld state as a replay record: the game file and every action sent since reset (turn =
    len(actions)). Two records are equal only for equal action histories, not for every equal game
    state (`HISTORY`: GiGPO anchors on observation text instead)."""

    HISTORY: ClassVar[bool] = True
    gamefile: str
    actions: tuple[str | None, ...]


def _import_engine():
    try:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
        from textworld.envs import PddlEnv
    except ImportError as e:
        raise ImportError("the ALFWorld engine is not installed: pip install prover_jax[alfworld] "
                          f"(needs alfworld and textworld; {e})") from e
    return textworld, PddlEnv, AlfredDemangler


def _memoise_translation() -> None:
    """Caches fast-downward's PDDL->SAS translation per (domain, problem): every engine reset otherwise
    re-translates the same game (~40% of a reset). The result is read-only for the engine."""
    import fast_downward

    if getattr(fast_downward.pddl2sas, "memoised", False):
        return
    translate = fast_downward.pddl2sas

    @functools.lru_cache(maxsize=8)
    def pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False):
        return translate(domain, problem, verbose=verbose, optimize=optimize)

    pddl2sas.memoised = True
    fast_downward.pddl2sas = pddl2sas


class _Engine:
    """The process's single ALFWorld engine, with a cursor over the branch it last played.

    `trace[k]` is the frame after `applied[:k]`; asking for a prefix of the current branch costs nothing,
    any other state costs a reset + replay. `frame(..., exact=True)` also moves the engine itself there
    (needed before planning).
    """

    def __init__(self):
        textworld, PddlEnv, AlfredDemangler = _import_engine()
        _memoise_translation()
        self._pddl = PddlEnv(textworld.EnvInfos(admissible_commands=True, won=True))
        self._env = AlfredDemangler(self._pddl, shuffle=False)
        self.gamefile: str | None = None
        self.applied: list[str] = []
        self.trace: list[Frame] = []
        self.at = 0  # the engine's real position on the branch: after applied[:at]

    def frame(self, gamefile: str, applied: Sequence[str], exact: bool = False) -> Frame:
        """The frame after playing `applied` (admissible commands) from the reset of `gamefile`."""
        if gamefile != self.gamefile:
            self.gamefile = None
            self._call(self._env.load, gamefile)
            self.gamefile, self.applied, self.at = gamefile, [], 0
            self.trace = [self._frame(self._call(self._env.reset))]
        n = 0
        while n < min(len(applied), len(self.applied)) and applied[n] == self.applied[n]:
            n += 1
        if n < len(applied):
            del self.applied[n:], self.trace[n + 1:]
            self._move(n)
            for command in applied[n:]:
                self.trace.append(self._frame(self._call(self._env.step, command)[0]))
                self.applied.append(command)
                self.at += 1
        elif exact:
            self._move(n)
        return self.trace[len(applied)]

    def plan(self) -> list[str]:
        """The planner's (fast-downward) optimal command sequence from the engine's position."""
        return list(self._call(self._pddl._pddl_state.replan, self._pddl._entity_infos))

    def _move(self, k: int) -> None:
        """Puts the engine itself after `applied[:k]` (replaying from reset when it is past k)."""
        if self.at > k:
            self._call(self._env.reset)
            self.at = 0
        while self.at < k:
            self._call(self._env.step, self.applied[self.at])
            self.at += 1

    @staticmethod
    def _frame(state) -> Frame:
        return str(state.feedback), bool(state["won"]), tuple(state["admissible_commands"])

    @staticmethod
    def _call(fn, *args):
        argv = list(sys.argv)  # the PDDL translator overwrites sys.argv
        try:
            return fn(*args)
        finally:
            sys.argv[:] = argv


@functools.lru_cache(maxsize=1)
def _engine() -> _Engine:
    return _Engine()


def find_games(data_dir: str, split: str = "train", task_types: Sequence[str] = TASK_TYPES) -> list[str]:
    """Sorted solvable ALFWorld game files of `split` under `data_dir` (see module docstring)."""
    candidates = [os.path.join(data_dir, "json_2.1.1", split), os.path.join(data_dir, split)]
    root = next((c for c in candidates if os.path.isdir(c)), None)
    if root is None:
        raise FileNotFoundError(f"no ALFWorld split {split!r} under {data_dir!r}: expected one of "
                                f"{candidates} (set data_dir or $ALFWORLD_DATA)")
    games = []
    for folder, _, files in os.walk(root):
        if "traj_data.json" not in files or "game.tw-pddl" not in files:
            continue
        if "movable" in folder or "Sliced" in folder:
            continue
        with open(os.path.join(folder, "traj_data.json")) as f:
            if json.load(f)["task_type"] not in task_types:
                continue
        path = os.path.join(folder, "game.tw-pddl")
        with open(path) as f:
            if not json.load(f).get("solvable"):
                continue
        games.append(path)
    if not games:
        raise FileNotFoundError(f"no solvable ALFWorld games (game.tw-pddl + traj_data.json) under {root!r}")
    return sorted(games)


def game_id(gamefile: str) -> str:
    """A game's task id: '<task folder>/<trial folder>' (the same in every copy of the data)."""
    trial = os.path.dirname(os.path.abspath(gamefile))
    return f"{os.path.basename(os.path.dirname(trial))}/{os.path.basename(trial)}"


def resolve_data_dir(data_dir: str | None, split: str) -> str:
    """`data_dir`, else `$ALFWORLD_DATA`, else the shipped tasks.

    Importing alfworld sets `$ALFWORLD_DATA` to `~/.cache/alfworld` when it is unset; that default counts
    as unset unless it actually holds the split.
    """
    if data_dir:
        return os.path.expandvars(os.path.expanduser(data_dir))
    env_dir = os.environ.get("ALFWORLD_DATA")
    if not env_dir:
        return SHIPPED_TASKS
    env_dir = os.path.expandvars(os.path.expanduser(env_dir))
    holds_split = any(os.path.isdir(os.path.join(env_dir, *p, split)) for p in (("json_2.1.1",), ()))
    if not holds_split and os.path.abspath(env_dir) == os.path.expanduser("~/.cache/alfworld"):
        return SHIPPED_TASKS
    return env_dir


def malformed(action: object) -> str | None:
    """Why `action` cannot be a command at all (None when it is well formed)."""
    if not isinstance(action, str):
        return "no action given"
    if not action.strip():
        return "empty action"
    if len(action) > MAX_ACTION_CHARS:
        return f"action longer than {MAX_ACTION_CHARS} characters"
    if not action.isascii():
        return "action contains non-ASCII characters"
    if not action.isprintable():
        return "action contains line breaks or control characters"
    return None


@register("alfworld")
class AlfredEnv(Env):
    """ALFWorld text games on the real engine; binary success = the game's goal reached.

    step: an admissible command is played; anything else gives ALFWorld's "Nothing happens." with
    `valid=False` and no state change (it still costs a turn). The episode ends on success or after
    `max_turns` turns. info: success, score, valid, admissible, turn (+ gamefile, task at reset).
    `games` / `eval_games`: the sorted game files of the train / eval split (see module docstring);
    eval_split=None: "valid_seen" when split="train", else no eval split; "": no eval split.
    """

    name = "alfworld"

    def __init__(self, data_dir: str | None = None, split: str = "train", max_turns: int = 50,
                 task_types: Sequence[str] = TASK_TYPES, eval_split: str | None = None):
        if eval_split is None:
            eval_split = "valid_seen" if split == "train" else ""
        root = resolve_data_dir(data_dir, split)
        self.games = find_games(root, split, task_types)
        self.eval_games: list[str] = []
        if eval_split:
            if eval_split == split:
                raise ValueError(f"alfworld: eval_split={eval_split!r} is the training split (split={split!r}): "
                                 "evaluate on another split, e.g. valid_seen or valid_unseen")
            try:
                self.eval_games = find_games(root, eval_split, task_types)
            except FileNotFoundError as e:
                raise FileNotFoundError(f"alfworld: eval_split={eval_split!r}: {e}") from None
        self._all_games = self.games + self.eval_games
        n = len(self.games)
        self.split = IndexSplit(
            "alfworld", [game_id(g) for g in self._all_games], range(n), range(n, len(self._all_games)),
            {"train": f"split={split!r} under {root}",
             "eval": f"eval_split={eval_split!r} under {root}" if eval_split else
                     f"no eval_split (split={split!r}); set eval_split, e.g. 'valid_seen'"})
        self.max_turns = int(max_turns)
        _import_engine()
        self._gamefile: str | None = None
        self._actions: tuple[str | None, ...] = ()
        self._applied: tuple[str, ...] = ()
        self._last: Frame = ("", False, ())

    @property
    def prompt(self) -> PromptSpec:
        return PromptSpec(system=SYSTEM_PROMPT, max_turns=self.max_turns)

    def task_id(self, seed: int, split: str = "train") -> str:
        return self.split.task_id(split_seed(seed, split))

    def split_sizes(self) -> dict[str, int | None]:
        return self.split.sizes()

    def reset(self, seed: int) -> tuple[str, dict]:
        self.restore(Snapshot(self._all_games[self.split.index(int(seed))], ()))
        obs, _, admissible = self._last
        task = obs.rsplit("Your task is to: ", 1)[-1].strip()
        return obs, info_dict(admissible=list(admissible), turn=0, gamefile=self._gamefile, task=task)

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        if self._gamefile is None:
            raise RuntimeError("call reset() before step()")
        if self.done:
            return ("The episode is over.", 0.0, True,
                    info_dict(success=self._last[1], valid=False, admissible=[], turn=len(self._actions)))
        obs, valid = self._advance(action)
        won = self._last[1]
        done = self.done
        return obs, float(won and valid), done, info_dict(
            success=won, valid=valid, admissible=[] if done else list(self._last[2]), turn=len(self._actions))

    @property
    def done(self) -> bool:
        return self._last[1] or len(self._actions) >= self.max_turns

    def snapshot(self) -> Snapshot:
        return Snapshot(self._gamefile, self._actions)

    def restore(self, snapshot: Snapshot) -> None:
        """Reset to `snapshot.gamefile`, then replay its actions (invalid ones change nothing)."""
        self._gamefile, self._actions, self._applied = snapshot.gamefile, (), ()
        self._last = _engine().frame(self._gamefile, ())
        for action in snapshot.actions:
            self._advance(action)

    def expert_action(self) -> str | None:
        """First command of the planner's optimal plan from here (ALFWorld's "planner" expert)."""
        if self._gamefile is None or self.done:
            return None
        engine = _engine()
        engine.frame(self._gamefile, self._applied, exact=True)
        plan = engine.plan()
        return plan[0] if plan else None

    def _advance(self, action: str | None) -> tuple[str, bool]:
        """Plays one turn; returns (observation, valid)."""
        self._actions += (action,)
        reason = malformed(action)
        if reason is not None:
            self._last = (f"{NOTHING} Invalid action: {reason}.",) + self._last[1:]
            return self._last[0], False
        command = action.strip()
        if command not in self._last[2]:
            self._last = (NOTHING,) + self._last[1:]
            return NOTHING, False
        self._applied += (command,)
        self._last = _engine().frame(self._gamefile, self._applied)
        return self._last[0], True
