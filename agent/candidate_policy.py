"""A model-free repair policy for the RL environment: the edit candidates of the agent's search, tried one at a time
through the same tool calls a model would make.

It reads the suspect lines the first observation lists (`EnvSettings(suspects="oracle")`), views each suspect file,
and then, per candidate (best first, `localization.candidates`): a `str_replace_editor` call that makes the edit,
`run_tests` with the task's test command, and either `submit` when the tests pass or the edit undone. A trainer
sees what a repairer with no model earns on its tasks; with no suspects listed or no test command it submits the
empty patch.
"""

from __future__ import annotations

import re
import shlex
from collections import deque
from typing import Any

from pinpoint.localization.candidates import Candidate, ordered, single_candidates

_SUSPECT = re.compile(r"^\d+\. (\S+?):(\d+)\b", re.MULTILINE)
_NUMBERED = re.compile(r"^\s*(\d+)\t(.*)$")
SUBMIT = {"name": "submit", "arguments": {}}
#: files viewed (the top suspects' own), and candidates tried at most (three actions each)
FILES = 3
CANDIDATES = 10


def test_command_for(task: Any) -> str | None:
    """The task's own test command, else (SWE-bench) pytest on its failing tests: the test-driven setting."""
    if task.test_command:
        return task.test_command
    failing = list(getattr(task.instance, "FAIL_TO_PASS", None) or [])
    return f"python -m pytest -q {shlex.join(failing)}" if failing else None


def parse_view(observation: str) -> str | None:
    """The file text from a `view` observation (numbered lines); None when it is not a whole file from line 1."""
    lines = []
    for raw in observation.splitlines():
        match = _NUMBERED.match(raw)
        if match and int(match.group(1)) == len(lines) + 1:
            lines.append(match.group(2))
    return "\n".join(lines) + "\n" if lines else None


class CandidatesPolicy:
    """Implements the RL `Policy` protocol with no model (see the module docstring)."""

    name = "candidates"

    def __init__(self, task: Any, candidates: int = CANDIDATES) -> None:
        self.command = test_command_for(task)
        self.budget = candidates
        self.targets: list[tuple[str, int]] = []
        self.files: dict[str, str] = {}
        self.pending: deque[str] = deque()  # files still to view
        self.queue: deque[Candidate] = deque()
        self.actions: deque[dict[str, Any]] = deque()
        self.trying: Candidate | None = None

    def act(self, messages: list[dict[str, Any]], tools: list[dict] | None = None
            ) -> tuple[str | dict, dict[str, Any] | None]:
        last = messages[-1]["content"] if messages else ""
        if not self.targets and not self.files:
            self._start(last)
        elif self.pending and self.actions == deque() and self.trying is None:
            self._read(last)
        return self._next(last), None

    def _start(self, first: str) -> None:
        self.targets = [(p, int(n)) for p, n in _SUSPECT.findall(first)]
        self.pending = deque(dict.fromkeys(p for p, _ in self.targets if p.endswith(".py")))
        self.pending = deque(list(self.pending)[:FILES])

    def _read(self, observation: str) -> None:
        path = self.pending.popleft()
        text = parse_view(observation)
        if text is not None:
            self.files[path] = text
        if not self.pending:
            found = single_candidates(self.files, [t for t in self.targets if t[0] in self.files])
            self.queue = deque(ordered(found)[: self.budget])

    def _next(self, observation: str) -> dict[str, Any]:
        if self.command is None or not self.targets:
            return dict(SUBMIT)
        if self.pending:
            return {"name": "view", "arguments": {"path": self.pending[0]}}
        if self.trying is not None and not self.actions:  # the observation is the candidate's test run
            if "Exit code: 0 (success)" in observation:
                return dict(SUBMIT)
            self.actions.append(self._edit(self.trying, undo=True))
            self.trying = None
        if not self.actions and self.queue:
            self.trying = self.queue.popleft()
            self.actions += [self._edit(self.trying, undo=False),
                             {"name": "run_tests", "arguments": {"command": self.command}}]
        return self.actions.popleft() if self.actions else dict(SUBMIT)

    def _edit(self, candidate: Candidate, undo: bool) -> dict[str, Any]:
        """The candidate as an exact `str_replace` (its region with a line of context either side, so that the
        old text is unique), or its reverse."""
        text = self.files[candidate.path]
        lines = text.splitlines()
        lo, hi = max(1, candidate.first - 1), min(len(lines), max(candidate.last, candidate.first) + 1)
        old = "\n".join(lines[lo - 1 : hi])
        new = "\n".join(candidate.apply(text).splitlines()[lo - 1 : hi + len(candidate.apply(text).splitlines())
                                                               - len(lines)])
        if undo:
            old, new = new, old
        return {"name": "str_replace_editor",
                "arguments": {"command": "str_replace", "path": candidate.path, "old_str": old, "new_str": new}}
