"""prover-serve: an OpenAI-compatible chat-completions server over the sampling engine and driver.

    prover-serve --model=CKPT --port=8000 --max_concurrent_decodes=8

Files: protocol (request validation, response shapes, the OpenAI error shape), tools (Qwen
`<tool_call>` blocks -> OpenAI tool_calls), worker (the thread that owns the Driver, bounded queue),
chat (prompt rendering, one request end to end), app (FastAPI routes), service (build_service: checkpoint
-> running ChatService; ServerThread), beside (the judge served in the training process), cli (the
console script: flags and main only).
"""
