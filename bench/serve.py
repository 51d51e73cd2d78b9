"""prover-serve throughput against the same requests driven straight through its engine's Driver.

    python bench/serve.py [--clients=16 --requests=64 --max_tokens=128 --slots=16 --dtype=float32]
    python bench/serve.py --quick     # the tiny test checkpoint, 16 requests of 16 tokens (a smoke run;
                                      # --smoke is the same)

Model: bench-small with random weights (`sampler.build`, the sampler benchmark's builder) with the
byte-level test tokenizer and Qwen-style chat template of tests/helpers/serving.py; --quick uses
that file's tiny 2-layer checkpoint. One process: prover-serve (`build_service` + uvicorn in a
thread), `--clients` threads each with its own `openai` client sending chat completions (greedy,
max_tokens each, distinct user messages) until `--requests` are done; then the server's worker is
stopped and the same rendered prompts go to the same Driver (same engine, weights and compiled
functions) in one `Driver.run`. The clients are built before the clock starts. Requests reach the
server a few at a time, so its prefills meet row counts (1, 2, 4, ...) that one Driver.run never
does: untimed server rounds run until one compiles nothing (at most --warm_rounds), the Driver runs
once untimed, then --repeats timed runs each (the best is reported, with the XLA compilations that
happened during the timed server runs, and every repeat's seconds: the spread).
Prints JSON lines: a header (with the 1-minute load average at the start), then one row with
requests/s and generated tokens/s of both and server_overhead = server seconds / driver seconds (1.0:
the HTTP layer costs nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))  # the tests' `helpers` package


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", "--smoke", action="store_true", help="tiny model, few short requests (a smoke run)")
    p.add_argument("--clients", type=int, default=16, help="concurrent openai clients (threads)")
    p.add_argument("--requests", type=int, default=None, help="requests per timed run (default 64; quick 16)")
    p.add_argument("--max_tokens", type=int, default=None, help="tokens per completion (default 128; quick 16)")
    p.add_argument("--slots", type=int, default=16, help="the server's --max_concurrent_decodes")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--repeats", type=int, default=2, help="timed runs per side (the best is reported)")
    p.add_argument("--warm_rounds", type=int, default=6, help="most untimed server rounds (compilation)")
    return p


def build_model(folder: str, quick: bool) -> str:
    from helpers import serving as SF

    if quick:
        return SF.make_serving_checkpoint(folder)
    from sampler import build

    build(folder, model="bench-small", bf16=False)  # saved as an HF folder
    SF.save_tokenizer(folder)  # its ids (< 264) fit bench-small's vocabulary
    return folder


def messages(i: int) -> list[dict]:
    return [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": f"Request {i}: describe step {i % 7} of the plan in a few words."}]


def run_server(clients: list, model: str, n: int, max_tokens: int) -> tuple[float, int]:
    """(seconds, completion tokens) of n greedy requests sent by one thread per openai client."""
    todo, lock, tokens, errors = list(range(n)), threading.Lock(), [0], []

    def client_loop(c):
        try:
            while True:
                with lock:
                    if not todo:
                        return
                    i = todo.pop()
                r = c.chat.completions.create(model=model, messages=messages(i), temperature=0,
                                              max_tokens=max_tokens, seed=i)
                with lock:
                    tokens[0] += r.usage.completion_tokens
        except Exception as e:  # noqa: BLE001  (reported after the run)
            errors.append(e)

    threads = [threading.Thread(target=client_loop, args=(c,)) for c in clients]
    t0 = time.perf_counter()
    [t.start() for t in threads]
    [t.join() for t in threads]
    seconds = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} client(s) failed: {errors[0]!r}")
    return seconds, tokens[0]


def run_driver(driver, tokenizer, n: int, max_tokens: int) -> tuple[float, int]:
    """(seconds, completion tokens) of the same requests in one Driver.run."""
    from prover_jax.sampling import Request, SamplingParams

    reqs = []
    for i in range(n):
        text = tokenizer.apply_chat_template(messages(i), add_generation_prompt=True, tokenize=False)
        reqs.append(Request(tokenizer.encode(text, add_special_tokens=False), SamplingParams(temperature=0.0),
                            max_new_tokens=max_tokens, seed=i))
    t0 = time.perf_counter()
    out = driver.run(reqs)
    seconds = time.perf_counter() - t0
    return seconds, sum(len(c.tokens) for samples in out for c in samples)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    n = args.requests or (16 if args.quick else 64)
    max_tokens = args.max_tokens or (16 if args.quick else 128)
    import jax

    from prover_jax.serving.app import create_app
    from prover_jax.serving.service import ServerThread, build_service

    print(json.dumps({"bench": "serve", "model": "tiny" if args.quick else "bench-small",
                      "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                      "backend": jax.default_backend(), "jax": jax.__version__, "date": time.strftime("%Y-%m-%d"),
                      "clients": args.clients, "requests": n, "max_tokens": max_tokens, "slots": args.slots,
                      "dtype": args.dtype, "load": os.getloadavg()[0]}), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_model(tmp, args.quick)
        service = build_service(folder, served_model_name="bench", max_concurrent_decodes=args.slots,
                                max_target_length=512, max_prefill_length=256, max_pending=max(64, 2 * n),
                                dtype=args.dtype)
    import openai

    from prover_jax.training.metrics import CompileCounter

    compiles = CompileCounter()
    srv = ServerThread(create_app(service)).start()
    clients = [openai.OpenAI(base_url=srv.base_url, api_key="EMPTY", max_retries=0, timeout=600)
               for _ in range(args.clients)]
    try:
        for _ in range(args.warm_rounds):  # until a round meets no new prefill / insert shape
            compiles.take()
            run_server(clients, "bench", n, max_tokens)
            if compiles.take() == 0:
                break
        server_runs = [run_server(clients, "bench", n, max_tokens) for _ in range(args.repeats)]
        server_s, server_tokens = min(server_runs)
        server_compiles = compiles.take()
    finally:
        [c.close() for c in clients]
        srv.stop()
        service.worker.stop()
    driver = service.worker.driver  # the worker thread is gone: the driver is free to drive here
    run_driver(driver, service.tokenizer, n, max_tokens)
    driver_runs = [run_driver(driver, service.tokenizer, n, max_tokens) for _ in range(args.repeats)]
    driver_s, driver_tokens = min(driver_runs)
    row = {"case": "serve_vs_driver", "server_s": server_s, "server_req_s": n / server_s,
           "server_tok_s": server_tokens / server_s, "server_tokens": server_tokens,
           "driver_s": driver_s, "driver_req_s": n / driver_s, "driver_tok_s": driver_tokens / driver_s,
           "driver_tokens": driver_tokens, "server_overhead": server_s / driver_s,
           "server_compiles_timed": server_compiles,
           "server_s_each": [round(s, 3) for s, _ in server_runs], "driver_s_each": [round(s, 3) for s, _ in driver_runs]}
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
