"""One chat completion end to end: render the prompt with the checkpoint's chat template, queue it
on the engine worker, turn the finished samples (or the streamed tokens) into OpenAI responses.

Text: special tokens are left out of the decoded text (the EOS token is counted in usage, not shown),
except the `<think>` / `<tool_call>` tags, which the parsers need whether or not they are special. For a
thinking checkpoint (its template knows `<think>`) the think block is returned as `reasoning_content`
(`reasoning.split`); `chat_template_kwargs` (e.g. enable_thinking) reach the template. A stop
string ends a sample at the token completing it; the text is cut before the stop string, as OpenAI
does. With tools (and tool_choice other than 'none') the text is parsed for Qwen `<tool_call>`
blocks, JSON or XML (`tools.parse_tool_calls`); any call makes finish_reason 'tool_calls'. Streaming sends text
deltas as tokens are read (holding back an incomplete UTF-8 character or a possible stop-string
prefix); with tools active the text is buffered and sent whole at the end, as content or as
tool_calls deltas. A response_format grammar closes a think block that the prompt opened before its
JSON (`grammar.Grammars.for_request`), so the JSON is the content. With logprobs, a choice (a delta)
carries the log-probabilities of the tokens read for it (since the previous delta). A request whose
client goes away before its end is cancelled on the engine: its slots take the next request.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Sequence

from prover_jax.sampling.driver import CACHE_FULL, LENGTH, Completion, Request
from prover_jax.sampling.sampler import SamplingParams
from prover_jax.sampling.stops import max_stop_bytes, token_bytes
from prover_jax.serving import protocol as P
from prover_jax.serving import reasoning as R
from prover_jax.serving.tools import parse_tool_calls
from prover_jax.serving.worker import EngineWorker, Overloaded, Stopped

RETRY_AFTER_S = 1
DISCONNECT_POLL_S = 0.25  # how often a request waiting on the engine checks that its client is still there


class ClientGone(Exception):
    """The client closed the connection; the request's samples were cancelled."""


class ChatService:
    """Args: worker (owns the Driver), tokenizer (an HF tokenizer with a chat template),
    model_name (the id clients send), max_target_length (prompt + completion limit per sample),
    default_max_tokens (when a request gives none; capped by what fits), max_stop_strings (distinct
    stop strings over the server's life: the engine's stop table), max_n, grammars (a
    `grammar.Grammars`: json_object / json_schema responses and forced tool calls are constrained),
    max_messages and max_tool_bytes (messages per request, bytes of a request's tools JSON; 0: no limit)."""

    def __init__(self, worker: EngineWorker, tokenizer: Any, model_name: str, max_target_length: int,
                 default_max_tokens: int = 1024, max_stop_strings: int = 8, max_n: int = 16, grammars=None,
                 max_messages: int = 0, max_tool_bytes: int = 0):
        self.worker, self.tokenizer, self.model_name = worker, tokenizer, model_name
        self.max_target_length, self.default_max_tokens = int(max_target_length), int(default_max_tokens)
        self.max_stop_strings, self.max_n = int(max_stop_strings), int(max_n)
        self.max_messages, self.max_tool_bytes = int(max_messages), int(max_tool_bytes)
        self.created = int(time.time())
        self.grammars = grammars  # grammar.Grammars (llguidance), or None: no constrained decoding
        self._stops: list[str] = []
        self._token_bytes: list[bytes] | None = None
        added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        self._special = frozenset(getattr(tokenizer, "all_special_ids", ())) | frozenset(
            i for i, t in added.items() if getattr(t, "special", False))
        vocab = tokenizer.get_vocab()  # markup tags are kept in the text even when they are special tokens
        self._markup = frozenset(vocab[t] for t in R.MARKUP if t in vocab)
        self._think_ids = (vocab.get(R.THINK), vocab.get(R.END_THINK))  # None: not one token
        engine = getattr(getattr(worker, "driver", None), "engine", None)  # its table bounds a stop string
        self.max_stop_bytes = max_stop_bytes(engine.vocab_size if engine is not None else len(vocab),
                                             getattr(engine, "max_stop_strings", self.max_stop_strings))
        self.reasoning = R.thinks(getattr(tokenizer, "chat_template", None))  # replies split at </think>

    # Requests.
    def parse(self, body: Any) -> P.ChatRequest:
        req = P.parse_chat_request(body, max_n=self.max_n, max_messages=self.max_messages,
                                   max_tool_bytes=self.max_tool_bytes)
        if req.model != self.model_name:
            raise P.ApiError(404, f"The model {req.model!r} does not exist; this server serves "
                             f"{self.model_name!r}", param="model", code="model_not_found")
        return req

    def tools_active(self, req: P.ChatRequest) -> bool:
        return bool(req.tools) and req.tool_choice != "none"

    def render(self, req: P.ChatRequest) -> tuple[list[int], bool]:
        """(prompt token ids from the chat template (tools included unless tool_choice is 'none', the
        request's chat_template_kwargs passed on), whether the generation prompt leaves a think block
        open: a `<think>` in the messages' own text opens nothing)."""
        tools = req.tools if self.tools_active(req) else None
        kw = dict(tools=tools, tokenize=False, **req.chat_template_kwargs)
        try:
            text = self.tokenizer.apply_chat_template(req.messages, add_generation_prompt=True, **kw)
            head = (self.tokenizer.apply_chat_template(req.messages, add_generation_prompt=False, **kw)
                    if self.reasoning else "")
        except Exception as e:  # jinja raises for conversations the template refuses
            raise P.bad(f"the chat template rejects these messages: {e}", "messages") from None
        error = P.unicode_error(text)  # e.g. in a tool's schema or a call's arguments
        if error:
            raise P.bad(f"the rendered prompt cannot be tokenized: {error}", "messages")
        generation = text[len(head):] if text.startswith(head) else text
        return list(self.tokenizer.encode(text, add_special_tokens=False)), R.opens_thinking(generation)

    def think_budget(self, budget: int, opened: bool):
        """() -> reasoning.ThinkBudget for max_thinking_tokens; 400 when the checkpoint does not think
        or its tags are not single tokens."""
        think, end = self._think_ids
        if not self.reasoning or think is None or end is None:
            raise P.bad("max_thinking_tokens needs a thinking checkpoint whose <think> and </think> are single "
                        "tokens; this one's chat template or vocabulary has none", "max_thinking_tokens")
        close = [end] + list(self.tokenizer.encode("\n\n", add_special_tokens=False))
        return lambda: R.ThinkBudget(budget, think, end, close, opened)

    def new_stops(self, stops: Sequence[str]) -> list[str]:
        """The stop strings not yet in the server's lifetime table, checked as the engine checks them
        (400 naming the problem); `submit` registers them once the request is queued, so a refused
        request takes no place in the table."""
        most = self.max_stop_bytes
        for s in stops:
            error = P.unicode_error(s) or (len(s.encode()) > most and f"{len(s.encode())} UTF-8 bytes")
            if error:
                shown = repr(s[:40]) + ("..." if len(s) > 40 else "")
                raise P.bad(f"stop {shown}: {error}; a stop string must be valid Unicode of at most "
                            f"{most} UTF-8 bytes", "stop")
        new = [s for s in dict.fromkeys(stops) if s not in self._stops]
        if len(self._stops) + len(new) > self.max_stop_strings:
            raise P.bad(f"this server tracks at most {self.max_stop_strings} distinct stop strings "
                        f"(prover-serve --max_stop_strings); {len(self._stops)} are in use", "stop")
        return new

    def build(self, req: P.ChatRequest) -> tuple[Request, int, bool]:
        """(engine request, prompt tokens, whether the reply starts inside a think block)."""
        prompt, opened = self.render(req)
        n, limit = len(prompt), self.max_target_length
        if req.max_tokens is not None and n + req.max_tokens > limit:
            raise P.bad(f"This model's maximum context length is {limit} tokens. However, you requested "
                        f"{n + req.max_tokens} tokens ({n} in the messages, {req.max_tokens} in the "
                        f"completion). Please reduce the length of the messages or completion.",
                        "messages", "context_length_exceeded")
        if n >= limit:
            raise P.bad(f"This model's maximum context length is {limit} tokens. However, your messages "
                        f"resulted in {n} tokens. Please reduce the length of the messages.",
                        "messages", "context_length_exceeded")
        max_new = req.max_tokens or min(self.default_max_tokens, limit - n)
        constraint = None
        temperature = 0.0 if req.top_p == 0 else req.temperature  # top_p 0: the most likely token only
        wants = req.response_format is not None or req.tool_choice == "required" or req.forced_tool is not None
        if wants and self.tools_active(req) or req.response_format is not None:
            if self.grammars is None:
                raise P.bad("constrained decoding (response_format / a forced tool call) is not available: "
                            "install llguidance (pip install prover_jax[serve])", "response_format")
            grammar = self.grammars.for_request(req, close_think=opened)
            constraint = None if grammar is None else self.grammars.factory(grammar)
        elif req.max_thinking_tokens is not None:
            constraint = self.think_budget(req.max_thinking_tokens, opened)
        self.new_stops(req.stop)
        seed = random.randrange(2 ** 31) if req.seed is None else req.seed % 2 ** 32
        sampling = SamplingParams(temperature=temperature, top_p=req.top_p or 1.0)
        return Request(prompt, sampling, max_new_tokens=max_new, seed=seed, num_samples=req.n,
                       stop_strings=req.stop, constraint=constraint), n, opened

    def submit(self, request: Request, stream: bool):
        """Queues `request` on the worker (registering its new stop strings): (handle for
        `worker.cancel`, asyncio queue of its events). 503 when the queue is full, 500 when the engine
        has stopped."""
        loop, events = asyncio.get_running_loop(), asyncio.Queue()

        def on_event(kind, sample, payload):
            loop.call_soon_threadsafe(events.put_nowait, (kind, sample, payload))

        try:
            handle = self.worker.submit(request, on_event, stream=stream)
        except Overloaded as e:
            raise P.ApiError(503, f"The server is overloaded ({e}); retry after {RETRY_AFTER_S} s",
                             type="server_error", code="overloaded",
                             headers={"Retry-After": str(RETRY_AFTER_S)}) from None
        except Stopped as e:
            raise P.ApiError(500, str(e), type="server_error", code="engine_stopped") from None
        self._stops += self.new_stops(request.stop_strings)
        return handle, events

    @staticmethod
    def refusal(kind: str, message: str) -> P.ApiError:
        """The ApiError of an "error" event (the engine refused the request: 400) or a "failed" one
        (the engine stopped: 500)."""
        if kind == "failed":
            return P.ApiError(500, message, type="server_error", code="engine_stopped")
        return P.bad(message)

    @staticmethod
    async def next_event(events: asyncio.Queue, disconnected: Callable[[], Awaitable[bool]] | None):
        """The next engine event; ClientGone when `disconnected()` says the client left meanwhile."""
        while True:
            try:
                return await asyncio.wait_for(events.get(), DISCONNECT_POLL_S)
            except asyncio.TimeoutError:
                if disconnected is not None and await disconnected():
                    raise ClientGone() from None

    # Results.
    def text(self, tokens: Sequence[int]) -> str:
        """The text of generated ids: special tokens left out, except the think / tool-call tags."""
        keep = [t for t in tokens if t not in self._special or t in self._markup]
        return self.tokenizer.decode(keep, skip_special_tokens=False)

    def finish(self, req: P.ChatRequest, c: Completion, opened: bool = False
               ) -> tuple[str | None, list[dict], str, str | None]:
        """(content, tool_calls, finish_reason, reasoning) of one finished sample; `opened`: the prompt
        left a think block open."""
        text = self.text(c.tokens)
        if isinstance(c.stop, str) and c.stop in text:
            text = text[:text.index(c.stop)]
        reason = "length" if c.finish_reason in (LENGTH, CACHE_FULL) else "stop"
        thought = None
        if self.reasoning:
            thought, text = R.split(text, opened, calls=self.tools_active(req))
        calls: list[dict] = []
        if self.tools_active(req):
            text, calls = parse_tool_calls(text, req.tools)
            if calls:
                reason = "tool_calls"
        return text, calls, reason, thought

    def logprob_entries(self, tokens: Sequence[int], logprobs: Sequence[float]) -> list[dict]:
        """OpenAI's logprobs.content entries of generated tokens (special tokens, never shown, left out):
        {"token": its text, "logprob", "bytes": its UTF-8 bytes, "top_logprobs": []}."""
        if self._token_bytes is None:  # built on first use: every id the engine can sample
            self._token_bytes = token_bytes(self.tokenizer, self.worker.driver.engine.vocab_size)
        out = []
        for t, lp in zip(tokens, logprobs):
            if t in self._special and t not in self._markup:
                continue
            b = self._token_bytes[t]
            out.append({"token": b.decode("utf-8", errors="replace"), "logprob": float(lp), "bytes": list(b),
                        "top_logprobs": []})
        return out

    async def complete(self, req: P.ChatRequest, disconnected=None) -> dict:
        """The response of a non-streamed request. `disconnected`: an async () -> bool; when it turns
        true before the end, the request is cancelled on the engine and ClientGone is raised."""
        request, n_prompt, opened = self.build(req)
        handle, events = self.submit(request, stream=False)
        done: dict[int, Completion] = {}
        try:
            while len(done) < req.n:
                kind, sample, payload = await self.next_event(events, disconnected)
                if kind in ("error", "failed"):
                    raise self.refusal(kind, payload)
                if kind == "done":
                    done[sample] = payload
        finally:
            if len(done) < req.n:  # client gone, or this task cancelled: free the slots
                self.worker.cancel(handle)
        choices = []
        for j in range(req.n):
            content, calls, reason, thought = self.finish(req, done[j], opened)
            message = {"role": "assistant", "content": content}
            if thought is not None:
                message["reasoning_content"] = thought
            if calls:
                message["tool_calls"] = calls
            lps = {"content": self.logprob_entries(done[j].tokens, done[j].logprobs)} if req.logprobs else None
            choices.append({"index": j, "message": message, "finish_reason": reason, "logprobs": lps})
        n_out = sum(len(c.tokens) for c in done.values())
        return P.chat_completion(P.completion_id(), self.model_name, choices, P.usage(n_prompt, n_out))

    async def start_stream(self, req: P.ChatRequest, disconnected=None) -> AsyncIterator[str]:
        """Validates and queues `req` and waits until the engine accepts it (ApiError, or ClientGone,
        before any byte is sent), then returns the SSE lines. The request is cancelled on the engine
        when `disconnected()` turns true or the stream is closed before its end."""
        request, n_prompt, opened = self.build(req)
        handle, events = self.submit(request, stream=True)
        try:
            kind, _, payload = await self.next_event(events, disconnected)
        except BaseException:  # client gone, or this task cancelled
            self.worker.cancel(handle)
            raise
        if kind != "accepted":  # refused ("error") or the engine stopped ("failed"): nothing queued
            raise self.refusal(kind, payload)
        return self._stream(req, handle, events, n_prompt, opened, disconnected)

    async def _stream(self, req, handle, events, n_prompt, opened, disconnected) -> AsyncIterator[str]:
        ended = False
        try:
            async for line in self._lines(req, events, n_prompt, opened, disconnected):
                yield line
            ended = True
        except ClientGone:
            return
        finally:
            if not ended:  # client gone, or the stream closed early: free the slots
                self.worker.cancel(handle)

    async def _lines(self, req: P.ChatRequest, events: asyncio.Queue, n_prompt: int, opened: bool, disconnected):
        """SSE lines of the response (reasoning_content deltas before content ones for thinking models)."""
        cid, created, model = P.completion_id(), int(time.time()), self.model_name
        sse = lambda obj: f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"
        lp_sent = {j: 0 for j in range(req.n)}  # tokens whose logprobs were sent

        def delta(j, d, reason=None, tokens=None):
            lps = None
            if req.logprobs and tokens is not None and len(tokens[0]) > lp_sent[j]:  # tokens read since
                lps = {"content": self.logprob_entries(tokens[0][lp_sent[j]:], tokens[1][lp_sent[j]:])}
                lp_sent[j] = len(tokens[0])
            return sse(P.chunk(cid, model, created, [{"index": j, "delta": d, "finish_reason": reason,
                                                       "logprobs": lps}]))
        buffered = self.tools_active(req)
        sent = {j: "" for j in range(req.n)}
        thought_sent = {j: "" for j in range(req.n)}

        def parts(j, text, tokens):
            """Deltas for what `text` adds to the reasoning and the content sent so far."""
            thought = None
            if self.reasoning:  # streamed pieces: tools are not active
                thought, text = R.split(text, opened, calls=False)
            out = []
            if thought and thought != thought_sent[j] and thought.startswith(thought_sent[j]):
                out.append(delta(j, {"reasoning_content": thought[len(thought_sent[j]):]}, tokens=tokens))
                thought_sent[j] = thought
            if len(text) > len(sent[j]) and text.startswith(sent[j]):
                out.append(delta(j, {"content": text[len(sent[j]):]}, tokens=tokens))
                sent[j] = text
            return out
        for j in range(req.n):
            yield delta(j, {"role": "assistant", "content": ""})
        left, n_out = req.n, 0
        while left:
            kind, j, payload = await self.next_event(events, disconnected)
            if kind in ("error", "failed"):  # after the headers: an error event ends the stream
                e = self.refusal(kind, payload)
                yield sse(e.body())
                break
            if kind == "tokens" and not buffered:
                safe = self._safe_prefix(self.text(payload[0]), req.stop)
                if self.reasoning:
                    safe = safe[:R.hold_back(safe)]
                for line in parts(j, safe, payload):
                    yield line
            elif kind == "done":
                left -= 1
                n_out += len(payload.tokens)
                every = (payload.tokens, payload.logprobs)
                content, calls, reason, thought = self.finish(req, payload, opened)
                if thought is not None and thought != thought_sent[j]:
                    rest = thought[len(thought_sent[j]):] if thought.startswith(thought_sent[j]) else thought
                    yield delta(j, {"reasoning_content": rest}, tokens=every)
                if content and content != sent[j]:
                    rest = content[len(sent[j]):] if content.startswith(sent[j]) else content
                    yield delta(j, {"content": rest}, tokens=every)
                if calls:
                    yield delta(j, {"tool_calls": [{"index": k, **c} for k, c in enumerate(calls)]}, tokens=every)
                yield delta(j, {}, reason, tokens=every)
        if req.include_usage:
            yield sse(P.chunk(cid, model, created, [], P.usage(n_prompt, n_out)))
        yield "data: [DONE]\n\n"

    @staticmethod
    def _safe_prefix(text: str, stops: Sequence[str]) -> str:
        """`text` less an incomplete trailing character and any suffix that may start a stop string."""
        text = text.rstrip("\ufffd")
        cut = len(text)
        for s in stops:
            for k in range(min(len(s) - 1, len(text)), 0, -1):
                if text.endswith(s[:k]):
                    cut = min(cut, len(text) - k)
                    break
        return text[:cut]
