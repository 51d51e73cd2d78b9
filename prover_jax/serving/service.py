"""The prover-serve service as a library: `build_service` loads a checkpoint into a started engine worker
behind a `ChatService`; `ServerThread` serves an app with uvicorn in a daemon thread.

    service = build_service(folder, served_model_name="m", mesh=local_mesh(1))
    srv = ServerThread(create_app(service)).start()     # srv.base_url: http://127.0.0.1:PORT/v1
    ...
    srv.stop(); service.worker.stop()

Used by `prover-serve` (serving.cli), the judge served beside training (serving.beside), tests and
benchmarks.
"""

from __future__ import annotations

import os
import threading
import time

DEFAULT_SLOTS = 8
DEFAULT_MAX_MESSAGES = 1024
DEFAULT_MAX_TOOL_BYTES = 256 << 10


def build_service(model: str, *, served_model_name: str | None = None, max_concurrent_decodes: int = DEFAULT_SLOTS,
                  max_target_length: int = 4096, max_prefill_length: int = 512, max_pending: int = 64,
                  default_max_tokens: int = 1024, max_stop_strings: int = 8, max_n: int = 16,
                  steps_per_call: int = 1, dtype: str = "bfloat16", warmup: bool = False,
                  max_string_chars: int = 200, tool_call_format: str = "auto", max_messages: int = DEFAULT_MAX_MESSAGES,
                  max_tool_bytes: int = DEFAULT_MAX_TOOL_BYTES, mesh=None):
    """(ChatService with a started EngineWorker). ValueError / OSError for a bad model or settings.
    `mesh`: the engine's (data, fsdp=1, tensor) mesh (weights split over tensor, slots over data);
    None: one device."""
    import jax.numpy as jnp

    from prover_jax.sampling.driver import Driver
    from prover_jax.sampling.engine import Engine
    from prover_jax.sampling.loader import load_policy
    from prover_jax.serving.chat import ChatService
    from prover_jax.serving.worker import EngineWorker

    if not os.path.isdir(model):
        raise OSError(f"--model: no such folder {model}")
    for name, v in (("max_concurrent_decodes", max_concurrent_decodes), ("max_target_length", max_target_length),
                    ("max_prefill_length", max_prefill_length), ("max_pending", max_pending),
                    ("default_max_tokens", default_max_tokens), ("max_n", max_n), ("max_messages", max_messages),
                    ("max_tool_bytes", max_tool_bytes)):
        if v < 1:
            raise ValueError(f"--{name} must be >= 1, got {v}")
    if max_string_chars < 0:
        raise ValueError(f"--max_string_chars must be >= 0 (0: unbounded), got {max_string_chars}")
    net, tokenizer, eos = load_policy(model, jnp.dtype(dtype), mesh=mesh)
    if tokenizer is None:
        raise OSError(f"--model: {model} has no loadable tokenizer (tokenizer.json / tokenizer_config.json)")
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"the tokenizer in {model} has no chat template")
    engine = Engine(net, max_concurrent_decodes=max_concurrent_decodes,
                    max_prefill_length=min(max_prefill_length, max_target_length),
                    max_target_length=max_target_length, max_stop_strings=max_stop_strings, mesh=mesh)
    driver = Driver(engine, eos_ids=eos, tokenizer=tokenizer, steps_per_call=steps_per_call)
    if warmup:
        driver.warmup()
    try:
        from prover_jax.serving.grammar import Grammars

        grammars = Grammars(tokenizer, net.config.vocab_size, eos_ids=set(eos),
                            max_string_chars=max_string_chars, tool_call_format=tool_call_format)
    except ImportError:  # no llguidance: constrained requests get a 400
        grammars = None
    worker = EngineWorker(driver, max_pending=max_pending).start()
    name = served_model_name or os.path.basename(os.path.normpath(model))
    return ChatService(worker, tokenizer, name, max_target_length, default_max_tokens=default_max_tokens,
                       max_stop_strings=max_stop_strings, max_n=max_n, grammars=grammars,
                       max_messages=max_messages, max_tool_bytes=max_tool_bytes)


class ServerThread:
    """uvicorn serving `app` on host:port in a daemon thread (tests, benchmarks)."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        import uvicorn

        if port == 0:
            port = free_port(host)
        self.host, self.port = host, port
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level,
                                                    timeout_keep_alive=30))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self, timeout: float = 30.0) -> "ServerThread":
        self.thread.start()
        t0 = time.time()
        while not self.server.started:
            if time.time() - t0 > timeout or not self.thread.is_alive():
                raise RuntimeError(f"uvicorn did not start on {self.host}:{self.port}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that was free a moment ago (the OS's pick)."""
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
