"""FAKE scripted LLM server, for tests only: a stand-in for a frontier model, never a source of reported figures.

A real threaded HTTP server on localhost that speaks the OpenAI chat-completions protocol (non-streaming
`POST /v1/chat/completions`, `GET /v1/models`) and replays a script, one step per request:

    with FakeScriptedLLMServer([tool_call("view", {"path": "a.py"}), http_error(500), text("done")]) as fake:
        client = LLMClient(LLMConfig(base_url=fake.base_url, model="fake"))

A step is a `Step` (built with the helpers below), a plain string (a text reply), or a callable
`(request_json) -> step` so a test can answer what the agent actually sent. Every request body is recorded in
`requests` for assertions. Replies carry usage counts and, when asked for, per-token logprobs with token ids, so
the code paths that use them run too.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

StepKind = Literal["text", "tool_calls", "delay", "http_error", "empty", "garbage", "drip"]


@dataclass
class Step:
    """One scripted reply. Use the helper functions rather than building these by hand."""

    kind: StepKind
    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    message: str = ""
    seconds: float = 0.0
    then: Step | None = None
    finish_reason: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


ScriptItem = Step | str | Callable[[dict[str, Any]], "Step | str"]


def text(content: str, finish_reason: str = "stop") -> Step:
    """A plain assistant message."""
    return Step("text", content=content, finish_reason=finish_reason)


def tool_call(name: str, arguments: dict[str, Any] | str, content: str = "", call_id: str | None = None) -> Step:
    """A native tool call; a str `arguments` is sent verbatim (use it for malformed JSON)."""
    return tool_calls([(name, arguments)], content=content, call_ids=[call_id] if call_id else None)


def tool_calls(calls: list[tuple[str, dict[str, Any] | str]], content: str = "",
               call_ids: list[str] | None = None) -> Step:
    """Several native tool calls in one reply."""
    entries = []
    for index, (name, arguments) in enumerate(calls):
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
        call_id = (call_ids or [None] * len(calls))[index] or f"call_{uuid.uuid4().hex[:12]}"
        entries.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}})
    return Step("tool_calls", content=content, tool_calls=entries, finish_reason="tool_calls")


def text_action(name: str, arguments: dict[str, Any]) -> Step:
    """A reply in the text action format (for clients in tool_mode='text')."""
    return text("```json\n" + json.dumps({"tool": name, "arguments": arguments}) + "\n```")


def malformed_tool_call(name: str, raw_arguments: str = '{"path": "a.py",') -> Step:
    """A native tool call whose arguments are not valid JSON."""
    return tool_call(name, raw_arguments)


def delay(seconds: float, then: Step | str | None = None) -> Step:
    """Wait before answering (longer than the client's timeout to provoke one), then answer `then`."""
    return Step("delay", seconds=seconds, then=_as_step(then) if then is not None else text(""))


def drip(seconds_per_byte: float, then: Step | str | None = None, headers: bool = False) -> Step:
    """Answer `then`, but send its body (with `headers`, its status line and headers too) one byte every
    `seconds_per_byte` (a stalled proxy, a dying server): each read gets a byte well within any read timeout, so
    only a deadline on the whole reply stops the wait."""
    return Step("drip", seconds=seconds_per_byte, then=_as_step(then) if then is not None else text(""),
                message="headers" if headers else "")


def http_error(status: int, message: str = "scripted failure", retry_after: float | None = None) -> Step:
    """An HTTP error with an OpenAI-shaped error body (500, 429, 400 …)."""
    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
    return Step("http_error", status=status, message=message, headers=headers)


def empty_reply() -> Step:
    """HTTP 200 with `"choices": []`."""
    return Step("empty")


def garbage_reply(body: str = "<html>502 Bad Gateway</html>") -> Step:
    """HTTP 200 whose body is not JSON."""
    return Step("garbage", content=body)


def _as_step(item: Step | str) -> Step:
    return text(item) if isinstance(item, str) else item


class FakeScriptedLLMServer:
    """FAKE OpenAI-compatible endpoint replaying `steps`; see the module docstring.

    When the script runs out it answers `default` if given, else HTTP 500 naming the exhausted script (so a test
    that under-scripts fails loudly rather than hanging).
    """

    def __init__(self, steps: list[ScriptItem] | None = None, default: ScriptItem | None = None,
                 model: str = "fake-scripted-model"):
        self._steps: list[ScriptItem] = list(steps or [])
        self._default = default
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------------------------

    def start(self) -> FakeScriptedLLMServer:
        if self._httpd is not None:
            return self
        handler = _handler_for(self)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-llm-server", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; safe to call twice. Requests still sleeping in a `delay` step are woken and dropped."""
        self._closing.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeScriptedLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def base_url(self) -> str:
        """The URL to put in LLMConfig.base_url (ends in /v1)."""
        if self._httpd is None:
            raise RuntimeError("FakeScriptedLLMServer is not running; use it as a context manager or call start()")
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    # -- script -------------------------------------------------------------------------------------------------

    def add(self, *steps: ScriptItem) -> None:
        """Append steps to the script (e.g. after inspecting what has been asked so far)."""
        with self._lock:
            self._steps.extend(steps)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._steps)

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """Recorded chat-completion request bodies (what the agent sent), in order."""
        return [r for r in self.requests if "messages" in r]

    def _next_step(self, request: dict[str, Any]) -> Step:
        with self._lock:
            self.requests.append(request)
            item = self._steps.pop(0) if self._steps else self._default
            index = len(self.chat_requests)
        if item is None:
            return http_error(500, f"FakeScriptedLLMServer: script exhausted at request {index}")
        if callable(item) and not isinstance(item, Step):
            item = item(request)
        return _as_step(item)

    def _reply(self, step: Step, request: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        if step.kind == "delay":
            if self._closing.wait(step.seconds):
                return 503, {}, b'{"error": {"message": "server closing"}}'
            return self._reply(step.then or text(""), request)
        if step.kind == "http_error":
            body = {"error": {"message": step.message, "type": "server_error" if step.status >= 500 else
                              "invalid_request_error", "code": step.status}}
            return step.status, step.headers, json.dumps(body).encode()
        if step.kind == "garbage":
            return 200, {}, step.content.encode()
        if step.kind == "empty":
            return 200, {}, json.dumps(self._envelope([], request, 0)).encode()
        message: dict[str, Any] = {"role": "assistant", "content": step.content}
        if step.tool_calls:
            message["tool_calls"] = step.tool_calls
        completion_text = step.content + "".join(c["function"]["arguments"] for c in step.tool_calls)
        tokens = _fake_tokens(completion_text)
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": step.finish_reason or "stop"}
        if request.get("logprobs"):
            choice["logprobs"] = {"content": [
                {"id": _fake_token_id(tok), "token": tok, "logprob": -0.1 * (i % 5), "bytes": list(tok.encode())}
                for i, tok in enumerate(tokens)
            ]}
        return 200, {}, json.dumps(self._envelope([choice], request, len(tokens))).encode()

    def _envelope(self, choices: list[dict], request: dict[str, Any], completion_tokens: int) -> dict[str, Any]:
        prompt_tokens = len(_fake_tokens(json.dumps(request.get("messages", []))))
        return {
            "id": f"chatcmpl-fake-{uuid.uuid4().hex[:8]}", "object": "chat.completion", "created": int(time.time()),
            "model": self.model, "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }


def _fake_tokens(text_: str) -> list[str]:
    """Whitespace-ish tokenization: deterministic and good enough for counts and logprob alignment tests."""
    tokens, current = [], ""
    for ch in text_:
        if ch.isspace() and current:
            tokens.append(current)
            current = ch
        else:
            current += ch
    if current:
        tokens.append(current)
    return tokens


def _fake_token_id(token: str) -> int:
    return sum(token.encode()) % 49152


def _handler_for(server: FakeScriptedLLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - keep test output quiet
            return

        def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout); nothing to tell it

        def do_GET(self) -> None:  # noqa: N802 - http.server naming
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                body = {"object": "list", "data": [{"id": server.model, "object": "model", "owned_by": "fake"}]}
                self._send(200, {}, json.dumps(body).encode())
            elif self.path.rstrip("/") in ("/health", "/v1/health"):
                self._send(200, {}, b'{"status": "ok"}')
            else:
                self._send(404, {}, b'{"error": {"message": "not found"}}')

        def do_POST(self) -> None:  # noqa: N802 - http.server naming
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                self._send(404, {}, b'{"error": {"message": "only /v1/chat/completions is scripted"}}')
                return
            try:
                request = json.loads(raw)
            except json.JSONDecodeError:
                self._send(400, {}, b'{"error": {"message": "request body is not JSON"}}')
                return
            with server._lock:
                server.headers.append({k.lower(): v for k, v in self.headers.items()})
            step = server._next_step(request)
            if step.kind == "drip":
                self._drip(*server._reply(step.then or text(""), request), step.seconds, step.message == "headers")
            else:
                self._send(*server._reply(step, request))

        def _drip(self, status: int, headers: dict[str, str], body: bytes, seconds: float, head_too: bool) -> None:
            head = (f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n").encode()
            try:
                if not head_too:
                    self.wfile.write(head)
                for byte in head + body if head_too else body:
                    if server._closing.wait(seconds):
                        return
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up, as it should

    return Handler
