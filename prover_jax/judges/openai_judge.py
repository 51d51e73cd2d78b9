"""`openai`: an agentic LLM judge over any OpenAI-compatible chat-completions endpoint.

The model gets a brief (find one failure mode that recurs across the failed runs, then the shortest
segment of the successful run that avoids or solves it), the successful run in full and compact
previews of the failed runs (ids 0..n-1), and three tools (see `tools`): search_trajectory(query, k)
(BM25 over the failed runs' turns), get_segment(traj_id, start_turn, end_turn) and
propose_segment(start_turn, end_turn, failure_mode, rationale), the answer.

Loop: call the model, run its tool calls, append the results, repeat. A proposal is validated
(`base.segment_problem`); a reply with invalid ones (however many), malformed JSON arguments, without
any tool call ('no_tool_call') or whose tool calls cannot be read ('schema': tool_calls not a list, an
entry or its function not an object; unreadable entries are skipped when others can be run) costs one
repair: the model is told what is wrong and asked again; after max_repairs the proposal is dropped
with the last reason. At most max_tool_rounds + max_repairs model calls per proposal (then
'no_proposal', or the last invalid proposal's reason).

tool_choice: "auto" (default) sends none (the endpoint's default: the model may answer in text);
"required" sends tool_choice="required" on every call, so each reply calls one of the offered tools
(the inspection tools stay allowed; a server with constrained decoding, e.g. prover-serve, then never
yields a 'no_tool_call' reply). The payload, and so the cache key, changes only when it is set.

Endpoint failures (never raised; each drops the proposal): timeout, rate_limited and api_error after
the retries and backoff of `client.ChatEndpoint` (see there), and
  budget         the step's max_calls_per_step model calls are spent (begin_step resets; no request made)

API key: read from the environment variable named by api_key_env. Missing -> ValueError at
construction, unless base_url points to a self-hosted server (`client.is_self_hosted`), which gets the
placeholder key "EMPTY".

Cost: usage.prompt_tokens / completion_tokens summed over the proposal's calls; cost_usd =
in / 1e6 * usd_per_m_input + out / 1e6 * usd_per_m_output. With cache=True and a workdir, every
response is stored in WORKDIR/judge_cache under the hash of (model, messages, tools): identical
requests of a resumed run are served from disk at no cost and count as no call. A proposal dropped
for an exception ('judge_error') still reports the calls, tokens and cost spent before it.

timeout_s (judge.openai.timeout_s) bounds each request attempt as a whole, not each read: a server that
trickles its answer is cut off at timeout_s ('timeout').
"""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np

from prover_jax.judges.base import (BUDGET, JUDGE_ERROR, NO_PROPOSAL, NO_TOOL_CALL, OK, SCHEMA, Judge, Proposal,
                                    clip_text, config_get, register, render_trajectory, segment_problem)
from prover_jax.judges.client import ChatEndpoint, Usage, is_self_hosted, join_path  # noqa: F401  (re-export)
from prover_jax.judges.tools import FailureIndex, as_int, parse_arguments, tool_specs

log = logging.getLogger(__name__)

SYSTEM_BRIEF = """\
You assist a reinforcement-learning trainer with credit assignment. An agent attempted the same task \
several times from the same start. One attempt SUCCEEDED; the others FAILED.

Your job:
1. Work out ONE failure mode that recurs across the failed attempts (a mistake several of them make, \
or a step they all miss).
2. Pick the SHORTEST stretch of consecutive turns of the successful attempt in which the agent avoids \
that failure mode or does what the failed attempts did not.

Rules for the stretch (turn indices of the successful attempt, inclusive):
- at most {max_turns} turn(s): end_turn - start_turn + 1 <= {max_turns};
- 0 <= start_turn <= end_turn <= {last_allowed}: it must end before the final turn ({final});
- every turn in it must be a valid action (turns marked INVALID are not allowed).

Inspect the failed attempts with search_trajectory and get_segment as needed (their ids are given \
below), then answer by calling propose_segment exactly once."""

DEFAULT_MAX_TOOL_ROUNDS = 8
TOOL_CHOICES = ("auto", "required")


class Spend(Usage):
    """One proposal's usage counters and repair turns."""

    def __init__(self):
        super().__init__()
        self.repairs = 0


def read_tool_calls(msg: dict) -> tuple[list[dict], str | None]:
    """The reply's tool calls as they are echoed back ({id, type, function: {name, arguments text}}),
    and what is wrong with those that cannot be read (None if all can): tool_calls not a list, an
    entry or its function not an object, arguments that are not JSON-serialisable."""
    raw = msg.get("tool_calls")
    if raw is None:
        return [], None
    if not isinstance(raw, list):
        return [], f"tool_calls must be a list of tool calls, got {type(raw).__name__}"
    calls, problems = [], []
    for j, c in enumerate(raw):
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict):
            problems.append(f"tool call {j} is not an object with a function object: {clip_text(repr(c), 80)}")
            continue
        args = fn.get("arguments")
        if not isinstance(args, str):
            try:
                args = json.dumps(args)
            except (TypeError, ValueError):
                problems.append(f"tool call {j} has arguments that are neither text nor JSON")
                continue
        calls.append({"id": str(c.get("id") or f"call_{j}"), "type": "function",
                      "function": {"name": str(fn.get("name") or ""), "arguments": args}})
    return calls, "; ".join(problems) or None


@register("openai")
class OpenAIJudge(Judge):
    """See the module docstring."""

    def __init__(self, *, model: str, cache: bool = True, workdir: str | None = None, max_repairs: int = 3,
                 max_tool_rounds: int = DEFAULT_MAX_TOOL_ROUNDS, preview_chars: int = 2500,
                 tool_choice: str = "auto", **endpoint: Any):
        """endpoint: `client.ChatEndpoint`'s settings (base_url, api_key_env, api_key, timeout_s (the whole
        of each request attempt, not each read), max_retries, max_calls_per_step (default 64),
        usd_per_m_input, usd_per_m_output, backoff_base_s, backoff_max_s, http_client, sleep)."""
        if tool_choice not in TOOL_CHOICES:
            raise ValueError(f"openai judge: tool_choice must be one of {', '.join(TOOL_CHOICES)}, "
                             f"got {tool_choice!r} (config judge.openai.tool_choice)")
        self.model, self.tool_choice = model, tool_choice
        self.endpoint = ChatEndpoint(who="openai judge", config="judge.openai", **endpoint,
                                     cache_dir=join_path(workdir, "judge_cache") if cache and workdir else None)
        self.max_repairs, self.max_tool_rounds = int(max_repairs), int(max_tool_rounds)
        self.preview_chars = int(preview_chars)

    @property
    def client(self):
        return self.endpoint.client

    @property
    def cache(self):
        return self.endpoint.cache

    @classmethod
    def from_config(cls, section, workdir=None, **kwargs):
        """`section` is the trainer's config.judge (uses .openai and .max_repairs) or its openai part."""
        sub = config_get(section, "openai", section)
        keys = ("base_url", "model", "api_key_env", "timeout_s", "max_retries", "max_calls_per_step",
                "usd_per_m_input", "usd_per_m_output", "cache", "max_tool_rounds", "backoff_base_s",
                "backoff_max_s", "preview_chars", "tool_choice", "enable_thinking")
        args = {k: config_get(sub, k) for k in keys if config_get(sub, k) is not None}
        repairs = config_get(section, "max_repairs")  # the judge section's (or the openai part's own)
        if repairs is not None:
            args["max_repairs"] = repairs
        args.setdefault("model", "gpt-4.1-mini")
        return cls(**{**args, "workdir": workdir, **kwargs})

    def begin_step(self) -> None:
        self.endpoint.begin_step()

    def close(self) -> None:
        self.endpoint.close()

    # --------------------------------------------------------------------------------------- one call

    def _complete(self, messages: list[dict], tools: list[dict], usage: Usage) -> tuple[dict | None, str, str]:
        endpoint = self.endpoint
        payload = {"model": self.model, "messages": messages, "tools": tools}
        if self.tool_choice != "auto":
            payload["tool_choice"] = self.tool_choice
        key, hit = endpoint.lookup(payload)
        if hit is not None:
            usage.cached += 1
            return hit, OK, ""
        if not endpoint.take_call():
            return None, BUDGET, f"the step's budget of {endpoint.max_calls_per_step} judge calls is spent"
        data, reason, detail = endpoint.send(payload, usage)
        if data is not None:
            endpoint.store(key, data)
        return data, reason, detail

    # ---------------------------------------------------------------------------------------- the loop

    def messages(self, success, failures, max_segment_turns: int) -> list[dict]:
        """The opening conversation: the brief, the successful run in full, previews of the failed ones."""
        n = success.num_turns
        system = SYSTEM_BRIEF.format(max_turns=max_segment_turns, last_allowed=n - 2, final=n - 1)
        index = FailureIndex(failures)
        user = (f"SUCCESSFUL attempt (turns 0..{n - 1}):\n{render_trajectory(success, full=True)}\n\n"
                f"FAILED attempts (compact previews; ids 0..{len(failures) - 1}):\n"
                f"{index.previews(self.preview_chars) if failures else '(none)'}")
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def _result(self, usage: Spend, reason: str, segment=None, rationale: str = "",
                failure_mode: str = "") -> Proposal:
        cost = self.endpoint.cost_usd(usage)
        return Proposal(segment, reason, rationale=rationale, failure_mode=failure_mode, calls=usage.calls,
                        input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, cost_usd=cost,
                        repairs=usage.repairs, cached=usage.cached > 0 and usage.calls == 0)

    def _check(self, raw, success, max_segment_turns) -> tuple[tuple[int, int] | None, dict, tuple | None]:
        args, problem = parse_arguments(raw)
        if args is None:
            return None, {}, (SCHEMA, problem)
        l, r = as_int(args.get("start_turn")), as_int(args.get("end_turn"))
        if l is None or r is None:
            return None, args, (SCHEMA, "start_turn and end_turn must be integers, got "
                                        f"{args.get('start_turn')!r} and {args.get('end_turn')!r}")
        return (l, r), args, segment_problem(success, l, r, max_segment_turns)

    def _propose(self, success, failures, *, max_segment_turns: int, rng: np.random.Generator) -> Proposal:
        usage = Spend()
        try:
            return self._converse(success, failures, max_segment_turns, usage)
        except Exception as e:
            e.spent = self._result(usage, JUDGE_ERROR)  # Judge.propose keeps this spend in its judge_error
            raise

    def _converse(self, success, failures, max_segment_turns: int, usage: Spend) -> Proposal:
        """The tool loop (module docstring), counting into `usage` as it goes."""
        index = FailureIndex(failures)
        tools = tool_specs(max_segment_turns)
        messages = self.messages(success, failures, max_segment_turns)
        last = None
        for _ in range(self.max_tool_rounds + self.max_repairs):
            data, reason, detail = self._complete(messages, tools, usage)
            if data is None:
                return self._result(usage, reason, rationale=detail)
            msg = data["choices"][0]["message"]
            calls, malformed = read_tool_calls(msg)
            text = str(msg.get("content") or "")
            assistant = {"role": "assistant", "content": msg.get("content") or ""}
            if calls:
                assistant["tool_calls"] = calls
            messages.append(assistant)
            if not calls:
                if malformed:
                    last = (SCHEMA, f"the tool calls could not be read: {malformed}")
                    rationale = f"{text} [rejected: {last[1]}]".strip()
                    nudge = (f"REJECTED (schema): {last[1]}. Call a tool with a function object holding its "
                             "name and JSON arguments; answer by calling propose_segment.")
                else:
                    last, rationale = (NO_TOOL_CALL, "the reply called no tool"), text
                    nudge = ("You did not call a tool. Inspect the failed attempts if needed, then answer by "
                             "calling propose_segment.")
                if usage.repairs >= self.max_repairs:
                    return self._result(usage, last[0], rationale=rationale)
                usage.repairs += 1
                messages.append({"role": "user", "content": nudge})
                continue
            repaired = False  # the rejected proposals of one reply share one repair turn
            for call in calls:
                name, raw = call["function"]["name"], call["function"]["arguments"]
                if name == "propose_segment":
                    segment, args, problem = self._check(raw, success, max_segment_turns)
                    rationale, mode = str(args.get("rationale") or ""), str(args.get("failure_mode") or "")
                    if problem is None:
                        return self._result(usage, OK, segment, rationale, mode)
                    last = problem
                    if not repaired:
                        if usage.repairs >= self.max_repairs:
                            return self._result(usage, problem[0],
                                                rationale=f"{rationale} [rejected: {problem[1]}]".strip(),
                                                failure_mode=mode)
                        usage.repairs, repaired = usage.repairs + 1, True
                    content = (f"REJECTED ({problem[0]}): {problem[1]}. Call propose_segment again with a "
                               f"valid segment (repair {usage.repairs} of {self.max_repairs}).")
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
                    continue
                args, problem = parse_arguments(raw)
                if args is None:
                    content = f"error: {problem}"
                elif name == "search_trajectory":
                    content = index.search(args.get("query"), args.get("k", 5))
                elif name == "get_segment":
                    content = index.segment(args.get("traj_id"), args.get("start_turn"), args.get("end_turn"))
                else:
                    content = f"error: unknown tool {name!r}; use search_trajectory, get_segment or propose_segment"
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
        reason, detail = last if last is not None else (NO_PROPOSAL, "")
        return self._result(usage, reason,
                            rationale=f"no valid proposal within {self.max_tool_rounds + self.max_repairs} "
                                      f"model calls {detail}".strip())
