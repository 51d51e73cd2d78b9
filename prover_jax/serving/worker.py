"""The thread that owns the Driver: requests from any thread, continuous batching, bounded queue.

    worker = EngineWorker(driver, max_pending=64)
    worker.start()
    handle = worker.submit(request, on_event)   # Overloaded when max_pending requests are in flight,
                                                # Stopped once the engine thread has ended
    worker.cancel(handle)                       # the client went away: its samples stop decoding
    # on_event(kind, sample, payload) is called from the worker thread:
    #   ("accepted", -1, None)         the driver took the request (before any other event)
    #   ("tokens", j, (tokens, logprobs) so far)  after a step that grew sample j (stream=True only)
    #   ("done", j, Completion)        sample j finished
    #   ("error", -1, message)         the driver refused the request (nothing else follows)
    #   ("failed", -1, message)        the engine thread ended (died or stopped) first (nothing else follows)

All Driver calls happen on the worker thread, so the driver needs no locking. A request counts
against max_pending from `submit` until its last sample is done or it is cancelled. `cancel` may
be called from any thread, at any time (before admission, while decoding, after the end): the worker
drops the request's queued and decoding samples (`Driver.cancel`), frees their slots for the next
admission and sends no further event. When the engine thread ends (an exception, or `stop`), every
request it holds, queued or decoding, gets "failed" and is released; later submits raise Stopped.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
from typing import Callable

from prover_jax.sampling.driver import Driver, Request

log = logging.getLogger(__name__)


class Overloaded(Exception):
    """The worker already holds max_pending requests."""


class Stopped(RuntimeError):
    """The engine thread has ended (it died, or the worker was stopped): no request is served."""


@dataclasses.dataclass
class _Pending:
    request: Request
    on_event: Callable
    stream: bool
    left: int
    ticket: int | None = None  # the driver's, once admitted
    cancelled: bool = False
    sent: dict = dataclasses.field(default_factory=dict)  # sample -> tokens reported


class EngineWorker:
    def __init__(self, driver: Driver, max_pending: int = 64, idle_wait_s: float = 0.05):
        self.driver = driver
        self.max_pending = int(max_pending)
        self.idle_wait_s = idle_wait_s
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._cancels: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pending = 0
        self._live: dict[int, _Pending] = {}
        self._stop = threading.Event()
        self._ended = False  # set (under the lock) when the engine thread ends
        self._thread = threading.Thread(target=self._loop, name="prover-serve-engine", daemon=True)
        self.error: BaseException | None = None

    @property
    def pending(self) -> int:
        return self._pending

    def start(self) -> "EngineWorker":
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def submit(self, request: Request, on_event: Callable, stream: bool = False) -> _Pending:
        """Queues `request`; the returned handle is what `cancel` takes."""
        p = _Pending(request, on_event, stream, request.num_samples)
        with self._lock:  # queued under the lock: the thread's end (`_fail_all`) sees every queued request
            if self._ended:
                raise Stopped(self.stopped_reason())
            if self._pending >= self.max_pending:
                raise Overloaded(f"{self._pending} requests in flight (at most {self.max_pending})")
            self._pending += 1
            self._inbox.put(p)
        return p

    def stopped_reason(self) -> str:
        """Why the engine serves nothing more (the error that killed its thread, or a stop)."""
        if self.error is not None:
            return f"the engine stopped: its thread died ({self.error!r})"
        return "the engine stopped: the server is shutting down"

    def cancel(self, handle: _Pending) -> None:
        """Stops `handle`'s request (no-op once it has ended); takes effect on the worker thread."""
        handle.cancelled = True
        self._cancels.put(handle)

    def _release(self) -> None:
        with self._lock:
            self._pending -= 1

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self._admit(block=self.driver.idle)
                self._cancel()
                if self.driver.idle:
                    continue
                for f in self.driver.step():
                    p = self._live.get(f.ticket)
                    if p is None:
                        continue
                    self._emit(p, "done", f.sample, f.completion)
                    p.left -= 1
                    if p.left == 0:
                        del self._live[f.ticket]
                        self._release()
                self._stream()
        except BaseException as e:  # a dead engine thread: fail everything in flight
            log.exception("engine thread died")
            self.error = e
        finally:
            self._fail_all()

    def _fail_all(self) -> None:
        """Ends every request still held, decoding or queued ("failed"), and refuses later submits."""
        with self._lock:
            self._ended = True
        reason = self.stopped_reason()
        held = list(self._live.values())
        self._live.clear()
        while True:
            try:
                held.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        for p in held:
            self._release()
            if not p.cancelled:
                self._emit(p, "failed", -1, reason)

    def _admit(self, block: bool) -> None:
        while True:
            try:
                p = self._inbox.get(timeout=self.idle_wait_s) if block else self._inbox.get_nowait()
            except queue.Empty:
                return
            block = False
            if p.cancelled:  # cancelled before it reached the driver
                self._release()
                continue
            try:
                ticket = self.driver.submit(p.request)
            except ValueError as e:
                self._release()
                self._emit(p, "error", -1, str(e))
                continue
            except BaseException:
                self._inbox.put(p)  # still held: failed with the rest as the thread ends
                raise
            p.ticket = ticket
            self._live[ticket] = p
            self._emit(p, "accepted", -1, None)

    def _cancel(self) -> None:
        while True:
            try:
                p = self._cancels.get_nowait()
            except queue.Empty:
                return
            if p.ticket is not None and self._live.get(p.ticket) is p:
                self.driver.cancel(p.ticket)
                del self._live[p.ticket]
                self._release()

    def _stream(self) -> None:
        for ticket, sample, c in self.driver.partial():
            p = self._live.get(ticket)
            n = len(c.tokens)
            if p is not None and p.stream and n > p.sent.get(sample, 0):
                p.sent[sample] = n
                self._emit(p, "tokens", sample, (c.tokens[:n], c.logprobs[:n]))

    @staticmethod
    def _emit(p: _Pending, kind: str, sample: int, payload) -> None:
        try:
            p.on_event(kind, sample, payload)
        except Exception:  # a callback must not kill the engine thread
            log.exception("event callback failed")
