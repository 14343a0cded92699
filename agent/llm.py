"""LLM client for any OpenAI-compatible endpoint (OpenAI, vLLM, llama.cpp server).

One `complete()` call = one chat completion, with retries on transient failures, native or text-mode tool calling,
token log-probabilities kept with the reply, and running token/cost totals. The API key is read from the
environment at call time only, so it never lands in a config dump, a log or a trajectory.
The text action format and its parsers are the agent-computer protocol: `tools.protocol`.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import logging
import os
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import openai
from pinpoint.agent.http_deadline import deadline_client
from pinpoint.agent.llm_config import LLMConfig, ToolMode, cost_of, is_int, is_number
from pinpoint.environments.errors import PinpointError
from pinpoint.tools.protocol import (
    ToolCall,
    action_schema,
    check_tool_name,
    clip,
    parse_arguments,
    parse_text_actions,
    to_text_mode_messages,
)

log = logging.getLogger(__name__)

PLACEHOLDER_KEY = "EMPTY"  # local servers (vLLM, llama.cpp) accept any key; the openai client wants one
MAX_BACKOFF_S = 30.0


class LLMError(PinpointError, RuntimeError):
    """The endpoint could not give a usable reply; the message says what happened and where."""


class LLMTimeout(LLMError):
    """The endpoint did not answer within `timeout_s`."""


class LLMBadResponse(LLMError):
    """The endpoint answered, but with nothing usable (no choices, not JSON, no message)."""


class LLMGarbledReply(LLMBadResponse):
    """A 200 whose body is not a JSON object (a proxy's error page, a cut connection): transient like a 500, so
    retried like one."""


class LLMContextLengthExceeded(LLMError):
    """The prompt does not fit the model's context window: shorten the history and ask again."""


@dataclass
class TokenLogprob:
    token: str
    logprob: float
    token_id: int | None = None


@dataclass
class LLMResponse:
    content: str
    tool_calls: list[ToolCall]
    logprobs: list[TokenLogprob] | None
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    latency_s: float
    finish_reason: str | None
    raw_message: dict[str, Any] = field(default_factory=dict)

    def assistant_message(self) -> dict[str, Any]:
        """The message to append to the history, in OpenAI shape (also in text mode: the client converts back)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        return message


@dataclass
class LLMUsage:
    """Running totals over every successful call of one client. `cost_usd` is None when the price is unknown."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0
    latency_s: float = 0.0
    retries: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "total_tokens": self.total_tokens}


def _parse_logprobs(choice: dict[str, Any]) -> list[TokenLogprob] | None:
    content = (choice.get("logprobs") or {}).get("content")
    if not isinstance(content, list):
        return None
    result = []
    for item in content:
        if not isinstance(item, dict) or not is_number(item.get("logprob")):
            continue
        token_id = item.get("id", item.get("token_id"))
        result.append(TokenLogprob(str(item.get("token", "")), float(item["logprob"]),
                                   token_id if is_int(token_id) else None))
    return result


# ---------------------------------------------------------------------------------------------------------------
# the client


class LLMClient:
    """Chat completions against one endpoint. Thread-safe totals; one instance per run is the intended use."""

    def __init__(self, config: LLMConfig):
        if config.base_url is None:
            raise ValueError("LLMClient needs config.base_url; call embedded_model.resolve_config(config) first "
                             "to start the embedded model when no endpoint is configured")
        self.config = config
        self._usage = LLMUsage(cost_usd=0.0 if config.cost_known else None)
        self._lock = threading.Lock()
        self._send_logprobs = config.logprobs
        self._tool_mode: ToolMode = config.tool_mode
        # adapted once and remembered when the server turns a parameter down (e.g. OpenAI reasoning models)
        self._max_tokens_key = "max_tokens"
        self._send_temperature = True
        self._constrain_actions = config.constrain_actions
        self._client: openai.OpenAI | None = None

    @property
    def usage(self) -> LLMUsage:
        """A copy of the running totals."""
        with self._lock:
            return copy.copy(self._usage)

    @property
    def tool_mode(self) -> ToolMode:
        """The tool mode in effect (falls back to 'text' when the server turns native tools down)."""
        return self._tool_mode

    @property
    def constrained_actions(self) -> bool:
        """Whether text-mode replies are asked for under the action's JSON schema (off once a server turns it down)."""
        return self._constrain_actions

    def _openai(self) -> openai.OpenAI:
        """The key is looked up on every call (so a rotated key is picked up) and kept only inside the client."""
        key = os.environ.get(self.config.api_key_env) or PLACEHOLDER_KEY
        with self._lock:
            if self._client is None or self._client.api_key != key:
                # the deadline bounds the whole reply (a dripping server defeats per-read timeouts)
                http = deadline_client(self.config.timeout_s)
                self._client = openai.OpenAI(base_url=self.config.base_url, api_key=key,
                                             timeout=self.config.timeout_s, max_retries=0, http_client=http)
            return self._client

    def complete(self, messages: list[dict], tools: list[dict] | None = None) -> LLMResponse:
        """One reply from the model; raises LLMTimeout / LLMBadResponse / LLMError with a clear message."""
        started = time.monotonic()
        client = self._openai()
        attempt = 0
        while True:
            request = self._request(messages, tools)
            try:
                raw = client.chat.completions.with_raw_response.create(**request)
                body = raw.http_response.text
            except openai.APITimeoutError as exc:
                raise LLMTimeout(f"{self._where()}: no reply within {self.config.timeout_s:g}s") from exc
            except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:
                if self._adapt_to_rejection(exc, tools):
                    continue
                detail = f"{self._where()}: request rejected ({exc.status_code}): {_error_text(exc)}"
                if _is_context_overflow(exc):
                    raise LLMContextLengthExceeded(detail) from exc
                raise LLMError(detail) from exc
            except (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError) as exc:
                if isinstance(exc, openai.InternalServerError) and self._adapt_to_rejection(exc, tools):
                    continue
                if attempt >= self.config.max_retries:
                    raise LLMError(f"{self._where()}: gave up after {attempt + 1} attempts: {_describe(exc)}") from exc
                delay = self._backoff(attempt, exc)
                log.warning("%s: %s; retry %d/%d in %.1fs", self._where(), _describe(exc), attempt + 1,
                            self.config.max_retries, delay)
                attempt += 1
                with self._lock:
                    self._usage.retries += 1
                time.sleep(delay)
                continue
            except openai.APIStatusError as exc:
                hint = ""
                if exc.status_code in (401, 403):
                    state = "set" if os.environ.get(self.config.api_key_env) else "NOT set"
                    hint = f" (the key is read from ${self.config.api_key_env}, which is {state})"
                raise LLMError(f"{self._where()}: HTTP {exc.status_code}: {_error_text(exc)}{hint}") from exc
            try:
                return self._response(body, tools, time.monotonic() - started)
            except LLMGarbledReply as exc:
                if attempt >= self.config.max_retries:
                    raise
                delay = self._backoff(attempt, exc)
                log.warning("%s; retry %d/%d in %.1fs", exc, attempt + 1, self.config.max_retries, delay)
                attempt += 1
                with self._lock:
                    self._usage.retries += 1
                time.sleep(delay)

    # -- request building ---------------------------------------------------------------------------------------

    def _request(self, messages: list[dict], tools: list[dict] | None) -> dict[str, Any]:
        cfg = self.config
        request: dict[str, Any] = {"model": cfg.model, self._max_tokens_key: cfg.max_tokens}
        if self._send_temperature:
            request["temperature"] = cfg.temperature
        extra: dict[str, Any] = {}
        if self._tool_mode == "text":
            request["messages"] = to_text_mode_messages(messages, tools)
            if tools and self._constrain_actions:
                extra["response_format"] = {"type": "json_object", "schema": action_schema(tools)}
        else:
            request["messages"] = messages
            if tools:
                request["tools"] = tools
        if self._send_logprobs:
            # top_logprobs=1: llama.cpp returns no logprobs at all with 0
            request["logprobs"] = True
            request["top_logprobs"] = 1
        if extra:
            request["extra_body"] = extra
        return request

    def _adapt_to_rejection(self, exc: openai.APIStatusError, tools: list[dict] | None) -> bool:
        """A server that turns down a parameter gets the request again without it; the change is remembered.
        Covers logprobs, native tools (llama.cpp without --jinja, vLLM without a tool parser), action schemas a
        server cannot compile, and OpenAI reasoning models (max_completion_tokens instead of max_tokens, no
        temperature)."""
        text = _error_text(exc).lower()
        if self._send_logprobs and "logprob" in text:
            self._send_logprobs = False
            change = "continuing without logprobs"
        elif self._max_tokens_key == "max_tokens" and "max_completion_tokens" in text:
            self._max_tokens_key = "max_completion_tokens"
            change = "sending max_completion_tokens instead of max_tokens"
        elif self._send_temperature and "temperature" in text and _says_unsupported(text):
            self._send_temperature = False
            change = "leaving temperature at the model's default"
        elif self._constrain_actions and self._tool_mode == "text" and tools and (
                "response_format" in text or "schema" in text or "grammar" in text):
            self._constrain_actions = False
            change = "asking for actions without a JSON-schema constraint"
        elif tools and self._tool_mode == "native" and "tool" in text and (
                _says_unsupported(text) or "jinja" in text or "tool-call-parser" in text):
            self._tool_mode = "text"
            change = "switching to the text action format"
        else:
            return False
        log.warning("%s turned the request down (%s); %s", self._where(), clip(text), change)
        return True

    def _backoff(self, attempt: int, exc: Exception) -> float:
        retry_after = None
        headers = getattr(getattr(exc, "response", None), "headers", None)  # httpx-style response, if any
        if headers is not None:
            with contextlib.suppress(TypeError, ValueError):
                retry_after = float(headers.get("retry-after", ""))
        base = self.config.retry_backoff_s * (2**attempt)
        delay = retry_after if retry_after is not None else base * (1 + random.random() * 0.25)
        return min(delay, MAX_BACKOFF_S)

    def _where(self) -> str:
        return f"LLM endpoint {self.config.base_url} (model {self.config.model})"

    # -- reply parsing ------------------------------------------------------------------------------------------

    def _response(self, body: str, tools: list[dict] | None, latency: float) -> LLMResponse:
        try:
            data = json.loads(body)
        except (json.JSONDecodeError, TypeError) as exc:
            raise LLMGarbledReply(f"{self._where()}: reply is not JSON: {clip(str(body))!r}") from exc
        if not isinstance(data, dict):
            raise LLMGarbledReply(f"{self._where()}: reply is not a JSON object: {clip(body)!r}")
        if "error" in data and not data.get("choices"):
            raise LLMError(f"{self._where()}: server reported an error: {clip(json.dumps(data['error']))}")
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise LLMBadResponse(f"{self._where()}: reply has no choices: {clip(body)!r}")
        choice = choices[0]
        message = choice.get("message")
        if not isinstance(message, dict):
            raise LLMBadResponse(f"{self._where()}: reply's first choice has no message: {clip(body)!r}")
        content = message.get("content") or ""
        if not isinstance(content, str):
            content = json.dumps(content)
        if self._tool_mode == "text" and tools:
            calls = parse_text_actions(content)
        else:
            calls = [self._native_call(i, c) for i, c in enumerate(message.get("tool_calls") or [])]
        calls = [check_tool_name(c, tools) for c in calls]
        if choice.get("finish_reason") == "length":
            for call in calls:
                if call.parse_error:
                    call.parse_error += f" (the reply was cut off at max_tokens={self.config.max_tokens})"
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        completion_tokens = int(usage.get("completion_tokens") or 0)
        cost = cost_of(self.config, prompt_tokens, completion_tokens)
        with self._lock:
            self._usage.calls += 1
            self._usage.prompt_tokens += prompt_tokens
            self._usage.completion_tokens += completion_tokens
            self._usage.latency_s += latency
            if self._usage.cost_usd is not None and cost is not None:
                self._usage.cost_usd += cost
        return LLMResponse(
            content=content, tool_calls=calls, logprobs=_parse_logprobs(choice), prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens, cost_usd=cost, latency_s=latency,
            finish_reason=choice.get("finish_reason"), raw_message=message,
        )

    @staticmethod
    def _native_call(index: int, call: Any) -> ToolCall:
        if not isinstance(call, dict):
            return ToolCall(f"call_{index}", "", {}, json.dumps(call), "tool call is not an object")
        fn = call.get("function") if isinstance(call.get("function"), dict) else {}
        raw = fn.get("arguments")
        arguments, error = parse_arguments(raw)
        raw_text = raw if isinstance(raw, str) else json.dumps(raw if raw is not None else {})
        name = fn.get("name") if isinstance(fn.get("name"), str) else ""
        if not name and error is None:
            error = "tool call has no function name"
        return ToolCall(str(call.get("id") or f"call_{uuid.uuid4().hex[:12]}"), name, arguments, raw_text, error)


def _says_unsupported(text: str) -> bool:
    return any(k in text for k in ("unsupported", "not supported", "does not support", "not support", "requires --"))


def _is_context_overflow(exc: openai.APIStatusError) -> bool:
    text = _error_text(exc).lower()
    return "context" in text and any(k in text for k in ("length", "exceed", "too long", "window", "size"))


def _error_text(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        err = body.get("error", body)
        return str(err.get("message", err) if isinstance(err, dict) else err)
    return str(body or exc.message)


def _describe(exc: Exception) -> str:
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {clip(_error_text(exc))}"
    return f"{type(exc).__name__}: {exc}"
