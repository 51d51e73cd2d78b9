"""`household`: an ALFWorld-like text household task family, generated from the seed, pure Python.

The six ALFWorld task types (pick_and_place, look_at_obj_in_light, pick_clean_then_place,
pick_heat_then_place, pick_cool_then_place, pick_two_obj_and_place) in kitchens, bathrooms, bedrooms
and living rooms, with ALFWorld's observations and commands (`go to X`, `open X`, `close X`,
`take X from Y`, `put X in/on Y`, `heat/cool/clean X with Y`, `use X`, `examine X`, `look`,
`inventory`). `info["admissible"]` lists the valid commands; anything else is invalid (state
unchanged, the turn still counts). Reward 1.0 on success, else 0.0; `score == float(success)`. The
expert (see `household.expert`) needs 10-24 turns by default; the turn limit is 30.

Irreversible pivotal rules (each task holds 2-4 of them among mostly neutral moves):
  1. Commit. What is put in/on the task's target receptacle stays there, and the task is judged on all
     of it: putting a lookalike decoy (a cup for a mug, a tomato for an apple), a ruined object, or an
     object not yet cleaned/heated/cooled there fails the task for good.
  2. Latch. The target receptacle, if it has a door, locks for good when closed; so does every safe.
     Closing it before the task is done (or closing the safe that holds the target) is fatal.
  3. Scorch. Heating on a stoveburner (instead of the microwave) ruins the object.
  4. Lamp. The desklamp's old bulb works once: switching it on without the target in hand is fatal.
Pivots per type: pick_and_place: decoy commit, latch (the target receptacle always has a door);
pick_two_obj_and_place: a commit per object, latch after the first; look_at_obj_in_light: lamp
(with a decoy in the room), latch (the target is kept in the safe); pick_clean/heat/cool_then_place:
decoy commit, premature commit, plus the stoveburner (heat) and the latch when the target receptacle
has a door.

`info` extras: won (== success), turn, task_type, goal (the task sentence), expert (the expert's
command in this state, which `envs.testing.mixed_policy` reads).

Snapshots are the hashable `household.world.State` (with the turn counter and the seed), valid for
envs built with the same kwargs; `restore` regenerates the layout when the seed differs.

Splits (see `envs.splits.ContentSplit`): small rooms repeat across generator seeds, so the held-out
eval tasks are a share `eval_fraction` (default 0.1) of the layouts themselves, by content hash; train
seed s plays layout s unless that layout is held out (then a redraw), eval task i is the i-th distinct
held-out layout. `State.seed` / `Layout.seed` are the generator seed (draw id) actually played.
"""

from __future__ import annotations

import dataclasses
import random
import re
from typing import Callable

from prover_jax.envs.base import Env, PromptSpec, info_dict, register, split_seed
from prover_jax.envs.household.demonstrator import Faults, faulty_command, idle_command, idles
from prover_jax.envs.household.expert import expert_command
from prover_jax.envs.household.pivots import pivot
from prover_jax.envs.household.gen import LOOKALIKE, TASK_TYPES, Config, generate
from prover_jax.envs.household.world import HAND, Layout, State, apply, commands, intro_text
from prover_jax.envs.splits import EVAL_FRACTION, ContentSplit
from prover_jax.envs.text import normalize as fold

MAX_ACTION_CHARS = 200
GIVE_UP = "wait"  # the demonstrator's inadmissible command once the task is lost (demo_give_up)
VERBS = ("go", "open", "close", "take", "put", "heat", "cool", "clean", "use", "examine", "look",
         "inventory")
_PUT_RE = re.compile(r"^put (.+?) (?:in/on|in|on|into|onto) (.+)$")

SYSTEM_PROMPT = """\
You are an agent in a household. Each turn you read what happened and the commands you can use now, \
and you reply with exactly one command inside <action>...</action>, for example \
<action>go to countertop 1</action>.
Commands: go to X, open X, close X, take X from Y, put X in/on Y, heat X with Y, cool X with Y, \
clean X with Y, use X, examine X, look, inventory.
House rules:
- You carry one object at a time. Objects inside closed receptacles are hidden until you open them.
- The microwave heats, the fridge cools, a sinkbasin cleans. A stoveburner scorches what you heat on \
it: the object is ruined.
- Whatever you put in/on the receptacle named in your task stays there, and the task is judged on \
all of it. That receptacle, if it has a door, locks for good once closed; so does any safe.
- The desklamp's old bulb works only once.
- Some objects look alike (a cup is not a mug): read names carefully.
The task succeeds as soon as it is done; you have {max_turns} turns."""


def normalize(action: str) -> str:
    """Canonical command text: lowercase, single spaces, no final period, 'put X in/on Y'."""
    text = fold(action).rstrip(".").strip()
    m = _PUT_RE.match(text)
    if m:
        text = f"put {m.group(1)} in/on {m.group(2)}"
    return text


@register("household")
class HouseholdEnv(Env):
    """ALFWorld-like household tasks (see module docstring).

    Args:
      task_type: one of `TASK_TYPES`, or None to draw it from the seed.
      num_receptacles: receptacles in the room (None: 8-13 drawn from the seed; small values such as 4
        give rooms small enough for exact DP).
      num_objects: neutral objects besides targets and decoys (None: 4-10).
      num_decoys: lookalike decoys (None: 1-2).
      max_turns: turn limit of an episode.
      expert_turns: (lo, hi) range of the expert's episode length the generator aims for.
      eval_fraction: share of the generated layouts held out as eval tasks (see module docstring).
      target_types: the task object types a task may draw (None: every type with a lookalike in the
        room), e.g. a few lookalike pairs so that each pivotal choice recurs across many tasks.
      demo_confusion: share of the tasks (drawn from the task's seed) in which the demonstrator,
        `expert_action` (what SFT's demonstrations play), mistakes the lookalike for the task object
        and commits whichever it meets first (those episodes fail; SFT keeps them only with
        sft.successes_only=False); `info["expert"]` stays the true expert. 0 = a perfect demonstrator.
      demo_noise: DART-style slips of the demonstrator: before each of its commands, with this
        probability (drawn from the task's seed and the turn), it first issues a well-formed command
        that is not admissible, as a policy's slip would be; the env answers "Nothing happens" and the
        demonstrator recovers. SFT trains on the recoveries, never on the slips (invalid turns).
      demo_scorch / demo_premature / demo_latch: shares of the tasks (each drawn from the seed on its
        own) in which the demonstrator heats on a stoveburner, commits before processing, or closes the
        target receptacle after checking it first (`household.demonstrator`); 0 = never.
      demo_scorch_types: the task object types demo_scorch applies to (None: all).
      demo_idle: per-turn probability that the demonstrator first plays an admissible no-op (examine,
        look, inventory); kept in SFT (they are valid turns).
      demo_give_up: once the task is lost (the demonstrator has nothing left to do but `look`), it plays
        the inadmissible `wait` instead, so SFT, which masks invalid turns, imitates a failure up to its
        mistake and not the turns spent waiting out the limit (the episode still runs to it).
    """

    name = "household"

    def __init__(self, task_type: str | None = None, num_receptacles: int | None = None,
                 num_objects: int | None = None, num_decoys: int | None = None, max_turns: int = 30,
                 expert_turns: tuple[int, int] = (10, 24), eval_fraction: float = EVAL_FRACTION,
                 target_types: tuple[str, ...] | None = None, demo_confusion: float = 0.0,
                 demo_noise: float = 0.0, demo_scorch: float = 0.0, demo_premature: float = 0.0,
                 demo_latch: float = 0.0, demo_scorch_types: tuple[str, ...] | None = None,
                 demo_idle: float = 0.0, demo_give_up: bool = False):
        if task_type is not None and task_type not in TASK_TYPES:
            raise ValueError(f"unknown task_type {task_type!r}; known: {TASK_TYPES}")
        self.faults = Faults(confused=float(demo_confusion), scorch=float(demo_scorch),
                             premature=float(demo_premature), latch=float(demo_latch),
                             scorch_types=None if demo_scorch_types is None else tuple(demo_scorch_types))
        for name, p in (("demo_noise", demo_noise), ("demo_idle", demo_idle)):
            if not 0.0 <= p < 1.0:
                raise ValueError(f"env.kwargs.{name} must lie in [0, 1), got {p}")
        self.demo_noise, self.demo_idle, self.demo_give_up = float(demo_noise), float(demo_idle), bool(demo_give_up)
        lo, hi = expert_turns
        if target_types is not None:
            target_types = tuple(target_types)
            unknown = [t for t in target_types if t not in LOOKALIKE]
            if unknown or not target_types:
                raise ValueError(f"env.kwargs.target_types: {unknown or 'empty'} not among the task object "
                                 f"types {sorted(LOOKALIKE)}")
        self.config = Config(task_type=task_type, num_receptacles=num_receptacles,
                             num_objects=num_objects, num_decoys=num_decoys, max_turns=max_turns,
                             expert_turns=(lo, min(hi, max_turns)), target_types=target_types)
        config = self.config
        self.split = ContentSplit("household", lambda draw: layout_key(generate(draw, config)), eval_fraction,
                                  cache_key=config)
        self._layout: Layout | None = None
        self._state: State | None = None
        self._cmds: dict = {}
        self._slipped = False  # the demonstrator's last command was a slip (demo_noise) or an idle turn (demo_idle)

    @property
    def prompt(self) -> PromptSpec:
        return PromptSpec(system=SYSTEM_PROMPT.format(max_turns=self.config.max_turns),
                          stop_strings=("</action>",), max_turns=self.config.max_turns)

    @property
    def layout(self) -> Layout:
        """The current task's static layout (after `reset`)."""
        if self._layout is None:
            raise RuntimeError("call reset(seed) first")
        return self._layout

    def reset(self, seed: int) -> tuple[str, dict]:
        self._layout = generate(self.split.index(int(seed)), self.config)
        self._set_state(self._layout.init)
        self._slipped = False
        return intro_text(self._layout), self._info(valid=True)

    def task_id(self, seed: int, split: str = "train") -> str:
        return self.split.task_id(split_seed(seed, split))

    def step(self, action: str | None) -> tuple[str, float, bool, dict]:
        state = self._state
        if state is None:
            raise RuntimeError("call reset(seed) first")
        if state.done:
            return "The episode is over.", 0.0, True, self._info(valid=False)
        op, problem = self._parse(action)
        if problem is None:
            nxt, obs = apply(self._layout, state, op)
        else:
            nxt, obs = state, f"Nothing happens. {problem}"
        turn = state.turn + 1
        truncated = not nxt.done and turn >= self._layout.max_turns
        self._set_state(dataclasses.replace(nxt, turn=turn, done=nxt.done or truncated))
        reward = 1.0 if self._state.success and not state.success else 0.0
        return obs, reward, self._state.done, self._info(valid=problem is None)

    def _parse(self, action) -> tuple[tuple | None, str | None]:
        """(op, None) for an admissible action, else (None, what is wrong with it)."""
        if not isinstance(action, str):
            return None, "No command was given: write one command inside <action>...</action>."
        if not action.strip():
            return None, "The command is empty: write one command, e.g. 'look'."
        if len(action) > MAX_ACTION_CHARS:
            return None, (f"The command is too long ({len(action)} characters; at most "
                          f"{MAX_ACTION_CHARS}).")
        if not action.isascii():
            return None, "The command contains non-ASCII characters; use plain commands like 'look'."
        text = normalize(action)
        if not text.isprintable():
            return None, "The command contains control characters; use plain commands like 'look'."
        op = self._cmds.get(text)
        if op is not None:
            return op, None
        verb = text.split(" ", 1)[0]
        if verb not in VERBS:
            return None, (f"'{verb}' is not a command; commands are go to, open, close, take, put, "
                          "heat, cool, clean, use, examine, look, inventory.")
        return None, f"You cannot '{text}' now; choose one of the admissible commands."

    def _set_state(self, state: State) -> None:
        self._state = state
        self._cmds = commands(self._layout, state)

    def _info(self, valid: bool) -> dict:
        s = self._state
        return info_dict(success=s.success, valid=valid, admissible=list(self._cmds), won=s.success,
                         turn=s.turn, task_type=self._layout.task_type, goal=self._layout.goal_text,
                         expert=expert_command(self._layout, s))

    def snapshot(self) -> State:
        if self._state is None:
            raise RuntimeError("call reset(seed) first")
        return self._state

    def restore(self, snapshot: State) -> None:
        if not isinstance(snapshot, State):
            raise TypeError(f"not a household snapshot: {type(snapshot).__name__}")
        if self._layout is None or self._layout.seed != snapshot.seed:
            self._layout = generate(snapshot.seed, self.config)
        self._set_state(snapshot)
        self._slipped = False

    def expert_action(self) -> str | None:
        """The demonstrator's command: the expert's, or in the tasks its faults were drawn for
        (`demo_confusion`, `demo_scorch`, ...; `household.demonstrator`) a faulty one; with `demo_idle`
        sometimes an admissible no-op first, with `demo_noise` sometimes a slip first (an inadmissible
        command), neither when the previous turn was one already."""
        state = self._state
        command = faulty_command(self.layout, state, self.faults.of(self.layout))
        if command == "look" and self.demo_give_up:  # the task is lost: nothing left to demonstrate
            return GIVE_UP
        if command is not None and not self._slipped and idles(self.layout, state, self.demo_idle):
            self._slipped = True
            return idle_command(self.layout, state)
        if command is None or self.demo_noise <= 0 or self._slipped:
            self._slipped = False
            return command
        rng = random.Random(f"household-slip-{self.layout.seed}-{self._state.turn}")
        if rng.random() >= self.demo_noise:
            return command
        slips = sorted(set(well_formed(self.layout)) - set(self._cmds))
        self._slipped = bool(slips)
        return rng.choice(slips) if slips else command

    def confused(self, seed: int) -> bool:
        """Whether the demonstrator confuses the lookalike in the task drawn with generator seed `seed`."""
        return self.faults.drawn("confused", seed)

    def pivot(self, snapshot: State, action: str | None) -> tuple[int, str] | None:
        """(label, class) of `action` played from `snapshot` at a pivotal rule (`household.pivots`), None
        for a routine or inadmissible one. Privileged: the rules critic and the oracle judge read it."""
        self.restore(snapshot)
        op, problem = self._parse(action)
        return None if problem is not None else pivot(self._layout, snapshot, op)

    def admissible(self) -> list[str]:
        """The admissible commands of the current state (as in `info["admissible"]`)."""
        return list(self._cmds)

    def privileged_facts(self, seed: int) -> list[str]:
        """The goal, where the target objects and the lookalike decoys start, the target receptacle."""
        self.reset(seed)
        lay = self.layout
        init = lay.init

        def where(i: int) -> str:
            loc = init.obj_loc[i]
            return "the agent's hand" if loc == HAND else lay.receptacles[loc]

        def of_type(kind: str) -> list[str]:
            return [f"{o} (in/on {where(i)})" for i, o in enumerate(lay.objects) if lay.obj_types[i] == kind]

        targets, decoys = of_type(lay.target_type), of_type(lay.decoy_type)
        out = [f"Goal: {lay.goal_text} (task type {lay.task_type})",
               f"Objects of the target type {lay.target_type!r}: {', '.join(targets) or 'none'}"]
        if decoys:
            out.append(f"Lookalike decoys ({lay.decoy_type}; using them fails the task): {', '.join(decoys)}")
        if lay.goal >= 0:
            out.append(f"Target receptacle: {lay.receptacles[lay.goal]}")
        return out

    def reference_policy(self, eps: float) -> Callable[[str, dict], dict[str, float]]:
        """pi(a|s) = (1 - eps) 1[a = expert(s)] + eps / |C(s)| 1[a in C(s)], C(s): the admissible commands
        (the true expert, `info["expert"]`, not the demonstrator)."""
        from prover_jax.envs.testing import mix

        def household(obs: str, info: dict) -> dict[str, float]:
            return mix(info.get("expert"), info.get("admissible") or [], eps)
        return household


def well_formed(layout: Layout) -> list[str]:
    """Commands of the room's own nouns in ALFWorld's wording, admissible or not (the slips of
    `demo_noise` are drawn from the ones that are not)."""
    recs, objs = layout.receptacles, layout.objects
    return ([f"go to {r}" for r in recs] + [f"open {r}" for r in recs]
            + [f"take {o} from {r}" for o in objs for r in recs] + [f"put {o} in/on {r}" for o in objs for r in recs])


def layout_key(layout: Layout) -> str:
    """The content of a task: its layout without the generator seed (equal keys <=> the same task)."""
    return repr(dataclasses.replace(layout, seed=0, init=dataclasses.replace(layout.init, seed=0)))
