"""Many environments stepped together: in this process, or one worker process per env.

    with EnvPool("household", num_envs=8, processes=True) as pool:
        first = pool.reset(group_seeds(base_seed=0, num_groups=2, group_size=4))  # [(obs, info)]
        out = pool.step(actions)          # actions[i] None -> env i is skipped, out[i] is None

`processes=True` gives each env its own worker (multiprocessing "spawn" start method, one pipe each)
because some engines (ALFWorld's planner) keep process-global state. Commands go to all workers first
and replies are collected afterwards, so workers step in parallel. A worker exception comes back as
`EnvWorkerError` naming the env index and the original error (the worker stays usable); a worker that
dies is reported as `EnvWorkerError` too, never waited on forever.
"""

from __future__ import annotations

import multiprocessing as mp
import traceback
from multiprocessing.connection import Connection, wait
from typing import Any, NamedTuple, Sequence

from prover_jax.envs.base import Env, make


class EnvWorkerError(RuntimeError):
    """An environment of the pool failed (its exception, or its worker process died)."""


def group_seeds(base_seed: int, num_groups: int, group_size: int) -> list[int]:
    """Seeds of num_groups * group_size envs; members of a group share one: base_seed + i // group_size."""
    return [base_seed + i // group_size for i in range(num_groups * group_size)]


class StepResult(NamedTuple):
    """One agent turn in one env (`EnvPool.act`): the response's action, the env's step, the state after."""

    action: str | None  # the action extracted from the response; None when it had no well-formed one
    observation: str  # what the env answers (feedback on what was wrong when the action was invalid)
    reward: float  # the step's reward
    done: bool  # the episode ended (success or failure)
    info: dict  # success, score, valid, admissible (see envs.base)
    snapshot: Any  # env.snapshot() after the step: continuations restart from it


def _act(env: Env, response: str) -> StepResult:
    action = env.extract_action(response)
    obs, reward, done, info = env.step(action)
    return StepResult(action, obs, reward, done, info, env.snapshot())


def _call(env: Env, method: str, args: tuple) -> Any:
    if method == "prompt":
        return env.prompt
    if method == "act":
        return _act(env, *args)
    return getattr(env, method)(*args)


def _worker(conn: Connection, name: str, env_kwargs: dict) -> None:
    """Worker loop: builds one env, then answers (method, args) with ("ok", result) | ("err", text)."""
    try:
        env = make(name, **env_kwargs)
    except BaseException as e:  # noqa: BLE001  (reported to the parent)
        conn.send(("err", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
        return
    conn.send(("ok", None))
    while True:
        try:
            method, args = conn.recv()
        except (EOFError, OSError):
            break
        if method == "close":
            env.close()
            conn.send(("ok", None))
            break
        try:
            conn.send(("ok", _call(env, method, args)))
        except BaseException as e:  # noqa: BLE001
            conn.send(("err", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
    conn.close()


class EnvPool:
    """`num_envs` environments of family `name`, built with `env_kwargs`.

    Args:
      name: registered family name (see `envs.names()`).
      num_envs: number of environments.
      env_kwargs: keyword arguments of every env.
      processes: one spawned worker process per env (True) or all envs in this process (False).
      timeout: seconds to wait for one reply from a worker before declaring it hung (None: no limit;
        a dead worker is detected either way).
    """

    def __init__(self, name: str, num_envs: int, env_kwargs: dict | None = None,
                 processes: bool = False, timeout: float | None = None):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.name, self.num_envs, self.processes, self.timeout = name, num_envs, processes, timeout
        kwargs = dict(env_kwargs or {})
        self._envs: list[Env] = []
        self._conns: list[Connection] = []
        self._procs: list[mp.process.BaseProcess] = []
        self._closed = False
        if not processes:
            self._envs = [make(name, **kwargs) for _ in range(num_envs)]
            return
        ctx = mp.get_context("spawn")
        try:
            for _ in range(num_envs):
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_worker, args=(child, name, kwargs), daemon=True)
                proc.start()
                child.close()
                self._conns.append(parent)
                self._procs.append(proc)
            self._gather(list(range(num_envs)), "make")
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------------------------ transport

    def _gather(self, indices: list[int], method: str) -> list[Any]:
        """Collects one reply from each worker in `indices` (in that order)."""
        out = []
        for i in indices:
            conn, proc = self._conns[i], self._procs[i]
            ready = wait([conn, proc.sentinel], timeout=self.timeout)
            if not ready:
                proc.terminate()
                raise EnvWorkerError(f"env {i}: no reply to {method!r} within {self.timeout} s; "
                                     "worker terminated")
            if conn not in ready or not conn.poll():
                proc.join(timeout=1.0)
                raise EnvWorkerError(
                    f"env {i}: worker process (pid {proc.pid}) died during {method!r} "
                    f"with exit code {proc.exitcode}")
            try:
                status, value = conn.recv()
            except (EOFError, OSError) as e:
                raise EnvWorkerError(f"env {i}: worker connection lost during {method!r}: {e}") from e
            if status == "err":
                raise EnvWorkerError(f"env {i}: {method!r} raised {value}")
            out.append(value)
        return out

    def _run(self, calls: dict[int, tuple[str, tuple]]) -> dict[int, Any]:
        """Runs env i's `method(*args)` for every (i -> (method, args)); results by index."""
        if self._closed:
            raise RuntimeError("the pool is closed")
        for i in calls:
            if not 0 <= i < self.num_envs:
                raise IndexError(f"env index {i} out of range [0, {self.num_envs})")
        if not self.processes:
            out = {}
            for i, (method, args) in calls.items():
                try:
                    out[i] = _call(self._envs[i], method, args)
                except Exception as e:
                    raise EnvWorkerError(f"env {i}: {method!r} raised {type(e).__name__}: {e}") from e
            return out
        sent, errors = [], []
        for i, (method, args) in calls.items():
            try:
                self._conns[i].send((method, args))
                sent.append(i)
            except (BrokenPipeError, OSError) as e:
                errors.append(EnvWorkerError(f"env {i}: worker unreachable for {method!r}: {e}"))
        results: dict[int, Any] = {}
        for i in sent:
            try:
                results[i] = self._gather([i], calls[i][0])[0]
            except EnvWorkerError as e:
                errors.append(e)
        if errors:
            raise errors[0]
        return results

    # ---------------------------------------------------------------------------------------- API

    def reset(self, seeds: Sequence[int]) -> list[tuple[str, dict]]:
        """Resets env i to seeds[i]; returns [(obs, info)]."""
        if len(seeds) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} seeds, got {len(seeds)}")
        out = self._run({i: ("reset", (int(s),)) for i, s in enumerate(seeds)})
        return [out[i] for i in range(self.num_envs)]

    def step(self, actions: Sequence[str | None]) -> list[tuple[str, float, bool, dict] | None]:
        """Steps env i with actions[i] (None: env i is skipped and its slot is None)."""
        if len(actions) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} actions, got {len(actions)}")
        out = self._run({i: ("step", (a,)) for i, a in enumerate(actions) if a is not None})
        return [out.get(i) for i in range(self.num_envs)]

    def act(self, responses: dict[int, str]) -> dict[int, StepResult]:
        """One agent turn in env i per responses[i] (a whole model response): the env extracts the
        action (None when malformed; the env then answers with feedback, valid=False), steps, and
        snapshots. Returns {i: StepResult}."""
        return self._run({int(i): ("act", (r,)) for i, r in responses.items()})

    def snapshot(self, i: int) -> Any:
        return self._run({i: ("snapshot", ())})[i]

    def snapshots(self, indices: Sequence[int]) -> list[Any]:
        """Snapshots of envs `indices` (taken in parallel across workers)."""
        out = self._run({int(i): ("snapshot", ()) for i in indices})
        return [out[int(i)] for i in indices]

    def reset_some(self, seeds: dict[int, int]) -> dict[int, tuple[str, dict]]:
        """Resets env i to seeds[i] for the given envs only."""
        return self._run({int(i): ("reset", (int(s),)) for i, s in seeds.items()})

    def restore_some(self, snapshots: dict[int, Any]) -> None:
        """Restores env i to snapshots[i] for the given envs only."""
        self._run({int(i): ("restore", (snap,)) for i, snap in snapshots.items()})

    def call(self, method: str, indices: Sequence[int]) -> list[Any]:
        """env.method() on envs `indices` (e.g. "expert_action", "snapshot")."""
        out = self._run({int(i): (method, ()) for i in indices})
        return [out[int(i)] for i in indices]

    def restore(self, i: int, snapshot: Any) -> None:
        self._run({i: ("restore", (snapshot,))})

    def expert_actions(self) -> list[str | None]:
        """Every env's expert action."""
        out = self._run({i: ("expert_action", ()) for i in range(self.num_envs)})
        return [out[i] for i in range(self.num_envs)]

    @property
    def prompt(self):
        """The family's PromptSpec (of env 0)."""
        return self._run({0: ("prompt", ())})[0]

    def close(self) -> None:
        """Stops the workers (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for env in self._envs:
            env.close()
        for conn, proc in zip(self._conns, self._procs):
            try:
                if proc.is_alive():
                    conn.send(("close", ()))
            except (BrokenPipeError, OSError):
                pass
        for conn, proc in zip(self._conns, self._procs):
            proc.join(timeout=5.0)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5.0)
            conn.close()

    def __enter__(self) -> "EnvPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
