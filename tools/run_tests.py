"""`run_tests`: run a test command in the runtime and return it as a typed `TestRun` (exit code, pytest counts,
failing tests); the model reads the run rendered as text."""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field

from pinpoint.environments.runtime import Runtime
from pinpoint.tools.base import Tool, ToolError, tail

DEFAULT_TIMEOUT_S = 300
MAX_TIMEOUT_S = 1800
#: a later run may take this many times the measured one, and never less than the floor (a loaded machine is slow)
HANG_FACTOR = 5.0
HANG_FLOOR_S = 10.0
OUTPUT_TAIL_CHARS = 4000
MAX_NAMES = 30
MORE_HINT = "Run a narrower selection of tests to see more."

# "=== 2 failed, 10 passed, 1 warning in 0.52s ===", "-q" form without the rules, and pytest<5's "in 0.52 seconds"
_SUMMARY = re.compile(
    r"^=*\s*((?:\d+ [a-z]+(?:, )?)+|no tests ran)\b.*? in [\d.]+ ?s(?:econds)?\b", re.MULTILINE
)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_COUNT = re.compile(r"(\d+) ([a-z]+)")
# "FAILED tests/t.py::test_x - AssertionError" (short summary) and "tests/t.py::test_x FAILED" (verbose)
_SHORT = re.compile(r"^(FAILED|ERROR) (\S+)", re.MULTILINE)
_VERBOSE = re.compile(r"^(\S+::\S+) (FAILED|ERROR)\b", re.MULTILINE)
#: exit codes that mean the command never tested anything (bash's, then pytest's ExitCode values)
_SHELL_EXITS = {126: "the command is not executable", 127: "command not found"}
_PYTEST_EXITS = {2: "interrupted (a collection error, e.g. an import that fails)", 4: "usage error",
                 5: "no tests collected"}
#: traceback frames: Python's `File "x.py", line 3` and pytest's short `x.py:3: in f`
_FRAMES = (re.compile(r'File "([^"]+)", line (\d+)'), re.compile(r"^([\w/.-]+\.py):(\d+):", re.MULTILINE))


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


@dataclass(frozen=True)
class Frame:
    """A file and line a traceback passes through."""

    path: str
    line: int


def traceback_frames(output: str) -> list[Frame]:
    """Every frame the output's tracebacks name, in order, each once."""
    found = [Frame(path, int(line)) for regex in _FRAMES for path, line in regex.findall(output)]
    return list(dict.fromkeys(found))


@dataclass
class TestRun:
    """One run of a test command: what the agent scores, routes on and keeps in its state.
    Without a pytest summary, the exit code counts as one test."""

    __test__ = False  # not a pytest test class, whatever its name

    command: str
    exit_code: int | None
    #: the output without ANSI colour codes
    output: str = ""
    timed_out: bool = False
    timeout: float = DEFAULT_TIMEOUT_S
    #: pytest's summary counts ("passed", "failed", "error", ...); None when the output has no pytest summary
    counts: dict[str, int] | None = None
    failed_tests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: edited lines of the patch the run tested (the tie-break between equal runs)
    patch_edited_lines: int = 0
    #: the traceback frames of the output's tail (what the model reads), where a failure points
    frames: list[Frame] = field(default_factory=list)
    #: how long the command ran (None when not measured)
    seconds: float | None = None

    @classmethod
    def parse(cls, command: str, exit_code: int | None, output: str, timed_out: bool = False,
              timeout: float = DEFAULT_TIMEOUT_S) -> TestRun:
        """A run from a command's raw result, its pytest summary read from the output."""
        plain = _ANSI.sub("", output)
        summary = parse_pytest(plain)
        frames = traceback_frames(plain[-OUTPUT_TAIL_CHARS:])
        if summary is None:
            return cls(command, exit_code, plain, timed_out, timeout, frames=frames)
        return cls(command, exit_code, plain, timed_out, timeout, summary.counts, summary.failed, summary.errors,
                   frames=frames)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def passed(self) -> int:
        return self.counts.get("passed", 0) if self.counts else int(self.ok)

    @property
    def failed(self) -> int:
        return self.counts.get("failed", 0) + self.counts.get("error", 0) if self.counts else int(not self.ok)

    def misconfiguration(self) -> str | None:
        """Why this run says nothing about the code (the command is missing or not executable; pytest was
        interrupted, misused or collected no tests), or None when it is a real test outcome, pass or fail."""
        if self.timed_out or self.exit_code is None:
            return None
        if self.exit_code in _SHELL_EXITS:
            return f"exit {self.exit_code}: {_SHELL_EXITS[self.exit_code]}"
        if self.exit_code in _PYTEST_EXITS and ("pytest" in self.command or "py.test" in self.command):
            return f"pytest exit {self.exit_code}: {_PYTEST_EXITS[self.exit_code]}"
        return None

    def key(self) -> tuple:
        """Better runs sort higher: passing first, then more passed, fewer failed, then the smaller edit."""
        return (self.ok, self.passed, -self.failed, -self.patch_edited_lines)

    def to_dict(self, output_chars: int = 4000) -> dict:
        """JSON values (the output's tail only), with the derived ok/passed/failed for readers of trajectories."""
        data = asdict(self)
        data.update(ok=self.ok, passed=self.passed, failed=self.failed, output=self.output[-output_chars:])
        return data

    def render(self) -> str:
        """The run as the model reads it: status, counts, failing tests and the output's tail."""
        if self.timed_out:
            status = (f"TIMED OUT after {self.timeout}s: the run was killed (a hang, e.g. an infinite loop, counts as "
                      "a failing test); whatever follows is from partial output.")
        else:
            status = f"Exit code: {self.exit_code}" + (" (success)" if self.exit_code == 0 else " (failure)")
        lines = [f"Command: {self.command}", status, *self._summary_lines()]
        output = self.output.rstrip()
        lines.append("Output (tail):" if output else "Output: (no output)")
        if output:
            lines.append(tail(output, OUTPUT_TAIL_CHARS, MORE_HINT))
        return "\n".join(lines)

    def _summary_lines(self) -> list[str]:
        if self.counts is None:
            return ["No pytest summary found in the output."]
        lines = ["Result: " + ", ".join(_count(n, word) for word, n in self.counts.items())] if self.counts else []
        for title, names in (("Failed tests", self.failed_tests), ("Errors", self.errors)):
            if names:
                lines.append(f"{title} ({len(names)}):")
                lines.extend(f"  {name}" for name in names[:MAX_NAMES])
                if len(names) > MAX_NAMES:
                    lines.append(f"  ... and {len(names) - MAX_NAMES} more")
        return lines


def _count(number: int, word: str) -> str:
    return f"{number} {word}s" if number != 1 and word in ("error", "warning") else f"{number} {word}"


def run_tests(runtime: Runtime, command: str, timeout: float = DEFAULT_TIMEOUT_S) -> TestRun:
    """Run `command` in the repository root; the tool, the oracle check and search candidates all run through here."""
    if not command.strip():
        raise ToolError("The test command is empty; e.g. `python -m pytest -q tests/test_x.py`.")
    started = time.monotonic()
    result = runtime.run(command, timeout=timeout)
    run = TestRun.parse(command, result.exit_code, result.output, result.timed_out, timeout)
    run.seconds = round(time.monotonic() - started, 3)
    return run


def hang_bound(run: TestRun, cap: float) -> float:
    """The time limit for later runs of the suite `run` measured: a few times what it took, at least
    `HANG_FLOOR_S`, at most `cap`. A bug that loops forever then costs each run seconds, not the full timeout: a
    hang is one more failing test."""
    if run.seconds is None or run.timed_out:
        return min(cap, run.timeout)
    return min(cap, max(HANG_FLOOR_S, HANG_FACTOR * run.seconds))


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
    more_hint=MORE_HINT,
)
