"""A deadline on a whole HTTP exchange with the model endpoint.

httpx's timeouts bound each read, not the reply: a server (or a proxy in front of it) that sends one byte every
second keeps every read within its timeout and holds the run for as long as it likes, in the headers or in the
body. The client made here fails the exchange once `seconds` have passed since the request went out, with the
timeout error httpx itself raises, so the openai client reports it as a timeout like any other. Two layers:

- every socket read and write of the client's connection pools gets at most the time left (a network backend
  wrapped around httpcore's, set on the pools of an ordinary httpx client, so environment proxies and CA settings
  still apply); this bounds a server that drips its headers;
- the response body is checked against the deadline chunk by chunk (public httpx hooks), which still bounds a
  dripping body should a later httpx build its pools differently.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpcore
import httpx

_STARTED = "pinpoint_started"
_current = threading.local()  # the deadline of the exchange this thread is in (httpx's sync client: one thread)


def deadline_client(seconds: float) -> httpx.Client:
    """An httpx client whose every exchange (headers and body) must end within `seconds`."""

    def on_request(request: httpx.Request) -> None:
        request.extensions[_STARTED] = time.monotonic()
        _current.deadline = request.extensions[_STARTED] + seconds

    def on_response(response: httpx.Response) -> None:
        started = response.request.extensions.get(_STARTED, time.monotonic())
        stream = _DeadlineStream(response.stream, started + seconds, seconds, response.request)
        stream.check()  # the headers alone may have taken too long
        response.stream = stream

    client = httpx.Client(timeout=seconds, follow_redirects=True,
                          event_hooks={"request": [on_request], "response": [on_response]})
    for transport in [client._transport, *client._mounts.values()]:  # private, hence the getattr guards
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is not None:
            pool._network_backend = _DeadlineBackend(backend)
    return client


def _time_left(timeout: float | None) -> float | None:
    """`timeout`, cut to what is left of this thread's exchange; ReadTimeout once nothing is."""
    deadline = getattr(_current, "deadline", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise httpcore.ReadTimeout("the reply took longer than the whole exchange may")
    return left if timeout is None else min(timeout, left)


class _DeadlineNetworkStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self.inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, _time_left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, _time_left(timeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineNetworkStream(self.inner.start_tls(ssl_context, server_hostname, _time_left(timeout)))

    def get_extra_info(self, info: str):
        return self.inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self.inner = inner

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options=None) -> httpcore.NetworkStream:
        return _DeadlineNetworkStream(self.inner.connect_tcp(host, port, _time_left(timeout), local_address,
                                                             socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options=None) -> httpcore.NetworkStream:
        return _DeadlineNetworkStream(self.inner.connect_unix_socket(path, _time_left(timeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


class _DeadlineStream(httpx.SyncByteStream):
    """A response body that raises httpx.ReadTimeout when a chunk arrives after the deadline."""

    def __init__(self, stream, deadline: float, seconds: float, request: httpx.Request) -> None:
        self.stream, self.deadline, self.seconds, self.request = stream, deadline, seconds, request

    def check(self) -> None:
        if time.monotonic() > self.deadline:
            self.close()
            raise httpx.ReadTimeout(f"the reply took longer than {self.seconds:g}s in all", request=self.request)

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.stream:
            self.check()
            yield chunk

    def close(self) -> None:
        close = getattr(self.stream, "close", None)
        if close is not None:
            close()
