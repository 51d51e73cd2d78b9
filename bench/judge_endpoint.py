"""A scripted OpenAI-compatible judge endpoint on localhost for bench/rl_step.py's prover_openai variant."""

from __future__ import annotations

import http.server
import json
import re
import threading
import time


class ScriptedJudge(http.server.BaseHTTPRequestHandler):
    """Chat completions: after `latency` seconds, a propose_segment call for the last non-terminal
    turn of the successful run (read from the prompt)."""

    latency = 0.5
    calls = 0

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        time.sleep(self.latency)
        type(self).calls += 1
        text = " ".join(str(m.get("content") or "") for m in body["messages"])
        m = re.search(r"SUCCESSFUL attempt \(turns 0\.\.(\d+)\)", text)
        last = int(m.group(1)) if m else 1
        args = {"start_turn": max(last - 1, 0), "end_turn": max(last - 1, 0), "rationale": "scripted",
                "failure_mode": "scripted"}
        reply = {"id": "x", "object": "chat.completion", "created": 0, "model": body.get("model", "m"),
                 "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                     "role": "assistant", "content": "", "tool_calls": [{
                         "id": "c0", "type": "function",
                         "function": {"name": "propose_segment", "arguments": json.dumps(args)}}]}}],
                 "usage": {"prompt_tokens": 500, "completion_tokens": 20, "total_tokens": 520}}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def start_endpoint(latency: float) -> tuple[http.server.ThreadingHTTPServer, str]:
    ScriptedJudge.latency = latency
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ScriptedJudge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"
