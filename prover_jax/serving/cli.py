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

from prover_jax.serving.beside import local_mesh
from prover_jax.serving.guard import DEFAULT_MAX_BODY_BYTES, check_bind
from prover_jax.serving.service import DEFAULT_MAX_MESSAGES, DEFAULT_MAX_TOOL_BYTES, DEFAULT_SLOTS, build_service
from prover_jax.serving.tools import FORMATS as TOOL_CALL_FORMATS

KEY_ENV = "PROVER_SERVE_API_KEY"


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
