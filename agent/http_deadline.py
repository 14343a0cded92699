"""A deadline on a whole HTTP exchange with the model endpoint.

httpx's timeouts bound each read, not the reply: a server (or a proxy in front of it) that sends one byte every
second keeps every read within its timeout and holds the run for as long as it likes. The client made here fails
the exchange once `seconds` have passed since the request went out, with the timeout error httpx itself raises, so
the openai client reports it as a timeout like any other. It is an ordinary httpx client otherwise (environment
proxies and CA settings still apply).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx

_STARTED = "pinpoint_started"


def deadline_client(seconds: float) -> httpx.Client:
    """An httpx client whose every exchange (headers and body) must end within `seconds`."""

    def on_request(request: httpx.Request) -> None:
        request.extensions[_STARTED] = time.monotonic()

    def on_response(response: httpx.Response) -> None:
        started = response.request.extensions.get(_STARTED, time.monotonic())
        stream = _DeadlineStream(response.stream, started + seconds, seconds, response.request)
        stream.check()  # the headers alone may have taken too long
        response.stream = stream

    return httpx.Client(timeout=seconds, follow_redirects=True,
                        event_hooks={"request": [on_request], "response": [on_response]})


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
