"""Policies that act in a `RepairEnv`: what produces each action of an episode.

- `GoldPolicy` is a **fake** (a scripted stand-in, not a model): it replays the reference patch as
  `str_replace_editor` calls and submits. Episodes are short and their rewards known, which is what tests and the
  throughput benchmark need; it never produces a model figure.
- `NoopPolicy` submits at once (the empty patch: reward 0).
- `LLMPolicy` asks a model behind an OpenAI-compatible endpoint (the embedded model, vLLM, llama.cpp, through the
  recording gateway when tokens are captured) for one text action per turn.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from unidiff import PatchSet

SUBMIT = {"name": "submit", "arguments": {}}


class Policy(Protocol):
    """The next action given the chat so far (the env's observations appended as user messages) and, for a model,
    the tools' schemas."""

    name: str

    def act(self, messages: list[dict[str, Any]], tools: list[dict] | None = None
            ) -> tuple[str | dict, dict[str, Any] | None]:
        """(action, the assistant message to append to `messages`, or None to append the action as text)."""


class NoopPolicy:
    name = "noop"

    def act(self, messages: list[dict[str, Any]], tools: list[dict] | None = None
            ) -> tuple[str | dict, dict[str, Any] | None]:
        return dict(SUBMIT), None


class GoldPolicy:
    """FAKE policy: the gold patch's hunks as exact `str_replace` edits, then `submit`."""

    name = "scripted-gold"

    def __init__(self, gold_patch: str) -> None:
        self._actions = gold_actions(gold_patch) + [dict(SUBMIT)]

    def act(self, messages: list[dict[str, Any]], tools: list[dict] | None = None
            ) -> tuple[str | dict, dict[str, Any] | None]:
        return (self._actions.pop(0) if self._actions else dict(SUBMIT)), None


def gold_actions(patch: str) -> list[dict[str, Any]]:
    """One editor call per hunk: its old lines (context and removed) replaced by its new lines."""
    actions: list[dict[str, Any]] = []
    for patched in PatchSet(patch):
        for hunk in patched:
            old = "".join(line.value for line in hunk if not line.is_added)
            new = "".join(line.value for line in hunk if not line.is_removed)
            if patched.is_added_file:
                args = {"command": "create", "path": patched.path, "file_text": new}
            else:
                args = {"command": "str_replace", "path": patched.path, "old_str": old, "new_str": new}
            actions.append({"name": "str_replace_editor", "arguments": args})
    return actions


class LLMPolicy:
    """One chat completion per turn through `agent.llm.LLMClient` (text action format)."""

    name = "llm"

    def __init__(self, client: Any) -> None:
        self.client = client

    def act(self, messages: list[dict[str, Any]], tools: list[dict] | None = None
            ) -> tuple[str | dict, dict[str, Any] | None]:
        reply = self.client.complete(messages, tools)
        return reply.content, {"role": "assistant", "content": reply.content}

    @property
    def decoding(self) -> str:
        """`json` (replies constrained to an action's JSON schema) or `free`: the same model decodes differently
        under each, so a row says which."""
        return "json" if self.client.tool_mode == "text" and self.client.constrained_actions else "free"


def action_text(action: str | dict) -> str:
    """An action as the text a model would have written (for the chat history of scripted policies)."""
    if isinstance(action, str):
        return action
    return json.dumps({"tool": action.get("name"), "arguments": action.get("arguments", {})})
