"""Waiting for a model server to come back: a restarted vLLM takes minutes to load its model, so an episode that
met it down is run again once the server answers, instead of being masked seconds after the restart began."""

from __future__ import annotations

import time

import httpx

#: how long a rollout waits for a model server by default: a vLLM restart (load and warm-up) took 106-133 s here
SERVER_WAIT_S = 180.0


def server_root(base_url: str) -> str:
    """`http://host:port` of an OpenAI base URL (`http://host:port/v1`)."""
    return base_url.rstrip("/").removesuffix("/v1")


def healthy(base_url: str, timeout_s: float = 5.0) -> bool:
    """Whether the server answers: `GET /health` 200 (vLLM, SGLang, llama.cpp once its model is loaded), or, for a
    server without that endpoint, `GET /v1/models` 200."""
    root = server_root(base_url)
    try:
        with httpx.Client(timeout=timeout_s) as client:
            reply = client.get(f"{root}/health")
            if reply.status_code == 404:
                reply = client.get(f"{root}/v1/models")
            return reply.status_code == 200
    except httpx.HTTPError:
        return False


def wait_for_server(base_urls: str, budget_s: float, poll_s: float = 2.0) -> float:
    """Poll until one of the servers (comma-separated URLs) is healthy or `budget_s` has passed; the seconds
    waited."""
    urls = [u.strip() for u in base_urls.split(",") if u.strip()]
    started = time.monotonic()
    while not any(healthy(url) for url in urls) and time.monotonic() - started < budget_s:
        time.sleep(poll_s)
    return time.monotonic() - started
