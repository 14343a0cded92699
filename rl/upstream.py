"""The model servers behind the recording gateway, spoken to in token ids: render a chat to text, tokenize text,
generate from a list of ids and get back the generated ids with their log-probabilities.

Backends: `llamacpp` (the llama.cpp server and the embedded model: `/apply-template`, `/tokenize`,
`/completion`; tested against the real embedded model), `vllm` (vLLM's `/tokenize` with messages, `/detokenize`,
`/v1/completions` with a token-id prompt and `return_tokens_as_token_ids`; tested only against a fake), `sglang`
(SGLang's native `/tokenize` and `POST /generate` with `input_ids` and `return_logprob`, the ids and logprobs read
from `meta_info.output_token_logprobs`; SGLang serves no chat template, so the chat is rendered with the model's
own template from a local tokenizer; tested only against a fake) and `openai` (any OpenAI-compatible server that
gives no ids: the chat request is passed through, and the ids are the tokenizer's, RETOKENIZED, not the
server's). Log-probabilities are the server's own for the sampled token (the servers' defaults: the model's
distribution before temperature / top-p); retokenized calls have none (0.0).

Shapes read from SGLang at sgl-project/sglang: `entrypoints/http_server.py` @9c0549b7 (`/generate`),
`managers/io_struct.py` @001067ff (`GenerateReqInput`: `input_ids`, `sampling_params`, `return_logprob`,
`top_logprobs_num`), `sampling/sampling_params.py` @00c17caf (`max_new_tokens`, `stop`, `temperature`, `top_p`,
`json_schema` as a string, `sampling_seed`), `entrypoints/openai/serving_tokenize.py` @0351c1fa (`/tokenize`:
`prompt`, `add_special_tokens` -> `tokens`), `managers/schedule_batch.py` (`finish_reason` `{"type": "stop",
"matched": <token id or stop string>}` / `{"type": "length", "length": n}`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from pinpoint.environments.errors import PinpointError, UsageError

BACKENDS = ("llamacpp", "vllm", "sglang", "openai")
#: other spellings of the backends (`pinpoint rl rollout --model-backend llama.cpp`)
ALIASES = {"llama.cpp": "llamacpp"}


class GatewayError(PinpointError, RuntimeError):
    """A request the gateway answers with an OpenAI-style error: `status` is the HTTP status to reply with."""

    def __init__(self, status: int, message: str):
        super().__init__(" ".join(message.split())[:500])
        self.status = status


class ServerDown(GatewayError):
    """The server could not be reached or did not answer in time (not an error it answered with)."""


class Timer:
    """Seconds spent waiting on the upstream during one gateway request."""

    def __init__(self) -> None:
        self.seconds = 0.0


@dataclass(frozen=True)
class SamplingParams:
    """The OpenAI request fields the gateway forwards (what `agent.llm.LLMClient` sends, plus top_p / stop / seed)."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    json_schema: dict[str, Any] | None = None
    top_logprobs: int = 1

    @classmethod
    def from_openai(cls, body: dict[str, Any]) -> SamplingParams:
        """From a chat-completions body; GatewayError(400) for what cannot be served token-exactly."""
        if body.get("stream"):
            raise GatewayError(400, "streaming is not supported by the recording gateway; send stream=false")
        if body.get("n") not in (None, 1):
            raise GatewayError(400, "n > 1 is not supported by the recording gateway; send one request per sample")
        if body.get("tools"):
            raise GatewayError(400, "native tool calls are not supported by the recording gateway; "
                                    "use the text action format (tool_mode=text)")
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise GatewayError(400, "stop: expected a string or a list of strings")
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        try:
            return cls(max_tokens=None if max_tokens is None else int(max_tokens),
                       temperature=_optional_float(body.get("temperature")), top_p=_optional_float(body.get("top_p")),
                       stop=stop, seed=None if body.get("seed") is None else int(body["seed"]),
                       json_schema=_schema_of(body.get("response_format")),
                       top_logprobs=max(1, int(body.get("top_logprobs") or 1)))
        except (TypeError, ValueError) as exc:
            raise GatewayError(400, f"bad sampling parameter: {exc}") from None


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _schema_of(response_format: Any) -> dict[str, Any] | None:
    """The JSON schema a reply must follow: llama.cpp's `{"type": "json_object", "schema": ...}` extension (what
    LLMClient sends with constrain_actions) or OpenAI's `{"type": "json_schema", "json_schema": {"schema": ...}}`."""
    if not isinstance(response_format, dict) or response_format.get("type") in (None, "text"):
        return None
    if response_format["type"] == "json_object":
        return response_format.get("schema") or {"type": "object"}
    if response_format["type"] == "json_schema":
        return (response_format.get("json_schema") or {}).get("schema") or {"type": "object"}
    raise GatewayError(400, f"response_format type {response_format['type']!r}: expected text, json_object or "
                            "json_schema")


@dataclass(frozen=True)
class Generation:
    """One generation as the server produced it. `ids` and `logprobs` are aligned; `pieces` are the OpenAI
    `logprobs.content` entries; `eos_id` is the last id when it ended the turn without showing in `content` (the
    EOS: the next rendering of the history writes it as text, and the gateway does not count it twice)."""

    ids: list[int]
    logprobs: list[float]
    pieces: list[dict[str, Any]]
    content: str
    finish_reason: str
    eos_id: int | None


class Upstream:
    """HTTP to one model server: JSON in and out, every failure a GatewayError with the status to pass on."""

    #: whether chat requests are passed through as they are (a server without token ids) instead of generated
    #: from ids
    passthrough = False

    def __init__(self, base_url: str, timeout_s: float = 600.0):
        self.root = server_root(base_url)
        self.timeout_s = timeout_s
        self._http = httpx.Client(base_url=self.root, timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    @property
    def closed(self) -> bool:
        return self._http.is_closed

    def request(self, method: str, path: str, timer: Timer, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """The upstream's JSON object reply; 5xx, timeouts, unreachable servers and garbage become GatewayErrors."""
        started = time.monotonic()
        try:
            reply = self._http.request(method, path, json=body)
        except httpx.TimeoutException:
            raise ServerDown(504, f"upstream {self.root}{path} did not answer within {self.timeout_s:g}s") from None
        except httpx.HTTPError as exc:
            raise ServerDown(502, f"upstream {self.root}{path} unreachable: {exc}") from None
        finally:
            timer.seconds += time.monotonic() - started
        try:
            data = reply.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            data = None
        if reply.status_code >= 400:
            raise GatewayError(reply.status_code, f"upstream {self.root}{path} answered {reply.status_code}: "
                                                  f"{_error_message(data, reply.text)}")
        if not isinstance(data, dict):
            raise GatewayError(502, f"upstream {self.root}{path} answered with no JSON object: {reply.text[:200]!r}")
        return data


    def token_ids(self, path: str, timer: Timer, body: dict[str, Any]) -> list[int]:
        """The `tokens` list of a tokenize endpoint's reply (both servers answer `{"tokens": [...]}`)."""
        tokens = self.request("POST", path, timer, body).get("tokens")
        if not _int_list(tokens):
            raise shape_error(self, path, "a list of token ids")
        return tokens

    def text(self, path: str, timer: Timer, body: dict[str, Any], key: str) -> str:
        value = self.request("POST", path, timer, body).get(key)
        if not isinstance(value, str):
            raise shape_error(self, path, f"a {key!r} string")
        return value


def _present(body: dict[str, Any], optional: dict[str, Any]) -> dict[str, Any]:
    """`body` with the optional fields that are set (a server's own default applies to the others)."""
    return {**body, **{k: v for k, v in optional.items() if v is not None}}


def server_root(base_url: str) -> str:
    """`http://host:port` from a server root or an OpenAI base URL (`.../v1`)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def _error_message(data: Any, text: str) -> str:
    if isinstance(data, dict):
        error = data.get("error", data)
        return str(error.get("message", error) if isinstance(error, dict) else error)
    return text[:200] or "(empty body)"


def shape_error(upstream: Upstream, path: str, what: str) -> GatewayError:
    return GatewayError(502, f"upstream {upstream.root}{path} answered without {what}")


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


class LlamaCppBackend(Upstream):
    """The llama.cpp server (and the embedded model, which is one)."""

    def render(self, messages: list[dict[str, Any]], model: str, timer: Timer) -> str:
        return self.text("/apply-template", timer, {"messages": messages}, "prompt")

    def tokenize(self, text: str, model: str, timer: Timer) -> list[int]:
        body = {"content": text, "add_special": False, "parse_special": True}
        return self.token_ids("/tokenize", timer, body) if text else []

    def generate(self, prompt_ids: list[int], params: SamplingParams, model: str, timer: Timer) -> Generation:
        body = _present({"prompt": prompt_ids, "n_probs": params.top_logprobs, "return_tokens": True,
                         "cache_prompt": True},
                        {"n_predict": params.max_tokens, "temperature": params.temperature, "top_p": params.top_p,
                         "seed": params.seed, "json_schema": params.json_schema, "stop": params.stop or None})
        data = self.request("POST", "/completion", timer, body)
        probs, content = data.get("completion_probabilities"), data.get("content")
        if not isinstance(probs, list) or not isinstance(content, str) or not all(
                isinstance(p, dict) and isinstance(p.get("id"), int) and isinstance(p.get("logprob"), int | float)
                for p in probs):
            raise shape_error(self, "/completion", "content and completion_probabilities with ids and logprobs")
        ids = [p["id"] for p in probs]
        # `tokens` can hold one more id than the probabilities (the token that completed a stop word, which the
        # content leaves out); the probabilities are the tokens the content is made of
        if _int_list(data.get("tokens")) and data["tokens"][: len(ids)] != ids:
            raise shape_error(self, "/completion", "tokens that agree with completion_probabilities")
        stop_type = data.get("stop_type")
        eos = ids[-1] if stop_type == "eos" and probs and probs[-1].get("token") == "" else None
        return Generation(ids, [float(p["logprob"]) for p in probs], probs, content,
                          "length" if stop_type == "limit" else "stop", eos)


class VllmBackend(Upstream):
    """vLLM's OpenAI server. Token texts in the reply's logprobs are empty (`return_tokens_as_token_ids` trades
    them for ids). Tested only against a fake: check it against a real vLLM before relying on it."""

    def render(self, messages: list[dict[str, Any]], model: str, timer: Timer) -> str:
        """vLLM has no template endpoint: the chat's ids, detokenized (special tokens written out)."""
        ids = self.token_ids("/tokenize", timer, {"model": model, "messages": messages, "add_generation_prompt": True})
        return self.text("/detokenize", timer, {"model": model, "tokens": ids}, "prompt")

    def tokenize(self, text: str, model: str, timer: Timer) -> list[int]:
        body = {"model": model, "prompt": text, "add_special_tokens": False}
        return self.token_ids("/tokenize", timer, body) if text else []

    def generate(self, prompt_ids: list[int], params: SamplingParams, model: str, timer: Timer) -> Generation:
        schema = params.json_schema
        body = _present({"model": model, "prompt": prompt_ids, "logprobs": params.top_logprobs,
                         "return_tokens_as_token_ids": True},
                        {"max_tokens": params.max_tokens, "temperature": params.temperature, "top_p": params.top_p,
                         "seed": params.seed, "stop": params.stop or None,
                         "response_format": None if schema is None else
                         {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}})
        data = self.request("POST", "/v1/completions", timer, body)
        try:
            choice = data["choices"][0]
            tokens, logprobs = choice["logprobs"]["tokens"], choice["logprobs"]["token_logprobs"]
            ids = [int(str(t).removeprefix("token_id:")) for t in tokens]
            logprobs = [float(x) for x in logprobs]
            content = choice["text"]
        except (KeyError, IndexError, TypeError, ValueError):
            raise shape_error(self, "/v1/completions", "choices[0] with text and token-id logprobs") from None
        if len(ids) != len(logprobs) or not isinstance(content, str):
            raise shape_error(self, "/v1/completions", "one logprob per token")
        pieces = [{"token": "", "logprob": lp, "bytes": [], "id": i, "top_logprobs": []}
                  for i, lp in zip(ids, logprobs, strict=True)]
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        eos = ids[-1] if ids and choice.get("finish_reason") == "stop" and choice.get("stop_reason") is None else None
        return Generation(ids, logprobs, pieces, content, finish, eos)


class HfTokenizer:
    """A local Hugging Face tokenizer (transformers, local files only): the model's chat template and its ids, for
    a server that renders no template (SGLang) or returns no ids (a plain OpenAI-compatible server)."""

    closed = False

    def __init__(self, path: str) -> None:
        try:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        except ImportError:
            raise UsageError("a local tokenizer needs transformers: pip install transformers") from None
        except (OSError, ValueError) as exc:
            raise UsageError(f"tokenizer {path}: not a local Hugging Face tokenizer "
                             f"({str(exc).splitlines()[0][:200]})") from None
        if not getattr(self._tokenizer, "chat_template", None):
            raise UsageError(f"tokenizer {path}: it has no chat template")
        self.root = path

    def render(self, messages: list[dict[str, Any]], model: str, timer: Timer) -> str:
        return self._tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def tokenize(self, text: str, model: str, timer: Timer) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False)) if text else []

    def close(self) -> None:
        """Nothing to release (the same interface as a server's)."""


Template = HfTokenizer | LlamaCppBackend


def make_tokenizer(spec: str | None, timeout_s: float = 600.0) -> Template | None:
    """`spec`: a local Hugging Face tokenizer (a directory), or the URL of a llama.cpp server (the embedded
    model's: its `/apply-template` and `/tokenize`); None: no tokenizer."""
    if not spec:
        return None
    return LlamaCppBackend(spec, timeout_s) if "://" in spec else HfTokenizer(spec)


class SglangBackend(Upstream):
    """SGLang's native API in token ids. It has no chat-template endpoint: `template` renders (a local tokenizer
    of the served model); the ids are always the server's own (`/tokenize`, `/generate`). Tested only against a
    fake: check it against a real SGLang before relying on it."""

    def __init__(self, base_url: str, timeout_s: float, template: Template | None) -> None:
        if template is None:
            raise UsageError("the sglang backend needs the model's chat template: --tokenizer PATH (a local "
                             "Hugging Face tokenizer of the served model)")
        super().__init__(base_url, timeout_s)
        self.template = template

    def render(self, messages: list[dict[str, Any]], model: str, timer: Timer) -> str:
        return self.template.render(messages, model, timer)

    def tokenize(self, text: str, model: str, timer: Timer) -> list[int]:
        body = {"model": model, "prompt": text, "add_special_tokens": False}
        return self.token_ids("/tokenize", timer, body) if text else []

    def generate(self, prompt_ids: list[int], params: SamplingParams, model: str, timer: Timer) -> Generation:
        schema = None if params.json_schema is None else json.dumps(params.json_schema)
        sampling = _present({}, {"max_new_tokens": params.max_tokens, "temperature": params.temperature,
                                 "top_p": params.top_p, "stop": params.stop or None, "json_schema": schema,
                                 "sampling_seed": params.seed})
        body = {"input_ids": prompt_ids, "sampling_params": sampling, "return_logprob": True,
                "top_logprobs_num": params.top_logprobs, "stream": False}
        data = self.request("POST", "/generate", timer, body)
        try:
            meta = data["meta_info"]
            entries = meta["output_token_logprobs"]
            ids = [int(entry[1]) for entry in entries]
            logprobs = [float(entry[0]) for entry in entries]
            content, finish = data["text"], meta.get("finish_reason") or {}
        except (KeyError, IndexError, TypeError, ValueError):
            raise shape_error(self, "/generate", "text and meta_info.output_token_logprobs") from None
        if not isinstance(content, str) or (_int_list(data.get("output_ids")) and data["output_ids"] != ids):
            raise shape_error(self, "/generate", "output_ids that agree with output_token_logprobs")
        pieces = [{"token": "", "logprob": lp, "bytes": [], "id": i, "top_logprobs": []}
                  for i, lp in zip(ids, logprobs, strict=True)]
        kind = finish.get("type") if isinstance(finish, dict) else None
        matched = finish.get("matched") if isinstance(finish, dict) else None
        eos = ids[-1] if ids and kind == "stop" and isinstance(matched, int) and matched == ids[-1] else None
        return Generation(ids, logprobs, pieces, content, "length" if kind == "length" else "stop", eos)


class OpenAIBackend(Upstream):
    """A plain OpenAI-compatible server that gives no token ids: each chat request is passed through as it is, and
    with a `template` (a local tokenizer, or the embedded model's) the gateway records the tokenizer's ids for it,
    RETOKENIZED (the reply's text tokenized again, with no logprobs: 0.0), not the ids the server generated."""

    passthrough = True

    def __init__(self, base_url: str, timeout_s: float, template: Template | None) -> None:
        super().__init__(base_url, timeout_s)
        self.template = template

    def render(self, messages: list[dict[str, Any]], model: str, timer: Timer) -> str:
        return self.template.render(messages, model, timer)

    def tokenize(self, text: str, model: str, timer: Timer) -> list[int]:
        return self.template.tokenize(text, model, timer)

    def chat(self, body: dict[str, Any], params: SamplingParams, timer: Timer) -> tuple[dict[str, Any], str]:
        """The server's own chat.completion for `body` (with the episode's seed), and its reply text."""
        data = self.request("POST", "/v1/chat/completions", timer,
                            {**body, **({"seed": params.seed} if params.seed is not None else {})})
        try:
            content = data["choices"][0]["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError):
            raise shape_error(self, "/v1/chat/completions", "choices[0].message") from None
        return data, content if isinstance(content, str) else json.dumps(content)


def make_backend(name: str, base_url: str, timeout_s: float, template: Template | None = None) -> Backend:
    """The backend `name` for one server; `template`: the local tokenizer sglang renders with and openai
    retokenizes with."""
    name = ALIASES.get(name, name)
    if name == "llamacpp":
        return LlamaCppBackend(base_url, timeout_s)
    if name == "vllm":
        return VllmBackend(base_url, timeout_s)
    if name == "sglang":
        return SglangBackend(base_url, timeout_s, template)
    if name == "openai":
        return OpenAIBackend(base_url, timeout_s, template)
    raise UsageError(f"gateway backend {name!r}: expected one of {', '.join(BACKENDS)}")


Backend = LlamaCppBackend | VllmBackend | SglangBackend | OpenAIBackend
