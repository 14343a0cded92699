"""The transport of the FAKE model servers, for tests only: a real threaded HTTP server on a free localhost port
whose every request is answered by a Python function, `answer(method, path, body) -> (status, body)` (a body of
bytes is sent as it is, anything else as JSON)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[str, str, Any], tuple[int, Any]]


class _JsonHandler(BaseHTTPRequestHandler):
    answer: Answer

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
        self._send(*self.answer("POST", self.path, body))

    def do_GET(self) -> None:  # noqa: N802
        self._send(*self.answer("GET", self.path, None))

    def _send(self, status: int, body: Any) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def serve_json(answer: Answer, protocol: str = "HTTP/1.0", port: int = 0) -> tuple[ThreadingHTTPServer, str]:
    """Start the server (on `port`, else a free one); returns it (call `shutdown()` when done) and its OpenAI-style
    base URL (`.../v1`)."""
    handler = type("Handler", (_JsonHandler,), {"answer": staticmethod(answer), "protocol_version": protocol})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"
