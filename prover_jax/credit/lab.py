"""Credit lab: every credit method against the EXACT per-turn advantage, on built-in envs, without a model.

    prover-lab --methods=grpo,prover,prover:random --env=household --groups=8 --group_size=8 \
        --eps=0.4,0.6 --seed=0                      # the command line: credit/cli.py
    results, batches, notes = run(args, config.credit, config.judge)   # args: cli.parse_args(...)

Setting. For each eps, a fixed stochastic policy pi = (1 - eps) expert + eps uniform over the admissible
actions (`lab_truth.mixture_policy`) plays `groups` tasks, `group_size` episodes each, recorded as
`Trajectory` objects (synthetic policy tokens per turn, snapshots like the rollout's). Each method gets
the batch through its registered contract (`credit_class(name).needs(...)`, `make_credit`), with only the
dependencies it asks for: a judge (`make_judge`, random / contrastive; `prover:random` picks the judge of
one entry), a verifier (`PolicyVerifier`: continuations of the SAME policy, played in the env; for a
method that trains on extra episodes, `lab_truth.TrajectoryVerifier`, the same play recorded as
`Trajectory`s), a critic (`credit.critic.make_critic` with config.credit.critic: the oracle values states
under its OWN reference policy, `--set critic.oracle_eps=...` to change it). Only the played episodes are
scored (extra episodes count in extra_steps). Pseudo-method `exact` credits each turn with its true
advantage (spearman, spearman_within and sign_agreement at 1). Methods not registered are skipped with a
note (so are failing ones, unless --strict).

Truth. A(s_t, a_t) = Q(s_t, a_t) - V(s_t) = V(s_{t+1}) - V(s_t) (the last turn: success - V), with V by
exact dynamic programming (`envs.testing.dp.success_probability`) under the same policy.

Metrics (a turn's credit = the mean advantage over its policy tokens; pooled over all turns of all eps):
    spearman           rank correlation of credit and A over all turns
    spearman_within    mean over episodes (>= 2 turns, A not constant) of the within-episode rank
                       correlation; an episode whose credit is constant scores 0 (GRPO: 0, exact: 1)
    pivotal_mass       share of sum |credit| on pivotal turns (|A| > --threshold)
    sign_agreement     on pivotal turns, share with sign(credit) == sign(A) (zero credit disagrees)
    turn_pivotal_mass  pivotal_mass of the turn-level part, credit - the episode's GRPO advantage
                       (R - mean R of its group; / std with credit.std_scope): where a method's credit
                       beyond the group baseline lands (NaN when there is none, as for GRPO)
    turn_sign          on pivotal turns where the turn-level part is not 0, share with its sign == sign(A)
    segment_bias       mean over verified segments of estimated minus exact V(s_b) - V(s_a); a segment
                       is two consecutive start turns of one trajectory in one verifier call (ProVer:
                       s_pre, s_post; a chain of cuts: each link); NaN when the method verifies nothing
    extra_steps        env steps of continuations (and of extra episodes) per task group
The threshold 0.2: on the small household preset (8-turn limit, expert 3-5 turns), |A| > 0.1 holds for
35-40% of all turns, mostly moves that merely waste a turn of the tight limit; |A| > 0.2 keeps 10-18%:
every fatal commit / latch (V drops to 0) and the moves that decide the race against the turn limit.
The last stdout line is JSON: {method: {metric: value or null}}.
"""

from __future__ import annotations

import collections
import inspect
import itertools
import json
import tempfile
import time
import zlib

import numpy as np

from prover_jax.credit import lab_truth as lt
from prover_jax.credit.base import credit_class, credit_names, make_credit
from prover_jax.credit.common import group_outcome_advantages
from prover_jax.credit.verify import PolicyVerifier
from prover_jax.envs import make

ENV_PRESETS = {  # small settings with a tractable exact dp
    "household": dict(task_type="pick_and_place", max_turns=8, expert_turns=(3, 5), num_receptacles=4,
                      num_objects=3),
    "shop": dict(max_turns=6),
}
METRICS = ("spearman", "spearman_within", "pivotal_mass", "sign_agreement", "turn_pivotal_mass", "turn_sign",
           "segment_bias", "extra_steps")
EXACT = "exact"
PREFERRED = ("grpo", "prover", "prover:random", "budget_grpo", "gigpo", "spo_chain", "critic")


def default_methods() -> list[str]:
    """grpo, prover (contrastive and random judges), every other registered method, exact."""
    known = credit_names()
    first = [m for m in PREFERRED if m.split(":")[0] in known]
    return first + [m for m in known if m not in first] + [EXACT]


def make_batch(env, eps: float, task_seeds, group_size: int, rng, uids, tokens_per_turn: int) -> dict:
    """The eps policy's groups and their exact V [T+1] / A [T] per trajectory uid."""
    policy = lt.mixture_policy(env, eps)
    groups = [lt.play_group(env, policy, s, group_size, rng, uids, tokens_per_turn) for s in task_seeds]
    memo, values, adv = {}, {}, {}
    for traj in itertools.chain(*groups):
        values[traj.uid], adv[traj.uid] = lt.exact_advantages(env, policy, traj, memo)
    return dict(eps=eps, policy=policy, groups=groups, values=values, adv=adv)


def exact_credit(batch: dict) -> list[list[np.ndarray]]:
    out = []
    for group in batch["groups"]:
        out.append([])
        for traj in group:
            a = np.zeros(len(traj.tokens), np.float32)
            for turn, value in zip(traj.turns, batch["adv"][traj.uid]):
                a[turn.start:turn.end] = value
            out[-1].append(a)
    return out


def build(spec: str, config, judge_config, env, args, batch: dict, workdir: str):
    """(method, recording verifier or None) for `name[:judge]`, with the deps its Needs asks for
    (`config`: the credit section; `judge_config`: the judge section)."""
    name, _, judge_name = spec.partition(":")
    cls = credit_class(name)
    needs = cls.needs(config, len(batch["groups"]), args.group_size)
    deps, verifier = {}, None
    if judge_name and not needs.judge:
        raise ValueError(f"{name} takes no judge")
    if needs.judge:
        from prover_jax.judges import make_judge, needs_env
        judge = judge_name or args.judge
        env_args = {"env_name": args.env, "env_kwargs": dict(args.env_kwargs)} if needs_env(judge) else {}
        deps["judge"] = make_judge(judge, judge_config, workdir, **env_args)
    if needs.verifier:
        vseed = zlib.crc32(f"{args.seed}/{batch['eps']}/{spec}".encode())
        base = (lt.TrajectoryVerifier(env, batch["policy"], vseed, args.tokens_per_turn) if needs.extra_episodes
                else PolicyVerifier(env, batch["policy"], seed=vseed))
        verifier = lt.RecordingVerifier(base)
        deps["verifier"] = verifier
    if needs.critic:
        from prover_jax.credit.critic import make_critic
        deps["critic"] = make_critic(config.critic, args.env, dict(args.env_kwargs), workdir)
    params = inspect.signature(cls.__init__).parameters
    if "seed" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
        deps["seed"] = args.seed
    return make_credit(name, config, **deps), verifier


def run_method(spec: str, config, judge_config, env, args, batch: dict, workdir: str) -> dict:
    """Per-episode turn credit, GRPO baselines, segment errors and extra steps of one method on one batch."""
    groups, verifier = batch["groups"], None
    if spec == EXACT:
        advantages = exact_credit(batch)
    else:
        method, verifier = build(spec, config, judge_config, env, args, batch, workdir)
        out = method.assign(groups)
        if out.groups is None:
            advantages = out.advantages
        else:  # enlarged groups: the played episodes are scored (the new ones came through the verifier)
            by_id = {id(t): a for g, ads in zip(out.groups, out.advantages) for t, a in zip(g, ads)}
            advantages = [[by_id[id(t)] for t in g] for g in groups]
    res = collections.defaultdict(list)
    for group, ads, bases in zip(groups, advantages, group_outcome_advantages(groups, config)):
        for traj, adv, base in zip(group, ads, bases):
            res["truth"].append(batch["adv"][traj.uid])
            res["credit"].append(lt.turn_credit(traj, adv))
            res["baseline"].append(float(base))
    for uid, a, b, est in (verifier.segments() if verifier else []):
        if uid in batch["values"]:
            v = batch["values"][uid]
            res["segment_err"].append(est - (v[b] - v[a]))
    res["steps"] = verifier.steps if verifier else 0
    return res


def summarize(parts: list[dict], threshold: float, n_groups: int) -> dict[str, float]:
    cat = lambda k: [x for p in parts for x in p[k]]
    out = lt.credit_metrics(cat("truth"), cat("credit"), cat("baseline"), threshold)
    errs = cat("segment_err")
    out["segment_bias"] = float(np.mean(errs)) if errs else float("nan")
    out["segments"] = len(errs)
    out["extra_steps"] = sum(p["steps"] for p in parts) / n_groups
    out["time_s"] = sum(p["time"] for p in parts)
    return out


def run(args, config, judge_config) -> tuple[dict, list[dict], list[str]]:
    """{method: {"all": metrics, eps: metrics}}, per-eps batch summaries, notes (`config`: the credit
    section, `judge_config`: the judge section of a run config; `args`: `credit.cli.parse_args`)."""
    env = make(args.env, **args.env_kwargs)
    methods, notes = [], []
    known = credit_names()
    for spec in args.methods:
        if spec == EXACT or spec.split(":")[0] in known:
            methods.append(spec)
        else:
            notes.append(f"skipped {spec}: not a registered credit method (known: {', '.join(known)})")
    uids = itertools.count()
    parts, batches = collections.defaultdict(dict), []
    with tempfile.TemporaryDirectory(prefix="credit_lab_") as workdir:
        for e, eps in enumerate(args.eps):
            rng = np.random.default_rng([args.seed, e])
            tasks = [args.task_seed + g for g in range(args.groups)]
            t0 = time.perf_counter()
            batch = make_batch(env, eps, tasks, args.group_size, rng, uids, args.tokens_per_turn)
            a = np.concatenate(list(batch["adv"].values()))
            batches.append(dict(eps=eps, success=float(np.mean([t.success for g in batch["groups"] for t in g])),
                                turns=len(a), pivotal=float(np.mean(np.abs(a) > args.threshold)),
                                dp_s=time.perf_counter() - t0))
            for spec in list(methods):
                t0 = time.perf_counter()
                try:
                    parts[spec][eps] = run_method(spec, config, judge_config, env, args, batch, workdir)
                except Exception as err:  # noqa: BLE001  (a colleague's method not ready: note it, go on)
                    if args.strict:
                        raise
                    notes.append(f"skipped {spec}: {type(err).__name__}: {err}")
                    methods.remove(spec)
                    parts.pop(spec, None)
                    continue
                parts[spec][eps]["time"] = time.perf_counter() - t0
    results = {}
    for spec in methods:
        per = {eps: summarize([p], args.threshold, args.groups) for eps, p in parts[spec].items()}
        per["all"] = summarize(list(parts[spec].values()), args.threshold, args.groups * len(args.eps))
        results[spec] = per
    return results, batches, notes


def table(results: dict, batches: list[dict], args) -> str:
    lines = [f"credit lab | env {args.env} {json.dumps(args.env_kwargs)} | {args.groups} groups x "
             f"{args.group_size} episodes per eps | pivotal: |A| > {args.threshold} | seed {args.seed}",
             f"{'eps':>6} {'success':>8} {'turns':>6} {'pivotal':>8} {'truth_s':>8}"]
    lines += [f"{b['eps']:>6g} {b['success']:>8.3f} {b['turns']:>6d} {b['pivotal']:>8.3f} {b['dp_s']:>8.1f}"
              for b in batches]
    head = ("method", "eps", "spearman", "within", "piv_mass", "sign", "turn_piv", "turn_sign", "seg_bias",
            "segs", "extra_steps", "time_s")
    width = max([len(m) for m in results] + [14])
    fmt = lambda v: "nan" if v is None or np.isnan(v) else f"{v:.3f}"
    lines += ["", f"{head[0]:<{width}} " + " ".join(f"{h:>9}" for h in head[1:])]
    for spec, per in results.items():
        for eps, m in per.items():
            cells = [fmt(m[k]) for k in ("spearman", "spearman_within", "pivotal_mass", "sign_agreement",
                                         "turn_pivotal_mass", "turn_sign", "segment_bias")]
            cells += [str(m["segments"]), f"{m['extra_steps']:.1f}", f"{m['time_s']:.1f}"]
            label = "all" if eps == "all" else f"{eps:g}"
            lines.append(f"{spec:<{width}} {label:>9} " + " ".join(f"{c:>9}" for c in cells))
    return "\n".join(lines)
