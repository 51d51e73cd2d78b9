"""`prover-compare`: credit methods x seeds, one resumable `prover-train` run each, and a report.

    prover-compare --config=configs/demo.py --methods=grpo,budget_grpo,gigpo,spo_chain,prover,prover:judge=random \
                   --seeds=3 --workdir=W [--config.train.steps=20 ...] [--parallel=1] [--nosft_once]

Methods: NAME[:KEY=VALUE,...] (see prover_jax/compare/methods.py): NAME sets config.credit.method;
judge=X sets judge.name; a dotted KEY is a config override as written; a bare KEY is a field of
credit.NAME (prover:k=4 -> credit.prover.k=4), else of credit, else top level. Names, keys and values
are checked against the config and the registries before any run starts.

Runs: W/<slug>/seed<s> (slug: the spec with ':' and ',' as '+', e.g. prover+judge=random), seed s in
first_seed .. first_seed + seeds - 1 sets config.seed. Each run is `python -m prover_jax.training.cli`
in its own process (--config as given, then the user's --config.* overrides, then the method's, then
the seed), its output appended to its run.log. A run is complete when its summary.json has
success_after_rl and its metrics reached train.steps; re-running the command skips complete runs and
resumes the others from their checkpoints. Failed runs are listed at the end with their log; the
exit code is 1 if any failed, but the report is written over the runs that completed.

SFT once (--sft_once, the default; only when sft.steps > 0): per seed one run W/_sft/seed<s> does the
SFT warm start (train.steps=0, credit.method=grpo, train.eval_episodes=1: its evals are unused) and
saves its orbax checkpoint of step 0 (train state + task-iterator state + "SFT done"), just before
the first run of its seed that needs it (runs go seed by seed: the first seed's methods are done
before the second seed's SFT starts). Every method
whose overrides are only credit.* / judge.* gets a hard-linked copy of that checkpoint folder (and the
trained tokenizer) in its run folder before its first start, so it RESUMES at step 0 after SFT:
the same state, optimizer, tokenizer and reference policy as a run that did its own SFT (an HF
export would round weights to the source dtype and change the KL reference). Methods with other
overrides do their own SFT. A complete W/_sft/seed<s> is reused as it is (delete it to redo SFT);
a seed whose sharing runs are all complete needs no SFT run at all. --sft_seed=S gives every seed the
start of seed S (W/_sft/seed<S>): the seeds then vary the RL sampling and task order from one start,
not the start itself (for a costly SFT; the report's spread is over RL seeds only).
Its metrics.jsonl is created empty first: prover-train plots it, and train.steps=0 may log no row.

Compile cache: runs share a JAX persistent compilation cache (--jax_cache: "auto" = W/_jax_cache unless
JAX_COMPILATION_CACHE_DIR is set; "none" = off): every method compiles mostly the same programs.
--parallel=N runs N at once (CPU, or accelerators that several processes can share; children then get
XLA_PYTHON_CLIENT_PREALLOCATE=false unless it is set). --report_only rewrites the report only.
Third-party INFO logging (orbax, jax, absl, ...) is off here and in the runs' run.log;
--third_party_logs brings it back (passed on to the runs; prover_jax/training/logs.py).

Report: W/compare.md, W/compare.json, W/compare.png (prover_jax/compare/report.py).
--export=DIR copies the report and each complete run's summary.json and metrics.jsonl (no
checkpoints: a few hundred KB in all) to DIR/<slug>/seed<s>/, their paths made relative to the
record's folders: a record small enough to keep in version control, from which the report can be
rebuilt and the comparison continued (`cp -r DIR W`, then the same command: the recorded runs are
complete and skipped).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from absl import app, flags
from ml_collections import config_flags

from prover_jax.compare import methods as methods_lib
from prover_jax.compare import report
from prover_jax.training.evaluation import eval_task_count
from prover_jax.training.logs import quiet_third_party

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Trainer config file (see configs/).", lock_config=True)
flags.DEFINE_string("methods", "grpo,prover", "Comma-separated method specs NAME[:KEY=VALUE,...].")
flags.DEFINE_integer("seeds", 3, "Seeds per method: first_seed .. first_seed + seeds - 1.")
flags.DEFINE_integer("first_seed", 0, "The first seed.")
flags.DEFINE_string("workdir", None, "Comparison folder (local): W/<method>/seed<s>, W/compare.*.")
flags.DEFINE_integer("parallel", 1, "Runs at once.")
flags.DEFINE_bool("sft_once", True, "One SFT warm start per seed, shared by the methods (if sft.steps > 0).")
flags.DEFINE_integer("sft_seed", -1, "-1: each seed its own SFT start; S >= 0: every seed starts from seed S's.")
flags.DEFINE_string("jax_cache", "auto", "JAX compilation cache of the runs: auto | none | a folder.")
flags.DEFINE_bool("report_only", False, "Write the report over the runs already complete; run nothing.")
flags.DEFINE_string("export", None, "Copy the report and the complete runs' summary/metrics here.")
flags.DEFINE_float("threshold", report.THRESHOLD, "Report: steps to the first eval with success >= this.")

SFT_DIR = "_sft"
RECORD_PATHS = ("folder", "plot", "sft_shared_from")  # path fields of compare.json's runs and of summary.json


def raw_config_args(argv: list[str], config) -> tuple[str, list[str]]:
    """(the --config value, the --config.KEY=VALUE overrides) as written on the command line."""
    value, overrides, i = None, [], 1
    while i < len(argv):
        arg = argv[i]
        m = re.match(r"^--?(no)?config\.([^=]+)(=.*)?$", arg)
        if re.match(r"^--?config=", arg):
            value = arg.split("=", 1)[1]
        elif arg in ("--config", "-config") and i + 1 < len(argv):
            value, i = argv[i + 1], i + 1
        elif m:
            key = m.group(2)
            if key in methods_lib.RESERVED:
                raise app.UsageError(f"--config.{key} is set by {methods_lib.RESERVED[key]}")
            if m.group(1) or m.group(3):
                overrides.append(arg)
            elif isinstance(_field(config, key), bool):
                overrides.append(f"--config.{key}=true")
            elif i + 1 < len(argv):
                overrides.append(f"--config.{key}={argv[i + 1]}")
                i += 1
        i += 1
    return value, overrides


def _field(config, key):
    try:
        return methods_lib.get_field(config, key)
    except KeyError:
        return None


def has_checkpoint(folder: str) -> bool:
    d = os.path.join(folder, "checkpoints")
    return os.path.isdir(d) and any(n.isdigit() for n in os.listdir(d))


def is_complete(folder: str, steps: int) -> bool:
    """summary.json has success_after_rl and the metrics reached `steps` training steps."""
    if "success_after_rl" not in report.read_json(os.path.join(folder, "summary.json")):
        return False
    rows = report.read_jsonl(os.path.join(folder, "metrics.jsonl"))
    return max((int(r.get("step", 0)) for r in rows if "success_rate" in r), default=0) >= steps


def link_tree(src: str, dest: str) -> None:
    """`src` copied to `dest` as hard links (plain copies across file systems), atomically."""
    tmp = dest + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)

    def link(a, b):
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    shutil.copytree(src, tmp, copy_function=link)
    os.replace(tmp, dest)


_SAY = threading.Lock()


def say(line: str) -> None:
    """One progress line on stdout, whole even when runs in parallel threads print at once."""
    with _SAY:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Run:
    def __init__(self, label, folder, seed, overrides, steps, sft_from=None, eval_episodes=None):
        self.label, self.folder, self.seed, self.overrides = label, folder, seed, overrides
        self.steps, self.sft_from, self.eval_episodes = steps, sft_from, eval_episodes
        self.error = None

    def name(self) -> str:
        return f"{os.path.basename(os.path.dirname(self.folder))}/seed{self.seed}"

    def prepare(self) -> None:
        os.makedirs(self.folder, exist_ok=True)
        if self.sft_from is None:
            return
        if not has_checkpoint(self.folder):  # a fresh run (or one that never saved a step)
            shutil.rmtree(os.path.join(self.folder, "checkpoints"), ignore_errors=True)
            link_tree(os.path.join(self.sft_from, "checkpoints"), os.path.join(self.folder, "checkpoints"))
        src, tok = os.path.join(self.sft_from, "tokenizer"), os.path.join(self.folder, "tokenizer")
        if os.path.isdir(src) and not os.path.exists(tok):
            link_tree(src, tok)
        summary = os.path.join(self.folder, "summary.json")
        if not os.path.exists(summary):
            sft = report.read_json(os.path.join(self.sft_from, "summary.json")).get("sft")
            with open(summary, "w") as f:
                f.write(json.dumps({"sft": sft, "sft_shared_from": self.sft_from}, indent=1))


def execute(run: Run, config_arg: str, user_overrides: list[str], env: dict) -> bool:
    """Runs (or resumes) one prover-train process; True when the run is complete afterwards."""
    if is_complete(run.folder, run.steps):
        say(f"[done]    {run.name()}: already complete")
        return True
    try:
        run.prepare()
    except OSError as e:
        run.error = f"could not prepare {run.folder}: {e}"
        return False
    cmd = [sys.executable, "-m", "prover_jax.training.cli", f"--config={config_arg}", *user_overrides,
           *(f"--config.{k}={v}" for k, v in run.overrides), f"--workdir={run.folder}", "--noprogress",
           *(["--third_party_logs"] if FLAGS.third_party_logs else [])]
    log = os.path.join(run.folder, "run.log")
    say(f"[start]   {run.name()}")
    t0 = time.time()
    with open(log, "a") as f:
        f.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} prover-compare: {' '.join(cmd)}\n")
        f.flush()
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=os.getcwd()).returncode
    if rc == 0 and is_complete(run.folder, run.steps):
        say(f"[done]    {run.name()} in {time.time() - t0:.0f} s")
        return True
    run.error = f"exit code {rc}" if rc else "exited 0 but the run is not complete"
    say(f"[FAILED]  {run.name()} ({run.error}): see {log}")
    return False


def execute_sft(run: Run, config_arg: str, user_overrides: list[str], env: dict) -> bool:
    os.makedirs(run.folder, exist_ok=True)
    open(os.path.join(run.folder, "metrics.jsonl"), "a").close()  # plotted even with no RL step
    if not execute(run, config_arg, user_overrides, env):
        return False
    if not has_checkpoint(run.folder):
        run.error = f"no checkpoint in {run.folder}/checkpoints after SFT"
        return False
    return True


def relative_paths(record: dict, start: str, keys=RECORD_PATHS) -> dict:
    """`record` with the absolute paths under `keys` made relative to `start` (a record that moves to
    another machine keeps no path of the one it was made on)."""
    return {k: os.path.relpath(v, start) if k in keys and isinstance(v, str) and os.path.isabs(v) else v
            for k, v in record.items()}


def export(dest: str, paths: dict, complete: list[Run]) -> str:
    """The report files and each complete run's summary.json + metrics.jsonl, copied under `dest`;
    compare.json's run folders relative to the comparison folder, summary.json's paths (plot,
    sft_shared_from) relative to the run's folder."""
    dest = os.path.abspath(dest)
    os.makedirs(dest, exist_ok=True)
    for path in paths.values():
        shutil.copy2(path, dest)
    result = report.read_json(paths["json"])
    for m in result.get("methods", {}).values():
        m["per_seed"] = [relative_paths(s, os.path.dirname(paths["json"])) for s in m["per_seed"]]
    with open(os.path.join(dest, os.path.basename(paths["json"])), "w") as f:
        json.dump(result, f, indent=1)
    for r in complete:
        folder = os.path.join(dest, os.path.relpath(r.folder, os.path.dirname(os.path.dirname(r.folder))))
        os.makedirs(folder, exist_ok=True)
        shutil.copy2(os.path.join(r.folder, "metrics.jsonl"), folder)
        with open(os.path.join(folder, "summary.json"), "w") as f:
            json.dump(relative_paths(report.read_json(os.path.join(r.folder, "summary.json")), r.folder), f, indent=1)
    return dest


class SharedSft:
    """Each seed's shared SFT run, executed once, by the first run of that seed that needs it (the
    others of the seed wait for it): a seed's methods can finish before the next seed's SFT starts."""

    def __init__(self, sft_runs: dict, execute_one):
        self.runs, self.execute_one = sft_runs, execute_one
        self.locks = {s: threading.Lock() for s in sft_runs}
        self.ok: dict[int, bool] = {}

    def ready(self, seed: int) -> bool:
        """True once the seed's SFT run is complete (run now if it is not yet)."""
        with self.locks[seed]:
            if seed not in self.ok:
                self.ok[seed] = self.execute_one(self.runs[seed])
            return self.ok[seed]


def child_env(workdir: str) -> dict:
    env = dict(os.environ)
    cache = FLAGS.jax_cache
    if cache == "auto" and "JAX_COMPILATION_CACHE_DIR" not in env:
        env["JAX_COMPILATION_CACHE_DIR"] = os.path.join(workdir, "_jax_cache")
    elif cache not in ("auto", "none", ""):
        env["JAX_COMPILATION_CACHE_DIR"] = os.path.abspath(cache)
    if FLAGS.parallel > 1:
        env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    return env


def _main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if FLAGS.config is None or FLAGS.workdir is None:
        raise app.UsageError("--config and --workdir are required")
    if "://" in FLAGS.workdir:
        raise app.UsageError("prover-compare needs a local --workdir")
    if FLAGS.seeds < 1 or FLAGS.parallel < 1:
        raise app.UsageError("--seeds and --parallel must be >= 1")
    quiet_third_party(FLAGS.third_party_logs)
    config = FLAGS.config
    config_arg, user_overrides = raw_config_args(sys.argv, config)
    try:
        methods = methods_lib.parse_methods(FLAGS.methods, config)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    workdir = os.path.abspath(FLAGS.workdir)
    seeds = list(range(FLAGS.first_seed, FLAGS.first_seed + FLAGS.seeds))
    sft_once = FLAGS.sft_once and config.sft.steps > 0 and any(m.shares_sft for m in methods)
    eval_n = eval_task_count(config, {})

    start_of = {s: s if FLAGS.sft_seed < 0 else FLAGS.sft_seed for s in seeds}  # seed -> its SFT start's seed
    sft_runs = {s: Run("_sft", os.path.join(workdir, SFT_DIR, f"seed{s}"), s,
                       [("credit.method", "grpo"), ("seed", str(s)), ("train.steps", "0"),
                        ("train.eval_episodes", "1")], 0) for s in set(start_of.values())} if sft_once else {}
    runs = []
    for s in seeds:
        for m in methods:
            cfg = methods_lib.apply_overrides(config, m.all_overrides())
            shared = sft_runs[start_of[s]].folder if sft_once and m.shares_sft else None
            runs.append(Run(m.spec, os.path.join(workdir, m.slug, f"seed{s}"), s,
                            m.all_overrides() + [("seed", str(s))], cfg.train.steps, shared,
                            eval_task_count(cfg, {})))

    failed = []
    if not FLAGS.report_only:
        env = child_env(workdir)
        print(f"prover-compare: {len(methods)} methods x {len(seeds)} seeds -> {workdir}"
              + (f" (SFT once per seed in {SFT_DIR}/)" if sft_once else ""), flush=True)
        sft = SharedSft(sft_runs, lambda r: execute_sft(r, config_arg, user_overrides, env))

        def job(r: Run) -> bool:
            if r.sft_from is not None and not is_complete(r.folder, r.steps) and not sft.ready(start_of[r.seed]):
                r.error = f"its shared SFT run failed: see {sft_runs[start_of[r.seed]].folder}/run.log"
                return False
            return execute(r, config_arg, user_overrides, env)

        with ThreadPoolExecutor(FLAGS.parallel) as pool:  # seed-major: seed 0's methods finish first
            list(pool.map(job, runs))
        failed = [r for r in list(sft_runs.values()) + runs if r.error]

    by_method = {m.spec: [report.load_run(r.folder, r.seed, r.eval_episodes or eval_n) for r in runs
                          if r.label == m.spec and is_complete(r.folder, r.steps)] for m in methods}
    result = report.summarize(by_method, len(seeds), threshold=FLAGS.threshold)
    notes = [f"{r.name()}: {r.error} ({os.path.join(r.folder, 'run.log')})" for r in failed]
    title = (config_arg or "") + (f" (every seed from seed {FLAGS.sft_seed}'s SFT start)" if FLAGS.sft_seed >= 0 else "")
    paths = report.write_report(result, by_method, workdir, title=title, failures=notes)
    print(open(paths["md"]).read(), flush=True)
    print(f"wrote {paths['md']}, {paths['json']}, {paths['png']}", flush=True)
    if FLAGS.export:
        print(f"exported to {export(FLAGS.export, paths, [r for r in runs if is_complete(r.folder, r.steps)])}")
    if failed:
        print(f"{len(failed)} run(s) failed:", file=sys.stderr)
        for n in notes:
            print(f"  {n}", file=sys.stderr)
        return 1
    return 0


def main(argv=None):
    """The `prover-compare` console script."""
    app.run(_main, argv=argv)


if __name__ == "__main__":
    main()
