"""A scripted LLM endpoint for tests: speaks the OpenAI chat-completions and the Anthropic messages
wire formats over real HTTP on 127.0.0.1, with replies taken from a script.

Script entries (dicts): {"text": str} a normal reply; {"status": 429, "retry_after": 0} a rate
limit; {"delay": s, "text": ...} a reply that arrives after `delay` seconds (client timeouts);
{"raw": bytes} a malformed HTTP body. Past the end of the script, `default` is served. The
server is bounded: it answers at most `max_requests` requests (then 503) and shuts itself down
after `lifetime_s` seconds even if a test forgets to stop it.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ScriptedLLMServer:
    def __init__(self, script: list[dict[str, Any]], *, default: dict[str, Any] | None = None,
                 max_requests: int = 40, lifetime_s: float = 120.0):
        self.script = list(script)
        self.default = default or {"text": "no decision"}
        self.max_requests = max_requests
        self.lifetime_s = lifetime_s
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._timer: threading.Timer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def _next(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            n = len(self.requests)
            self.requests.append({"path": path, "body": body, "time": time.time()})
            if n >= self.max_requests:
                return n, {"status": 503, "text": "request budget of the test server exhausted"}
            return n, (self.script[n] if n < len(self.script) else self.default)

    def start(self) -> "ScriptedLLMServer":
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None):
                self.send_response(status)
                self.send_header("content-type", "application/json")
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                try:
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                length = int(self.headers.get("content-length", 0))
                raw = self.rfile.read(length) if length else b"{}"
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {}
                n, entry = outer._next(self.path, body)
                if entry.get("delay"):
                    time.sleep(entry["delay"])
                status = int(entry.get("status", 200))
                anthropic = self.path.rstrip("/").endswith("/messages")
                if "raw" in entry:
                    self._send(status, entry["raw"])
                    return
                if status != 200:
                    err = ({"type": "error", "error": {"type": "rate_limit_error" if status == 429
                                                       else "api_error",
                                                       "message": entry.get("text", "error")}}
                           if anthropic else {"error": {"message": entry.get("text", "error"),
                                                        "type": "rate_limit_exceeded"
                                                        if status == 429 else "server_error"}})
                    headers = {"retry-after": str(entry.get("retry_after", 0))} \
                        if status == 429 else {}
                    self._send(status, json.dumps(err).encode(), headers)
                    return
                text = entry.get("text", "")
                model = body.get("model", "scripted")
                if anthropic:
                    reply = {"id": f"msg_{n}", "type": "message", "role": "assistant",
                             "model": model, "content": [{"type": "text", "text": text}],
                             "stop_reason": "end_turn", "stop_sequence": None,
                             "usage": {"input_tokens": 10, "output_tokens": 10}}
                else:
                    reply = {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0,
                             "model": model,
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": text}}],
                             "usage": {"prompt_tokens": 10, "completion_tokens": 10,
                                       "total_tokens": 20}}
                self._send(200, json.dumps(reply).encode())

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self._timer = threading.Timer(self.lifetime_s, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._server is not None:
            server, self._server = self._server, None
            server.shutdown()
            server.server_close()

    def __enter__(self) -> "ScriptedLLMServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def prompts(self) -> list[str]:
        """The user prompts received, in order (either wire format)."""
        out = []
        for r in self.requests:
            msgs = r["body"].get("messages", [])
            user = [m.get("content") for m in msgs if m.get("role") == "user"]
            if user:
                content = user[-1]
                if isinstance(content, list):
                    content = "".join(c.get("text", "") for c in content if isinstance(c, dict))
                out.append(content)
        return out
