"""The `openai` turn critic of the `critic` credit method: labels from an LLM with privileged information.

An LLM over any OpenAI-compatible chat endpoint (`judges.client.ChatEndpoint`, as the judge uses it:
the API key, the HTTP client, retries and backoff, the per-step call budget, the response cache). One
call per trajectory, no tools, structured output (response_format json_schema, with a plain-JSON parse
as fallback): the prompt shows privileged information (the env's `Env.privileged_facts` for the task,
e.g. household: where the target objects and decoys are; then the expert's solution from the start), the
task, the whole trajectory (every action and observation; observations clipped so that the prompt
stays under max_chars), and asks for {"labels": [{"turn": t, "label": "good" | "bad"}, ...]}.
Responses are cached in WORKDIR/critic_cache by the hash of the request (only parseable ones); calls
are budgeted per step (max_calls_per_step; begin_step resets) in trajectory order, then run
concurrently (max_concurrency). Nothing raises into training: a failed call, a malformed reply or a
spent budget leaves the trajectory's labels 0.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import re
from typing import Any

from prover_jax.credit.critic import BAD, GOOD, NEUTRAL, TurnCritic, register_critic
from prover_jax.envs.base import Env, lacks_hook, make, split_seed
from prover_jax.judges.base import config_get, render_trajectory
from prover_jax.judges.client import ChatEndpoint, join_path
from prover_jax.judges.tools import as_int
from prover_jax.rollout.trajectory import Trajectory

log = logging.getLogger(__name__)

SYSTEM_PROMPT = """\
You are the critic of a reinforcement-learning agent. You see ONE attempt of the agent at a task, turn \
by turn (its action, then what the environment answered), together with PRIVILEGED INFORMATION the \
agent did not have: the hidden details of the goal and a reference solution.

Label EVERY turn of the attempt:
- "good": the action was a sensible step toward completing the task: it made progress, gathered \
information that was needed, or was required to go on;
- "bad": the action was a mistake: invalid or malformed, useless or repeated, off the path, or it made \
success harder or impossible (for example an irreversible error).
Judge each action by what it did at that point, using the privileged information, not only by the \
final outcome: a failed attempt may contain good turns and a successful one bad turns. Other routes \
than the reference solution can be good.

Answer with JSON only, one entry per turn, in order:
{"labels": [{"turn": 0, "label": "good"}, {"turn": 1, "label": "bad"}, ...]}"""

LABEL_SCHEMA = {
    "type": "object",
    "properties": {"labels": {"type": "array", "items": {
        "type": "object",
        "properties": {"turn": {"type": "integer"}, "label": {"type": "string", "enum": ["good", "bad"]}},
        "required": ["turn", "label"], "additionalProperties": False}}},
    "required": ["labels"], "additionalProperties": False,
}
LABEL_WORDS = {"good": GOOD, "bad": BAD}
# the fields of config.credit.critic.openai passed on (those set)
SECTION_KEYS = ("base_url", "model", "api_key_env", "timeout_s", "max_retries", "max_calls_per_step",
                "usd_per_m_input", "usd_per_m_output", "cache", "backoff_base_s", "backoff_max_s",
                "max_concurrency", "obs_chars", "max_chars", "temperature", "structured", "enable_thinking")
_FENCE_RE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)


def _entries(value: Any) -> list | None:
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        for key in ("labels", "turns"):
            if isinstance(value.get(key), list):
                return value[key]
        if "turn" in value and "label" in value:
            return [value]
    return None


def load_entries(text: str) -> list | None:
    """The list of {turn, label} entries in a reply: its JSON, JSON in a ``` fence, or the first JSON
    value found in the text ({"labels": [...]}, or a bare list); None when there is none."""
    text = text.strip()
    tries = [text] + [m.group(1).strip() for m in _FENCE_RE.finditer(text)]
    for candidate in tries:
        try:
            found = _entries(json.loads(candidate))
        except ValueError:
            continue
        if found is not None:
            return found
    decoder = json.JSONDecoder()
    for m in re.finditer(r"[\[{]", text):
        try:
            value, _ = decoder.raw_decode(text, m.start())
        except ValueError:
            continue
        found = _entries(value)
        if found is not None:
            return found
    return None


def parse_labels(content: Any, num_turns: int) -> tuple[list[int], int] | None:
    """(labels, turns left unlabelled) from a reply's text; None when it holds no usable label."""
    if not isinstance(content, str) or not content.strip():
        return None
    entries = load_entries(content)
    if entries is None:
        return None
    labels, seen = [NEUTRAL] * num_turns, set()
    for e in entries:
        if not isinstance(e, dict):
            continue
        t, word = as_int(e.get("turn")), e.get("label")
        value = LABEL_WORDS.get(word.strip().lower()) if isinstance(word, str) else None
        if t is None or not 0 <= t < num_turns or value is None:
            continue
        labels[t] = value
        seen.add(t)
    if not seen:
        return None
    return labels, num_turns - len(seen)


def _expert_solution(env, seed: int, limit: int = 60) -> list[str]:
    """The expert's actions from the start of task `seed` (at most `limit`)."""
    env.reset(seed)
    out = []
    for _ in range(limit):
        action = env.expert_action()
        if action is None:
            break
        out.append(action)
        _, _, done, _ = env.step(action)
        if done:
            break
    return out


def no_facts(env_name: str) -> str:
    """The refusal of an env that offers no privileged facts."""
    return (f"credit.critic.name='openai' needs the env's privileged facts (Env.privileged_facts); env "
            f"{env_name!r} (env.name) offers no privileged facts")


def privileged_text(env: Env, seed: int) -> str:
    """What `env` knows about task `seed` and the agent does not: its `privileged_facts`, then the
    expert's solution from the start (when the env has an expert)."""
    facts = env.privileged_facts(seed)
    if facts is None:
        raise ValueError(no_facts(env.name))
    lines = list(facts)
    try:
        solution = _expert_solution(env, seed)
    except Exception:  # noqa: BLE001  (an env without a usable expert: the facts alone)
        solution = []
    if solution:
        lines.append("Reference solution (the expert's actions from the start; other routes may be fine): "
                     + "; ".join(f"{i}. {a}" for i, a in enumerate(solution)))
    return "\n".join(lines)


@register_critic("openai")
class OpenAICritic(TurnCritic):
    """The LLM critic (see the module docstring). The arguments are config.credit.critic.openai's fields;
    `endpoint`: `judges.client.ChatEndpoint`'s settings (base_url, api_key_env, api_key, timeout_s,
    max_retries, usd_per_m_input, usd_per_m_output, backoff_base_s, backoff_max_s; http_client (an
    httpx.Client) and sleep for tests)."""

    def __init__(self, env_name: str, env_kwargs: dict | None = None, *, model: str = "gpt-4.1-mini",
                 max_calls_per_step: int = 256, cache: bool = True, workdir: str | None = None,
                 max_concurrency: int = 16, obs_chars: int = 600, max_chars: int = 24000,
                 temperature: float = 0.0, structured: bool = True, **endpoint: Any):
        if lacks_hook(env_name, "privileged_facts"):  # known without building the env
            raise ValueError(no_facts(env_name))
        self.endpoint = ChatEndpoint(who="openai critic", config="credit.critic.openai", **endpoint,
                                     max_calls_per_step=max_calls_per_step,
                                     cache_dir=join_path(workdir, "critic_cache") if cache and workdir else None)
        self.env_name, self.env = env_name, make(env_name, **dict(env_kwargs or {}))
        if self.env.privileged_facts(split_seed(0)) is None:  # the built env has the last word
            self.endpoint.close()
            raise ValueError(no_facts(env_name))
        self.model = model
        self.max_concurrency = max(int(max_concurrency), 1)
        self.obs_chars, self.max_chars = int(obs_chars), int(max_chars)
        self.temperature, self.structured = float(temperature), bool(structured)
        self._privileged: dict[int, str] = {}
        super().__init__()

    @classmethod
    def from_section(cls, section, env_name, env_kwargs=None, workdir=None, **kwargs) -> "OpenAICritic":
        """From config.credit.critic.openai's set fields (unset: defaults)."""
        sub = config_get(section, "openai")
        args = {k: config_get(sub, k) for k in SECTION_KEYS if config_get(sub, k) is not None}
        return cls(env_name, env_kwargs, workdir=workdir, **{**args, **kwargs})

    @property
    def cache(self):
        return self.endpoint.cache

    @property
    def max_calls_per_step(self) -> int:
        return self.endpoint.max_calls_per_step

    def begin_step(self) -> None:
        super().begin_step()
        self.endpoint.begin_step()

    @property
    def cost_usd(self) -> float:
        return self.endpoint.cost_usd(self)

    def close(self) -> None:
        self.endpoint.close()

    # ------------------------------------------------------------------------------------- the request

    def privileged(self, seed: int) -> str:
        if seed not in self._privileged:
            if len(self._privileged) >= 4096:
                self._privileged.clear()
            self._privileged[seed] = privileged_text(self.env, seed)
        return self._privileged[seed]

    def render(self, traj: Trajectory, reserved: int) -> str:
        """The trajectory in full; each observation clipped so that the text fits max_chars - reserved."""
        n = max(traj.num_turns, 1)
        per_turn = (self.max_chars - reserved - min(len(traj.task), 2000) - 200) // n - 80
        obs_chars = max(60, min(self.obs_chars, per_turn))
        return render_trajectory(traj, full=True, obs_chars=obs_chars, task_chars=2000,
                                 max_chars=max(self.max_chars - reserved, 1000))

    def messages(self, traj: Trajectory) -> list[dict]:
        n = traj.num_turns
        facts = self.privileged(traj.seed)
        head = f"PRIVILEGED INFORMATION (hidden from the agent):\n{facts}\n\n"
        tail = f"\n\nLabel each of the {n} turns 0..{n - 1} good or bad."
        body = (f"THE AGENT'S ATTEMPT ({n} turns, 0..{n - 1}):\n"
                + self.render(traj, len(head) + len(tail) + len(SYSTEM_PROMPT)))
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": head + body + tail}]

    def payload(self, traj: Trajectory) -> dict:
        payload = {"model": self.model, "messages": self.messages(traj)}
        if self.temperature >= 0:
            payload["temperature"] = self.temperature
        if self.structured:
            payload["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "turn_labels", "strict": True, "schema": LABEL_SCHEMA}}
        return payload

    @staticmethod
    def _parse(data: Any, num_turns: int) -> tuple[list[int], int] | None:
        try:
            message = data["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            return None
        return parse_labels(message.get("content") if isinstance(message, dict) else None, num_turns)

    def _call(self, payload: dict, key: str | None, num_turns: int) -> tuple[list[int], int] | None:
        """One budgeted request (already counted against the budget): (labels, missing) or None."""
        try:
            data, reason, detail = self.endpoint.send(payload, self)  # counts calls and tokens on self
            if data is None:
                log.warning("openai critic: call failed (%s): %s", reason, detail)
                return None
            parsed = self._parse(data, num_turns)
            if parsed is None:
                log.warning("openai critic: reply without usable labels: %s", str(data)[:300])
                return None
            self.endpoint.store(key, data)
            return parsed
        except Exception as e:  # noqa: BLE001  (a critic never stops training)
            log.warning("openai critic: call failed: %s: %s", type(e).__name__, e)
            return None

    def _label_all(self, trajs: list[Trajectory]) -> list[list[int]]:
        """Cache hits and budget in trajectory order (deterministic), then the calls concurrently."""
        out = [[NEUTRAL] * t.num_turns for t in trajs]
        jobs = []
        for i, traj in enumerate(trajs):
            n = traj.num_turns
            if n == 0:
                continue
            try:
                payload = self.payload(traj)
            except Exception as e:  # noqa: BLE001
                log.warning("openai critic: no prompt for trajectory %s of task %s: %s: %s", traj.uid, traj.seed,
                            type(e).__name__, e)
                self.dropped += n
                continue
            key, hit = self.endpoint.lookup(payload)
            parsed = None if hit is None else self._parse(hit, n)
            if parsed is not None:
                out[i] = parsed[0]
                self.cached += 1
                self.dropped += parsed[1]
                continue
            if not self.endpoint.take_call():
                self.dropped += n
                continue
            jobs.append((i, payload, key, n))
        if jobs:
            workers = min(self.max_concurrency, len(jobs))
            with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="critic") as pool:
                results = list(pool.map(lambda job: self._call(job[1], job[2], job[3]), jobs))
            for (i, _, _, n), parsed in zip(jobs, results):
                if parsed is None:
                    self.dropped += n
                else:
                    out[i] = parsed[0]
                    self.dropped += parsed[1]
        return out
