"""The recording gateway: an OpenAI-compatible server in front of a model server that records, per episode, the
token ids the model was fed and generated and their log-probabilities, so the agent needs no change to be trained.

    with RecordingGateway(embedded.base_url) as gw:
        client = LLMClient(dataclasses.replace(config, base_url=gw.episode_url("ep-1")))
        ...                                   # the agent runs as usual
        tokens = gw.pop("ep-1")               # EpisodeTokens: prompt_ids, response_ids, response_mask, ...

How one chat request becomes tokens. The gateway renders the messages with the server's own chat template. On an
episode's first call it tokenizes the whole rendering (that is the prompt). On a later call, when the rendering
starts with what the model saw last (the previous rendering plus the text it generated), only the new suffix is
tokenized (the observation: mask 0) and the server generates from the accumulated ids (previous prompt +
generated ids + suffix ids), so the model sees exactly the recorded tokens and never a re-tokenization of its own
output. The generated ids get mask 1 and their log-probabilities. When the history does not extend what the model
saw (a client rewrote or dropped messages, or asked the same thing again), a new `TokenSegment` starts.

The end of a turn: llama.cpp returns the EOS it sampled (SmolLM2's `<|im_end|>`) as the last generated id, with its
log-probability and mask 1; the next rendering writes it as text, and the gateway drops it from the suffix so it
is not counted twice. When the model ended its turn with another end-of-generation token than the one its template
writes (SmolLM2 often samples `<|endoftext|>`), that token is taken back from the record and from the context of the
next call, and the template's end-of-turn comes in the suffix (mask 0): the record always equals the chat template
applied to the messages, one end-of-turn per turn. An end of turn the model did not generate (a reply cut at max_tokens or by a stop word, or a
server that does not return its EOS) is written by the template into the next suffix: mask 0. A stop word is not
in the reply's content; llama.cpp's token that completed it is not recorded (nor sent again), vLLM's is.

Upstream failures (5xx, timeouts, garbage) answer the client with an OpenAI-style error of the matching status and
leave the episode's record as it was: a call is recorded at once, after the server answered.

Several servers (`RecordingGateway("http://a:8000/v1,http://b:8000/v1")` or a list): each episode is placed, at
its first call, on the live server with the fewest episodes, and all its calls stay there (sticky: the server's
prefix cache holds its context). A server that is unreachable or times out is marked down for `revive_s`: the
episodes placed on it fail (the client gets the 502/504, a rollout makes it an infrastructure failure, reward None)
and new episodes go elsewhere; after `revive_s` it is tried again for new episodes (a restarted server comes back).

`backend="openai"` (a server that gives no ids) passes each chat request through; with a `tokenizer` (a local
Hugging Face tokenizer, or a llama.cpp server's such as the embedded model's) the calls are recorded RETOKENIZED:
the same plan as above on the tokenizer's rendering and ids, the reply's text tokenized again, logprobs 0.0
(`retokenized` is True). Without one, nothing is recorded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote, unquote

from pinpoint.rl.tokens import EpisodeRecorder, EpisodeTokens
from pinpoint.rl.upstream import (
    Backend,
    GatewayError,
    Generation,
    SamplingParams,
    ServerDown,
    Timer,
    make_backend,
    make_tokenizer,
)

log = logging.getLogger(__name__)


@dataclass
class _Episode:
    """One episode's record and what the model saw last, as text (what the next rendering must start with)."""

    recorder: EpisodeRecorder = field(default_factory=EpisodeRecorder)
    lock: threading.Lock = field(default_factory=threading.Lock)
    seen_text: str | None = None
    eos_id: int | None = None
    #: the index of the server all its calls go to (None until its first call)
    server: int | None = None


@dataclass(frozen=True)
class _Plan:
    """What one call sends: `prompt_ids` when it starts a segment (else None), the observation ids it appends,
    and the whole id list the server generates from."""

    prompt_ids: list[int] | None
    observation_ids: list[int]
    context_ids: list[int]
    #: generated ids at the end of the record that the rendering does not hold (a sampled EOS it writes otherwise)
    retract: int = 0


@dataclass(frozen=True)
class SeedKey:
    """Where an episode's sampling seeds come from: the run's seed, the task and the sample."""

    seed: int
    task_id: str
    sample: int


def turn_seed(key: SeedKey, turn: int) -> int:
    """The sampling seed of one turn: a hash of (seed, task, sample, turn), so a rerun samples the same replies while
    turns, samples and tasks draw independent streams (one seed for every turn repeats replies verbatim at
    temperature 1.0). 31 bits: every server's seed type holds it."""
    text = f"{key.seed}\x1f{key.task_id}\x1f{key.sample}\x1f{turn}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:4], "big") & 0x7FFFFFFF


class RecordingGateway:
    """Serves `episode_url(id)` (an OpenAI base URL) on 127.0.0.1; `start()`/`stop()` or `with`. Thread-safe:
    episodes run concurrently, the calls of one episode one at a time."""

    def __init__(self, upstream_base_url: str | list[str], backend: str = "llamacpp", host: str = "127.0.0.1",
                 port: int = 0, timeout_s: float = 600.0, tokenizer: str | None = None, revive_s: float = 30.0):
        urls = upstream_base_url.split(",") if isinstance(upstream_base_url, str) else list(upstream_base_url)
        self.urls = [u.strip() for u in urls if u.strip()]
        if not self.urls:
            raise GatewayError(400, "no model server URL given")
        self._upstream = (backend, timeout_s, tokenizer)
        self.backends = self._make_backends()
        self.revive_s = revive_s
        self._down: dict[int, float] = {}  # server index -> when it went down (monotonic)
        self._placed = 0
        self._address = (host, port)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._episodes: dict[str, _Episode] = {}
        self._seeds: dict[str, SeedKey] = {}
        self._lock = threading.Lock()

    def _make_backends(self) -> list[Backend]:
        backend, timeout_s, tokenizer = self._upstream
        template = make_tokenizer(tokenizer, timeout_s)
        return [make_backend(backend, url, timeout_s, template) for url in self.urls]

    @property
    def backend(self) -> Backend:
        """The first server's backend (the only one unless several URLs were given)."""
        return self.backends[0]

    @property
    def retokenized(self) -> bool:
        """Whether the record holds a tokenizer's ids for a server that gives none (backend openai)."""
        return self.backend.passthrough and getattr(self.backend, "template", None) is not None

    # -- lifecycle --------------------------------------------------------------------------------------------

    def start(self) -> RecordingGateway:
        if self._server is None:
            if self.backend.closed:
                self.backends = self._make_backends()  # started again after stop()
            server = ThreadingHTTPServer(self._address, _Handler)
            server.daemon_threads = True
            server.gateway = self  # type: ignore[attr-defined]
            self._server = server
            self._thread = threading.Thread(target=server.serve_forever, name="recording-gateway", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (safe twice); the records stay readable."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
            for backend in self.backends:
                backend.close()
            template = getattr(self.backend, "template", None)
            if template is not None:
                template.close()

    def __enter__(self) -> RecordingGateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise GatewayError(503, "the recording gateway is not running; call start() first")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # -- records ----------------------------------------------------------------------------------------------

    def episode_url(self, episode_id: str, seed: SeedKey | None = None) -> str:
        """The OpenAI base URL whose calls are recorded under `episode_id`; `seed`: where the sampling seeds of its
        calls that send none come from (`turn_seed`, one per turn, without changing the client)."""
        if seed is not None:
            with self._lock:
                self._seeds[episode_id] = seed
        return f"{self.base_url}/episodes/{quote(episode_id, safe='')}/v1"

    def tokens(self, episode_id: str) -> EpisodeTokens:
        """A copy of the episode's tokens; an episode that made no call has none (EpisodeTokens.empty())."""
        with self._lock:
            episode = self._episodes.get(episode_id)
        return episode.recorder.snapshot() if episode is not None else EpisodeTokens.empty()

    def pop(self, episode_id: str) -> EpisodeTokens:
        """The episode's tokens, forgetting them (a later call under this id starts a new record)."""
        with self._lock:
            episode = self._episodes.pop(episode_id, None)
            self._seeds.pop(episode_id, None)
        return episode.recorder.snapshot() if episode is not None else EpisodeTokens.empty()

    def episodes(self) -> list[str]:
        with self._lock:
            return list(self._episodes)

    def _episode(self, episode_id: str) -> _Episode:
        with self._lock:
            return self._episodes.setdefault(episode_id, _Episode())

    # -- requests ---------------------------------------------------------------------------------------------

    def chat(self, episode_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """One chat completion, recorded; raises GatewayError (with the status to reply with) and records
        nothing when it fails."""
        params = SamplingParams.from_openai(body)
        with self._lock:
            seed = self._seeds.get(episode_id)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise GatewayError(400, "messages: expected a non-empty list of message objects")
        model = str(body.get("model") or "")
        episode = self._episode(episode_id)
        timer = Timer()
        with episode.lock:
            if params.seed is None and seed is not None:  # the turn: the calls recorded so far (a failed call none)
                params = dataclasses.replace(params, seed=turn_seed(seed, episode.recorder.calls))
            index = self._place(episode)
            backend = self.backends[index]
            try:
                if backend.passthrough:
                    return self._pass_through(episode, backend, body, params, model, timer)
                rendered = backend.render(messages, model, timer)
                plan = self._plan(episode, backend, rendered, model, timer)
                generation = backend.generate(plan.context_ids, params, model, timer)
            except GatewayError as exc:
                self._note_failure(index, exc)
                raise
            episode.recorder.record_call(plan.prompt_ids, plan.observation_ids, generation.ids,
                                         generation.logprobs, timer.seconds, retract=plan.retract)
            episode.seen_text = rendered + generation.content
            episode.eos_id = generation.eos_id
        return _chat_completion(generation, model, len(plan.context_ids), bool(body.get("logprobs")))

    def _pass_through(self, episode: _Episode, backend: Backend, body: dict[str, Any], params: SamplingParams,
                      model: str, timer: Timer) -> dict[str, Any]:
        """A server without ids answers the request as it is; with a tokenizer, the call is recorded retokenized."""
        reply, content = backend.chat(body, params, timer)
        if backend.template is not None:
            rendered = backend.render(body["messages"], model, timer)
            plan = self._plan(episode, backend, rendered, model, timer)
            ids = backend.tokenize(content, model, timer)
            episode.recorder.record_call(plan.prompt_ids, plan.observation_ids, ids, [0.0] * len(ids),
                                         timer.seconds)
            episode.seen_text, episode.eos_id = rendered + content, None
        return reply

    def _place(self, episode: _Episode) -> int:
        """The episode's server: chosen at its first call (the live one with the fewest episodes), then kept."""
        with self._lock:
            if episode.server is None:
                now = time.monotonic()
                for index, since in list(self._down.items()):
                    if now - since >= self.revive_s:
                        del self._down[index]  # tried again, for new episodes
                live = [i for i in range(len(self.backends)) if i not in self._down] or \
                    [min(self._down, key=self._down.__getitem__)]
                load = {i: 0 for i in live}
                for other in self._episodes.values():
                    if other.server in load:
                        load[other.server] += 1
                self._placed += 1
                episode.server = min(live, key=lambda i: (load[i], (i - self._placed) % len(self.backends)))
            return episode.server

    def _note_failure(self, index: int, exc: GatewayError) -> None:
        """An unreachable or timed-out server is down: new episodes avoid it for `revive_s`."""
        if isinstance(exc, ServerDown):
            with self._lock:
                self._down.setdefault(index, time.monotonic())
                log.warning("model server %s is down: %s", self.urls[index], exc)

    def server_of(self, episode_id: str) -> int | None:
        """The index (in `urls`) of the server an episode's calls go to; None before its first call."""
        with self._lock:
            episode = self._episodes.get(episode_id)
        return None if episode is None else episode.server

    def _plan(self, episode: _Episode, backend: Backend, rendered: str, model: str, timer: Timer) -> _Plan:
        """Continue the current segment when `rendered` extends what the model saw, else start a new one."""
        current = episode.recorder.current
        if current is not None and episode.seen_text is not None and rendered.startswith(episode.seen_text):
            suffix = backend.tokenize(rendered[len(episode.seen_text):], model, timer)
            if episode.eos_id is None:
                return _Plan(None, suffix, current.context_ids + suffix)
            if suffix[:1] == [episode.eos_id]:  # the EOS the model generated, written out by the template
                return _Plan(None, suffix[1:], current.context_ids + suffix[1:])
            # another end-of-generation token than the template's: the rendering does not hold it
            return _Plan(None, suffix, current.context_ids[:-1] + suffix, retract=1)
        prompt = backend.tokenize(rendered, model, timer)
        return _Plan(prompt, [], prompt)

    def models(self) -> dict[str, Any]:
        """The upstream's `GET /v1/models`, passed through."""
        live = [i for i in range(len(self.backends)) if i not in self._down] or [0]
        return self.backends[live[0]].request("GET", "/v1/models", Timer())


def _chat_completion(generation: Generation, model: str, prompt_tokens: int, with_logprobs: bool) -> dict[str, Any]:
    """The OpenAI chat.completion reply (logprobs entries carry token text, logprob, bytes and the token id)."""
    choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": generation.content},
                              "finish_reason": generation.finish_reason,
                              "logprobs": {"content": generation.pieces} if with_logprobs else None}
    completion = len(generation.ids)
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [choice],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                      "total_tokens": prompt_tokens + completion}}


class _Handler(BaseHTTPRequestHandler):
    """HTTP only: routes `/episodes/<id>/v1/chat/completions` and the `/v1/models` listings to the gateway."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        parts = self.path.split("?")[0].strip("/").split("/")
        if len(parts) != 5 or parts[0] != "episodes" or parts[2:] != ["v1", "chat", "completions"]:
            return self._reply(404, _error(404, f"no such endpoint: POST {self.path}; use "
                                                "/episodes/<episode id>/v1/chat/completions"))
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
            return self._reply(400, _error(400, f"the request body is not JSON: {exc}"))
        if not isinstance(body, dict):
            return self._reply(400, _error(400, "the request body must be a JSON object"))
        episode_id = unquote(parts[1])
        self._answer(lambda: self.server.gateway.chat(episode_id, body))  # type: ignore[attr-defined]

    def do_GET(self) -> None:  # noqa: N802
        parts = self.path.split("?")[0].strip("/").split("/")
        if parts[-2:] != ["v1", "models"] or len(parts) not in (2, 4):
            return self._reply(404, _error(404, f"no such endpoint: GET {self.path}"))
        self._answer(self.server.gateway.models)  # type: ignore[attr-defined]

    def _answer(self, work: Callable[[], dict[str, Any]]) -> None:
        """Reply with `work()`'s result or its GatewayError; a bug replies 500 and logs its traceback."""
        try:
            payload = work()
        except GatewayError as exc:
            return self._reply(exc.status, _error(exc.status, str(exc)))
        except Exception as exc:
            log.exception("recording gateway: %s %s failed", self.command, self.path)
            return self._reply(500, _error(500, f"recording gateway bug: {type(exc).__name__}: {exc}"))
        self._reply(200, payload)

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's signature)
        log.debug("gateway: " + format, *args)


def _error(status: int, message: str) -> dict[str, Any]:
    kind = "invalid_request_error" if status < 500 else "upstream_error"
    return {"error": {"message": message, "type": kind, "code": status}}
