"""The agent-computer protocol: how a model's reply becomes tool calls, and how tools are described to a model
without native tool calling. Every caller (the LLM client, the agent, the RL environment, `call_tool`) reads
arguments with `parse_arguments`, once.

Text action format (tool_mode="text", for models without native tool calling): the tools are described in the
system prompt and the model answers with one fenced block

    ```json
    {"tool": "<tool name>", "arguments": {...}}
    ```

(a reply that is exactly one bare JSON object of that shape is accepted too; "name" for "tool" and "args"/
"parameters" for "arguments" are tolerated). With `constrain_actions`, the request also carries a JSON schema
(llama.cpp's `response_format.schema`) so even a tiny model can only answer with a well-formed action.

Hermes-style tool calls, as the Qwen and Hermes chat templates teach a model to write them in its text, are read
the same way: `<tool_call>{"name": "<tool name>", "arguments": {...}}</tool_call>` (one block per call; a block cut
off before its closing tag is read to the end of the reply).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any


@dataclass
class ToolCall:
    """One action the model asked for. `parse_error` is set (and `arguments` is {}) when it could not be read."""

    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str
    parse_error: str | None = None

    def to_openai(self) -> dict[str, Any]:
        """OpenAI `tool_calls` entry; unparsable arguments are sent back as {} (some servers re-parse history)."""
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.raw_arguments if self.parse_error is None else "{}"}}


def parse_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """Tool-call arguments as a dict, or ({}, reason) when they are not a JSON object. Never raises."""
    if isinstance(raw, dict):
        return raw, None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    if not isinstance(raw, str):
        return {}, f"arguments must be a JSON object, got {type(raw).__name__}"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return {}, f"arguments are not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}): {clip(raw)}"
    if not isinstance(value, dict):
        return {}, f"arguments must be a JSON object, got {type(value).__name__}: {clip(raw)}"
    return value, None


def clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def check_tool_name(call: ToolCall, tools: list[dict] | None) -> ToolCall:
    """Flag a call to a tool that was not offered, so the agent can tell the model which ones exist."""
    names = _tool_names(tools)
    if call.parse_error is None and names and call.name not in names:
        call.parse_error = f"unknown tool {call.name!r}; available tools: {', '.join(names)}"
    return call


def _tool_names(tools: list[dict] | None) -> list[str]:
    return [t.get("function", t).get("name", "") for t in tools or []]


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[^\n]*\n(.*?)```", re.DOTALL)
#: a hermes-style call in the model's text (Qwen2.5 / Hermes templates); the last one may be cut off
_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)


def parse_text_actions(content: str) -> list[ToolCall]:
    """Actions written in the text format (module docstring). A ```json block that cannot be read yields a
    ToolCall with parse_error; other code blocks (```python …) are not actions. Never raises."""
    calls: list[ToolCall] = []
    stripped = content.strip()
    if "<tool_call>" in content:
        candidates = [("json", body) for body in _HERMES.findall(content)]
    elif stripped.startswith("{") and (stripped.endswith("}") or re.match(r'\{\s*"(tool|name)"', stripped)):
        candidates = [("json", stripped)]  # a bare action (constrained replies), possibly cut off
    else:
        candidates = [(lang.lower(), body) for lang, body in _FENCE.findall(content)]
    for lang, body in candidates:
        call = _text_action(body.strip(), explicit=lang == "json")
        if call is not None:
            calls.append(call)
    return calls


def _text_action(body: str, explicit: bool) -> ToolCall | None:
    call_id = f"call_{uuid.uuid4().hex[:12]}"
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        if not explicit:
            return None
        return ToolCall(call_id, _guess_name(body), {}, body,
                        f"action block is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                        'expected {"tool": "<name>", "arguments": {...}}')
    if not isinstance(value, dict) or not ({"tool", "name"} & value.keys()):
        if not explicit:
            return None
        return ToolCall(call_id, "", {}, body, 'action block must be a JSON object {"tool": "<name>", "arguments": {...}}')
    name = value.get("tool", value.get("name"))
    raw_args = next((value[k] for k in ("arguments", "args", "parameters") if k in value), {})
    arguments, error = parse_arguments(raw_args)
    raw_text = raw_args if isinstance(raw_args, str) else json.dumps(raw_args)
    if not isinstance(name, str) or not name:
        return ToolCall(call_id, "", arguments, raw_text, 'action block needs "tool": "<tool name>" (a string)')
    return ToolCall(call_id, name, arguments, raw_text, error)


@dataclass(frozen=True)
class Action:
    """A readable action: which tool, with its arguments read once (the tool still checks them against its
    schema)."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ActionError:
    """An action that cannot be read, and the observation that tells the model what is wrong with it."""

    message: str


#: the observation for a reply without any action
NO_ACTION = ("Your reply contained no tool call. Call one of the tools, or submit when the fix is done; write the "
             'call as {"tool": "<name>", "arguments": {...}} in a ```json block.')


def parse_action(action: str | dict) -> Action | ActionError:
    """One action from a reply's text (the text format or a hermes-style call) or from a tool-call dict
    (`{"name", "arguments"}` or OpenAI's `{"function": {...}}`)."""
    if isinstance(action, dict):
        call = action.get("function", action)
        name = call.get("name", call.get("tool")) if isinstance(call, dict) else None
        if not isinstance(name, str) or not name:
            return ActionError('A tool call needs a "name" (or "function": {"name", "arguments"}).')
        arguments, error = parse_arguments(call.get("arguments", {}))
        return ActionError(f"Invalid arguments for {name}: {error}") if error else Action(name, arguments)
    calls = parse_text_actions(action or "")
    if not calls:
        return ActionError(NO_ACTION)
    if calls[0].parse_error:
        return ActionError(f"Your action could not be read: {calls[0].parse_error}")
    return Action(calls[0].name, calls[0].arguments)


def _guess_name(body: str) -> str:
    match = re.search(r'"(?:tool|name)"\s*:\s*"([^"]+)"', body)
    return match.group(1) if match else ""


def describe_tools_for_text_mode(tools: list[dict]) -> str:
    """System-prompt section that teaches a model without native tool calling the action format."""
    lines = [
        "# Tools",
        "You act by calling exactly one tool per reply. Write the call as one fenced JSON block, nothing else after it:",
        "```json",
        '{"tool": "<tool name>", "arguments": {<arguments as a JSON object>}}',
        "```",
        "Available tools:",
    ]
    for tool in tools:
        fn = tool.get("function", tool)
        params = fn.get("parameters") or {}
        properties = params.get("properties") or {}
        lines.append(f"- {fn.get('name')}: {fn.get('description', '').strip()}")
        lines.append("  arguments:" + ("" if properties else " none ({})"))
        required = set(params.get("required") or [])
        for name, schema in properties.items():
            lines.append(f"    {name} ({_type_words(schema)}{', required' if name in required else ''})"
                         f"{': ' + schema['description'].strip() if schema.get('description') else ''}")
    return "\n".join(lines)


def _type_words(schema: dict[str, Any]) -> str:
    """'string', 'array of integer', 'one of "a", "b"' — what a model needs to fill an argument in."""
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array" and isinstance(schema.get("items"), dict):
        return f"array of {_type_words(schema['items'])}"
    return str(kind)


def action_schema(tools: list[dict]) -> dict[str, Any]:
    """JSON schema that only admits `{"tool": <one of the tools>, "arguments": <its parameters>}`."""
    variants = []
    for tool in tools:
        fn = tool.get("function", tool)
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        variants.append({
            "type": "object",
            "properties": {"tool": {"const": fn.get("name")}, "arguments": params},
            "required": ["tool", "arguments"],
            "additionalProperties": False,
        })
    return variants[0] if len(variants) == 1 else {"anyOf": variants}


def to_text_mode_messages(messages: list[dict], tools: list[dict] | None) -> list[dict]:
    """History for a server without tool calling: tool descriptions go into the system prompt, assistant tool
    calls become text actions, tool results become user messages."""
    out: list[dict] = []
    names_by_id: dict[str, str] = {}
    for message in messages:
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            content = message.get("content") or ""
            already_written = bool(parse_text_actions(content))
            for call in message["tool_calls"]:
                fn = call.get("function", {})
                names_by_id[call.get("id", "")] = fn.get("name", "")
                if not already_written:
                    args, _ = parse_arguments(fn.get("arguments"))
                    action = json.dumps({"tool": fn.get("name"), "arguments": args})
                    content += ("\n" if content else "") + f"```json\n{action}\n```"
            out.append({"role": "assistant", "content": content})
        elif role == "tool":
            name = names_by_id.get(message.get("tool_call_id", ""), message.get("name", "tool"))
            out.append({"role": "user", "content": f"Result of {name}:\n{message.get('content', '')}"})
        else:
            out.append({k: v for k, v in message.items() if k in ("role", "content")})
    if tools:
        section = describe_tools_for_text_mode(tools)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0].get('content') or ''}\n\n{section}"}
        else:
            out.insert(0, {"role": "system", "content": section})
    return out
