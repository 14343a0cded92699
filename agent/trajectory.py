"""Trajectories: one JSON file per run, rewritten atomically after every graph step, and a readable rendering.

The file holds every message, tool call and observation, the suspects, the search candidates with their test
results, timings, token counts and log-probabilities, so a killed or failed run still leaves a complete record of
what happened up to its last step.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from pinpoint.agent.state import state_json
from pinpoint.environments.errors import UsageError
from pinpoint.environments.files import write_json_atomic
from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

FORMAT = "pinpoint-trajectory/1"
STATE_KEYS = ("status", "detail", "final_patch", "patch", "steps", "prompt_tokens", "completion_tokens", "cost_usd",
              "elapsed_s", "suspects", "messages", "events", "test_runs", "candidates", "best", "searches")


class TrajectoryWriter:
    """Keeps the run's metadata and writes `meta + state` to `path` whenever the state changes. Without a known
    price (`cost_known` False: a local server, a model with no listed price) the cost is written as null, so
    `show` says "unknown" rather than $0.0000."""

    def __init__(self, path: Path, meta: dict[str, Any], cost_known: bool = True) -> None:
        self.path = Path(path)
        self.cost_known = cost_known
        self.meta = {"format": FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **meta}

    def write(self, state: dict[str, Any], **extra: Any) -> None:
        data = dict(self.meta)
        data.update({k: state_json(state[k]) for k in STATE_KEYS if k in state})
        data.update(extra)
        if not self.cost_known:
            data["cost_usd"] = None
        data["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write_json_atomic(self.path, data)


def _nullable(kind: str | list[str], **more: Any) -> dict[str, Any]:
    return {"type": [*([kind] if isinstance(kind, str) else kind), "null"], **more}


_TEXT = _nullable("string")
#: the fields `render` reads, with the types it needs; a file that breaks them is refused, not half-rendered
SCHEMA: dict[str, Any] = {"type": "object", "properties": {
    "task": _nullable("object"), "status": _TEXT, "detail": _TEXT, "model": _TEXT, "final_patch": _TEXT,
    "patch": _TEXT, "cost_usd": _nullable("number"), "elapsed_s": _nullable("number"),
    "suspects": _nullable("array", items={"type": "object", "required": ["path", "start_line", "end_line", "score"],
                                          "properties": {"path": {"type": "string"}, "evidence": _TEXT,
                                                         "start_line": {"type": "integer"},
                                                         "end_line": {"type": "integer"},
                                                         "score": {"type": "number"}}}),
    "messages": _nullable("array", items={"type": "object", "properties": {"role": _TEXT, "tool_calls": _nullable(
        "array", items={"type": "object", "properties": {"function": {"type": "object", "properties": {
            "arguments": _TEXT}}}})}}),
    "candidates": _nullable("array", items={"type": "object", "properties": {
        key: _TEXT for key in ("id", "origin", "target", "status")}}),
    "test_runs": _nullable("array", items={"type": "object"}),
}}


def load_trajectory(path: str | Path) -> dict[str, Any]:
    """The trajectory in `path`; ValueError (one line for the CLI) when it is not one `render` can show."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    path = Path(path)
    if path.is_dir():  # a run folder: its trajectory
        path = path / "trajectory.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read trajectory {path}: {exc.strerror}") from exc
    except ValueError as exc:  # invalid JSON, or not UTF-8 text at all
        raise UsageError(f"{path} is not a trajectory (not JSON text: {exc})") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(f"{path} is not a pinpoint trajectory (expected format {FORMAT!r})")
    error = best_match(Draft202012Validator(SCHEMA).iter_errors(data))
    if error is not None:
        where = "/".join(map(str, error.absolute_path)) or "(top level)"
        raise UsageError(f"{path} is not a pinpoint trajectory: field {where}: {error.message[:200]}")
    return data


def _clip(text: str, limit: int) -> str:
    text = text or ""
    return text if len(text) <= limit else text[:limit] + f"\n… [{len(text) - limit} more characters]"


def _edited(counts: Any) -> str:
    if isinstance(counts, dict):
        return f"{counts.get('total', 0)} (+{counts.get('added', 0)} -{counts.get('removed', 0)})"
    return "?" if counts is None else str(counts)


def render(data: dict[str, Any], console: Console, full: bool = False) -> None:
    """Header, suspects, the step-by-step conversation, candidates, tests and the final patch."""
    limit = 100_000 if full else 1500
    task = data.get("task", {})
    header = Table.grid(padding=(0, 2))
    header.add_column(no_wrap=True)
    header.add_column(overflow="fold")  # ids and paths wrap, never cut
    for key, value in (
        ("instance", task.get("instance_id", "?")), ("status", data.get("status", "?")),
        ("detail", data.get("detail") or ""), ("model", data.get("model", "?")),
        ("steps", data.get("steps", 0)),
        ("tokens", f"{data.get('prompt_tokens', 0)} in / {data.get('completion_tokens', 0)} out"),
        ("cost", "unknown" if data.get("cost_usd") is None else f"${data['cost_usd']:.4f}"),
        ("wall", f"{data.get('elapsed_s') or 0.0:.1f}s"), ("edited lines", _edited(data.get("edited_lines"))),
    ):
        header.add_row(Text(key, style="bold"), Text(str(value)))
    console.print(Panel(header, title="pinpoint trajectory"))
    suspects = data.get("suspects") or []
    if suspects:
        table = Table(title="suspects (fused)", show_lines=False)
        for col in ("#", "location", "score", "evidence"):
            table.add_column(col, overflow="fold")
        for i, s in enumerate(suspects[:10]):
            span = f"{s['path']}:{s['start_line']}" + (f"-{s['end_line']}" if s["end_line"] != s["start_line"] else "")
            table.add_row(str(i + 1), Text(span), f"{s['score']:.3f}", Text(_clip(s.get("evidence", ""), 300)))
        console.print(table)
    for i, message in enumerate(data.get("messages") or []):
        role = message.get("role", "?")
        if role == "system" and not full:
            continue
        body = _clip(str(message.get("content") or ""), limit)
        for call in message.get("tool_calls") or []:
            fn = call.get("function", {})
            body += f"\n→ {fn.get('name')}({_clip(fn.get('arguments', ''), 600)})"
        style = {"assistant": "cyan", "tool": "green", "user": "yellow"}.get(role, "white")
        console.print(Panel(Text(body or "(empty)"), title=f"{i} {role}", title_align="left", border_style=style))
    candidates = data.get("candidates") or []
    if candidates:
        table = Table(title="search candidates")
        for col in ("id", "origin", "target", "status", "passed", "failed", "ok", "lines"):
            table.add_column(col, overflow="fold")
        for c in candidates:  # a candidate that was never run (a no-op revision) has no counts: shown as "-"
            counts = ["-" if c.get(k) is None else str(c[k]) for k in ("passed", "failed")]
            table.add_row(c.get("id", ""), c.get("origin", ""), Text(c.get("target", "")), c.get("status", ""),
                          *counts, "yes" if c.get("ok") else "no",
                          "-" if c.get("edited_lines") is None else str(c["edited_lines"]))
        console.print(table)
    for run in data.get("test_runs") or []:
        console.print(Text(f"test ({run.get('source')}) `{run.get('command')}` → exit {run.get('exit_code')}, "
                           f"passed {run.get('passed')}, failed {run.get('failed')}"))
    patch = data.get("final_patch") or data.get("patch") or ""
    console.print(Panel(Syntax(patch, "diff") if patch.strip() else "(empty patch)", title="final patch"))
