"""A built-in setting where credit decides: several pivots per episode, some of them late, and routine
turns that differ between successes and failures by chance (bench/CREDIT_HARD.md).

household `pick_heat_then_place` in a kitchen of 6 receptacles (the microwave, a stoveburner, the target
receptacle and three more), the task object drawn from two lookalike pairs (apple / tomato, mug / cup),
on `configs/learn.py`'s policy, tokens and rates. The demonstrator SFT imitates, failures included,
fails at three pivots, each drawn per task from its seed (`prover_jax/envs/household/demonstrator.py`):
- the lookalike (40% of tasks): it takes and commits whichever of the object and its lookalike it meets
  first; below half, so the warm start's greedy choice is the right object, its samples are not;
- the heater (70% of the apple and mug tasks): it heats on the stoveburner, which ruins the object; the
  mistake shows only at the commit, several turns later;
- the latch (70% of the tasks whose target receptacle has a door): it checks the target receptacle
  first and closes it, which locks it for good; the mistake shows only when it comes back to put.
Its failures play on to the 15-turn limit; 10% of its turns are first an admissible no-op (examine,
look, inventory), kept in SFT. The expert needs 6-10 turns. Reward: 1 on success, else 0.

    prover-train --config=configs/credit_hard.py --workdir=W [--config.seed=S] [--config.credit.method=...]
    prover-compare --config=configs/credit_hard.py --methods=grpo,critic,prover ... --workdir=C

Variants (`configs/credit_hard.py:v5`), each a step of bench/CREDIT_HARD.md:
- `v3b`: a closer imitation (SFT 2400 steps on 4800 demonstrations, idle .05, 5 receptacles), RL at lr 1e-4;
- `v5`: v3b with the lookalike (.6) and the heater (.6, every object type) above half, so the greedy start
  is wrong at two pivots and sampled successes are rare; evaluations every 5 steps;
- `v6`: v3b with the lookalike alone above half (.6): the greedy start is wrong at the lookalike whenever
  it meets it first, the heater as v3b; evaluations every 5 steps.

The `critic` method here is the `rules` critic (privileged pivot labels, household.pivots), and
`judge.name=oracle` proposes the pivot the failed runs most often got wrong.
"""

import os

from prover_jax.training.config import load_config_file

_HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("", "v3b", "v5", "v6")  # the variants (tests/training/test_config_fields.py checks each)


def get_config(variant: str = ""):
    if variant not in ARGS:
        raise ValueError(f"configs/credit_hard.py: unknown variant {variant!r}; expected one of {ARGS}")
    c = load_config_file(os.path.join(_HERE, "learn.py"))
    k = c.env.kwargs
    k.task_type = "pick_heat_then_place"  # take it, heat it in the microwave (not the stoveburner), put it
    k.num_receptacles = 6  # the microwave, a stoveburner, the target receptacle and three more
    k.num_objects = 2  # neutral objects besides the task object and its lookalike
    k.num_decoys = 1  # one lookalike in the room
    k.max_turns = 15  # turn limit: failures play on to it
    k.expert_turns = (6, 10)  # the expert's episode length
    k.target_types = ("apple", "tomato", "mug", "cup")  # two lookalike pairs
    k.demo_confusion = 0.4  # share of tasks whose demonstrator commits the lookalike it meets first
    k.demo_scorch = 0.7  # share of the demo_scorch_types tasks whose demonstrator heats on the stoveburner
    k.demo_scorch_types = ("apple", "mug")  # the object types the heater fault applies to
    k.demo_latch = 0.7  # share of the tasks with a door on the target receptacle whose demonstrator latches it
    k.demo_idle = 0.1  # per turn: an admissible no-op first (routine turns that differ by chance)
    # True (v2) started worse: greedy .16 and 32% inadmissible sampled turns against .29 and 6% (bench/CREDIT_HARD.md)
    k.demo_give_up = False  # once lost, the demonstrator plays `look` to the limit (imitated)
    c.rollout.max_target_length = 2048  # a 15-turn episode fits
    c.train.steps = 40  # RL updates
    c.train.eval_every = 10  # held-out evaluations every 10 steps: the comparison's endpoint is their mean
    c.train.checkpoint_every = 10  # RL checkpoints
    c.credit.critic.name = "rules"  # the positive control: privileged pivot labels (household.pivots)
    # the contrastive judge compares where things are, not what was looked at or opened on the way: search
    # order differs between runs by chance (bench/judge_coverage.py: .42 -> .63 of its proposals on the pivot)
    c.judge.contrastive.ignore_fields = ("turn", "note", "done", "seen", "opened")
    if variant in ("v3b", "v5", "v6"):
        c.sft.steps = 2400  # twice v1's SFT steps ...
        c.sft.episodes = 4800  # ... on twice its distinct demonstrations: the samples' tails close up
        k.demo_idle = 0.05  # half v1's idle no-ops
        k.num_receptacles = 5  # a shorter search
        c.optim.learning_rate = 1e-4  # 3e-4 fell from its best evaluation by 27 points; 1e-4 held on 3 seeds
    if variant in ("v5", "v6"):
        k.demo_confusion = 0.6  # above half: the greedy start commits whichever object it meets first
        c.train.eval_every = 5  # a sample-efficiency gain shows in the first evaluations
    if variant == "v5":
        k.demo_scorch = 0.6  # above half: the greedy start heats on the stoveburner ...
        k.demo_scorch_types = None  # ... whatever the object (demonstrator success .19, greedy 0 by rule)
    return c
