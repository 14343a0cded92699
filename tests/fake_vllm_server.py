"""FAKE vLLM server, for tests only (vLLM itself does not run here): a real threaded HTTP server on localhost that
speaks the token-id endpoints of vLLM's OpenAI server in their real shapes (vllm/entrypoints/openai/protocol.py):

- `POST /tokenize`: `{"model", "prompt", "add_special_tokens"}` or `{"model", "messages", "add_generation_prompt"}`
  -> `{"count", "max_model_len", "tokens", "token_strs"}`;
- `POST /detokenize`: `{"model", "tokens"}` -> `{"prompt"}`;
- `POST /v1/completions` with a token-id `prompt`, `logprobs: k` and `return_tokens_as_token_ids: true` -> a
  `text_completion` whose `choices[0].logprobs` has `tokens` spelled `"token_id:<id>"`, `token_logprobs`,
  `top_logprobs` and `text_offset`; `finish_reason` "stop" with `stop_reason` null when the EOS ended it;
- `GET /v1/models`, `GET /health` (200 once it serves);
- with `strict_model`, a request for another model than its own is a 404 `NotFoundError`, as vLLM answers it;
- anything else (llama.cpp's `/apply-template`, `/completion`) is a 404, as on vLLM.

Its tokenizer: `<|im_start|>` is id 1, `<|im_end|>` (the EOS) id 2, every other character its code point + 10;
its chat template is ChatML. It replies `reply` (then the EOS) to every completion, logprob -0.25 per token.
"""

from __future__ import annotations

import time
from typing import Any

from fake_http import serve_json

SPECIAL = {"<|im_start|>": 1, "<|im_end|>": 2}
EOS = 2


def tokenize(text: str) -> list[int]:
    ids: list[int] = []
    i = 0
    while i < len(text):
        special = next((s for s in SPECIAL if text.startswith(s, i)), None)
        if special:
            ids.append(SPECIAL[special])
            i += len(special)
        else:
            ids.append(ord(text[i]) + 10)
            i += 1
    return ids


def detokenize(ids: list[int]) -> str:
    names = {v: k for k, v in SPECIAL.items()}
    return "".join(names.get(i) or chr(i - 10) for i in ids)


def render(messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


class FakeVllmServer:
    """See the module docstring; `completions` records every /v1/completions body."""

    def __init__(self, reply: str, model: str = "fake-vllm", protocol: str = "HTTP/1.1", port: int = 0,
                 strict_model: bool = False) -> None:
        """`protocol` HTTP/1.0 closes every connection, so `close()` stops it answering at once (a dead server);
        `port`: serve there (a restarted server keeps its address)."""
        self.reply, self.model, self.strict_model = reply, model, strict_model
        self.completions: list[dict[str, Any]] = []
        self.server, self.url = serve_json(self._answer, protocol=protocol, port=port)

    def _answer(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if method == "GET":
            if path == "/v1/models":
                return 200, {"object": "list", "data": [{"id": self.model, "object": "model"}]}
            if path == "/health":
                return 200, {}
            return 404, {"detail": "Not Found"}
        if self.strict_model and body.get("model") not in (None, self.model):
            return 404, {"object": "error", "message": f"The model `{body.get('model')}` does not exist.",
                         "type": "NotFoundError", "param": None, "code": 404}
        return self.answer(path, body)

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        if path == "/tokenize":
            text = render(body["messages"], body.get("add_generation_prompt", True)) if "messages" in body \
                else body["prompt"]
            ids = tokenize(text)
            return 200, {"count": len(ids), "max_model_len": 32768, "tokens": ids, "token_strs": None}
        if path == "/detokenize":
            return 200, {"prompt": detokenize(body["tokens"])}
        if path == "/v1/completions":
            self.completions.append(body)
            if not (isinstance(body.get("prompt"), list) and all(isinstance(i, int) for i in body["prompt"])):
                return 400, {"object": "error", "message": "expected token ids", "type": "BadRequestError",
                             "code": 400}
            return 200, self.complete(body)
        return 404, {"detail": "Not Found"}

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        ids = (tokenize(self.reply) + [EOS])[: body.get("max_tokens") or None]  # cut at max_tokens, as vLLM
        cut = ids[-1:] != [EOS]
        names = [f"token_id:{i}" if body.get("return_tokens_as_token_ids") else detokenize([i]) for i in ids]
        logprobs = {"text_offset": list(range(len(ids))), "token_logprobs": [-0.25] * len(ids), "tokens": names,
                    "top_logprobs": [{name: -0.25} for name in names]}
        choice = {"index": 0, "text": detokenize([i for i in ids if i != EOS]),
                  "logprobs": logprobs if body.get("logprobs") is not None else None,
                  "finish_reason": "length" if cut else "stop", "stop_reason": None, "prompt_logprobs": None}
        return {"id": "cmpl-fake", "object": "text_completion", "created": int(time.time()), "model": self.model,
                "choices": [choice], "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(ids),
                                               "total_tokens": len(body["prompt"]) + len(ids)}}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
