"""`run_tests`: run a test command in the runtime and summarise it (exit code, pytest counts, failing tests)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from environments.runtime import Runtime
from tools.base import Tool, ToolError, tail

DEFAULT_TIMEOUT_S = 300
MAX_TIMEOUT_S = 1800
OUTPUT_TAIL_CHARS = 4000
MAX_NAMES = 30

# "=== 2 failed, 10 passed, 1 warning in 0.52s ===", "-q" form without the rules, and pytest<5's "in 0.52 seconds"
_SUMMARY = re.compile(
    r"^=*\s*((?:\d+ [a-z]+(?:, )?)+|no tests ran)\b.*? in [\d.]+ ?s(?:econds)?\b", re.MULTILINE
)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_COUNT = re.compile(r"(\d+) ([a-z]+)")
# "FAILED tests/t.py::test_x - AssertionError" (short summary) and "tests/t.py::test_x FAILED" (verbose)
_SHORT = re.compile(r"^(FAILED|ERROR) (\S+)", re.MULTILINE)
_VERBOSE = re.compile(r"^(\S+::\S+) (FAILED|ERROR)\b", re.MULTILINE)


@dataclass
class PytestSummary:
    counts: dict[str, int] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def parse_pytest(output: str) -> PytestSummary | None:
    """Counts and failing test ids from pytest-style output; None when the output has no pytest summary line."""
    output = _ANSI.sub("", output)
    summaries = _SUMMARY.findall(output)
    failures = _SHORT.findall(output) + [(status, name) for name, status in _VERBOSE.findall(output)]
    if not summaries and not failures:
        return None
    summary = PytestSummary()
    if summaries:
        for number, word in _COUNT.findall(summaries[-1]):
            summary.counts[{"errors": "error", "warnings": "warning"}.get(word, word)] = int(number)
    for status, name in failures:
        bucket = summary.failed if status == "FAILED" else summary.errors
        if name not in bucket:
            bucket.append(name)
    return summary


def _count(number: int, word: str) -> str:
    return f"{number} {word}s" if number != 1 and word in ("error", "warning") else f"{number} {word}"


def run_tests(runtime: Runtime, command: str, timeout: int = DEFAULT_TIMEOUT_S) -> str:
    if not command.strip():
        raise ToolError("The test command is empty; e.g. `python -m pytest -q tests/test_x.py`.")
    result = runtime.run(command, timeout=timeout)
    lines = [f"Command: {command}"]
    if result.timed_out:
        lines.append(
            f"TIMED OUT after {timeout}s: the run was killed; whatever follows is from partial output."
        )
    else:
        lines.append(
            f"Exit code: {result.exit_code}" + (" (success)" if result.exit_code == 0 else " (failure)")
        )
    plain = _ANSI.sub("", result.output)  # projects that force --color=yes; the model reads plain text
    summary = parse_pytest(plain)
    if summary is None:
        lines.append("No pytest summary found in the output.")
    else:
        if summary.counts:
            lines.append("Result: " + ", ".join(_count(n, word) for word, n in summary.counts.items()))
        for title, names in (("Failed tests", summary.failed), ("Errors", summary.errors)):
            if names:
                lines.append(f"{title} ({len(names)}):")
                lines.extend(f"  {name}" for name in names[:MAX_NAMES])
                if len(names) > MAX_NAMES:
                    lines.append(f"  ... and {len(names) - MAX_NAMES} more")
    output = plain.rstrip()
    lines.append("Output (tail):" if output else "Output: (no output)")
    if output:
        lines.append(tail(output, OUTPUT_TAIL_CHARS, "Run a narrower selection of tests to see more."))
    return "\n".join(lines)


RUN_TESTS_TOOL = Tool(
    name="run_tests",
    description=(
        "Run a test command (e.g. `python -m pytest -q tests/test_x.py::test_y`) in the repository root with a "
        "timeout. Reports the exit code, pytest's pass/fail/error counts, the failing tests, and the output's tail."
    ),
    parameters={
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "Shell command that runs the tests."},
            "timeout": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_TIMEOUT_S,
                "description": f"Seconds before the run is killed (default {DEFAULT_TIMEOUT_S}).",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    },
    function=run_tests,
    more_hint="Run a narrower selection of tests to see more.",
)
