"""prover-serve: OpenAI-compatible chat completions over a Qwen3.5 checkpoint.

    prover-serve --model=CKPT [--host=127.0.0.1 --port=8000 --max_concurrent_decodes=8
                 --max_target_length=4096 --max_prefill_length=512 --max_pending=64
                 --max_string_chars=200 --tensor=1 --api_key=KEY --max_body_bytes=4194304
                 --max_messages=1024 --max_tool_bytes=262144]

CKPT is an HF folder (config.json, *.safetensors, tokenizer files with a chat template) or a prover
(orbax) checkpoint folder with tokenizer files. Clients use any OpenAI SDK with
base_url=http://HOST:PORT/v1 and model=--served_model_name (default: the folder's name).
Constrained output (forced tool calls, json_schema responses) is compact JSON whose free-text strings
end after --max_string_chars characters unless the schema sets maxLength (see serving.grammar).
Access: with --api_key (or $PROVER_SERVE_API_KEY) every route wants `Authorization: Bearer KEY` (401
otherwise); a --host other than loopback is refused without a key unless --allow_unauthenticated.
Bad flags exit with status 2, an unloadable model with status 1, one line on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

from prover_jax.serving.guard import DEFAULT_MAX_BODY_BYTES, check_bind
from prover_jax.serving.tools import FORMATS as TOOL_CALL_FORMATS

DEFAULT_SLOTS = 8
KEY_ENV = "PROVER_SERVE_API_KEY"
DEFAULT_MAX_MESSAGES = 1024
DEFAULT_MAX_TOOL_BYTES = 256 << 10


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="prover-serve", description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="HF or prover checkpoint folder (with tokenizer files)")
    p.add_argument("--served_model_name", default=None, help="model id clients send (default: folder name)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max_concurrent_decodes", type=int, default=DEFAULT_SLOTS, help="decode slots")
    p.add_argument("--max_target_length", type=int, default=4096, help="prompt + completion tokens per sample")
    p.add_argument("--max_prefill_length", type=int, default=512, help="longest prompt piece prefilled at once")
    p.add_argument("--max_pending", type=int, default=64,
                   help="requests queued or running; more get 503 with Retry-After")
    p.add_argument("--default_max_tokens", type=int, default=1024, help="completion budget when a request "
                   "gives no max_tokens (capped by what fits)")
    p.add_argument("--max_stop_strings", type=int, default=8, help="distinct stop strings over the server's life")
    p.add_argument("--max_n", type=int, default=16, help="largest n (samples per request)")
    p.add_argument("--tool_call_format", choices=TOOL_CALL_FORMATS, default="auto",
                   help="format forced tool calls are constrained to (auto: from the chat template)")
    p.add_argument("--max_string_chars", type=int, default=200,
                   help="maxLength of strings a tool / json_schema leaves unbounded in constrained output (0: none)")
    p.add_argument("--steps_per_call", type=int, default=1, help="decode steps per jitted call")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="bfloat16")
    p.add_argument("--tensor", type=int, default=1, help="tensor-parallel degree over this host's devices "
                   "(the rest split the slots; 0: all devices tensor parallel)")
    p.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=False,
                   help="compile every prefill / insert / decode shape before serving")
    p.add_argument("--api_key", default=os.environ.get(KEY_ENV) or None,
                   help=f"clients must send 'Authorization: Bearer KEY' (default: ${KEY_ENV}; none: no auth)")
    p.add_argument("--allow_unauthenticated", action="store_true",
                   help="serve a non-loopback --host without --api_key (anyone who reaches it can use it)")
    p.add_argument("--max_body_bytes", type=int, default=DEFAULT_MAX_BODY_BYTES, help="largest request body")
    p.add_argument("--max_messages", type=int, default=DEFAULT_MAX_MESSAGES, help="messages per request")
    p.add_argument("--max_tool_bytes", type=int, default=DEFAULT_MAX_TOOL_BYTES,
                   help="bytes of a request's tools JSON (their schemas)")
    p.add_argument("--log_level", default="warning")
    return p


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
    from transformers import AutoTokenizer

    from prover_jax.models import qwen3_5
    from prover_jax.sampling.cli import eos_ids, load_model
    from prover_jax.sampling.driver import Driver
    from prover_jax.sampling.engine import Engine
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
    tokenizer = AutoTokenizer.from_pretrained(model)
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"the tokenizer in {model} has no chat template")
    cfg = qwen3_5.Qwen3_5Config.from_pretrained(model)
    eos = set(eos_ids(model, cfg))
    if tokenizer.eos_token_id is not None:
        eos.add(int(tokenizer.eos_token_id))
    net = load_model(model, jnp.dtype(dtype), mesh=mesh)
    engine = Engine(net, max_concurrent_decodes=max_concurrent_decodes,
                    max_prefill_length=min(max_prefill_length, max_target_length),
                    max_target_length=max_target_length, max_stop_strings=max_stop_strings, mesh=mesh)
    driver = Driver(engine, eos_ids=sorted(eos), tokenizer=tokenizer, steps_per_call=steps_per_call)
    if warmup:
        driver.warmup()
    try:
        from prover_jax.serving.grammar import Grammars

        grammars = Grammars(tokenizer, cfg.vocab_size, eos_ids=eos, max_string_chars=max_string_chars,
                            tool_call_format=tool_call_format)
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
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        check_bind(args.host, args.api_key, args.allow_unauthenticated)
        if args.max_body_bytes < 1:
            raise ValueError(f"--max_body_bytes must be >= 1, got {args.max_body_bytes}")
    except ValueError as e:
        print(f"prover-serve: error: {e}", file=sys.stderr)
        return 2
    try:
        from prover_jax.serving.beside import local_mesh

        service = build_service(
            args.model, served_model_name=args.served_model_name, max_concurrent_decodes=args.max_concurrent_decodes,
            max_target_length=args.max_target_length, max_prefill_length=args.max_prefill_length,
            max_pending=args.max_pending, default_max_tokens=args.default_max_tokens,
            max_stop_strings=args.max_stop_strings, max_n=args.max_n, steps_per_call=args.steps_per_call,
            dtype=args.dtype, warmup=args.warmup, max_string_chars=args.max_string_chars,
            tool_call_format=args.tool_call_format,
            max_messages=args.max_messages, max_tool_bytes=args.max_tool_bytes, mesh=local_mesh(args.tensor))
    except (OSError, ValueError) as e:
        print(f"prover-serve: error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # e.g. CliError of the shared loader
        print(f"prover-serve: error: {e}", file=sys.stderr)
        return getattr(e, "code", 1)
    import uvicorn

    from prover_jax.serving.app import create_app

    uvicorn.run(create_app(service, api_key=args.api_key, max_body_bytes=args.max_body_bytes),
                host=args.host, port=args.port, log_level=args.log_level)
    service.worker.stop()
    return 0


def run():
    sys.exit(main())


if __name__ == "__main__":
    run()
