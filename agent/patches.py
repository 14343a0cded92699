"""Patches and test outcomes as the agent handles them: apply to a reset runtime, count edited lines, score runs."""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from environments.errors import PinpointError
from environments.runtime import Runtime
from tools.run_tests import parse_pytest


class PatchError(PinpointError, RuntimeError):
    """A patch that does not apply to the base commit."""


def edited_lines(patch: str) -> dict[str, int]:
    """Added and removed lines of a unified diff (PreciseCoder's edit size); zeros for an empty patch."""
    if not patch.strip():
        return {"added": 0, "removed": 0, "total": 0, "files": 0}
    try:
        files = PatchSet(patch)
    except UnidiffParseError:
        return {"added": 0, "removed": 0, "total": 0, "files": 0}
    added = sum(f.added for f in files)
    removed = sum(f.removed for f in files)
    return {"added": added, "removed": removed, "total": added + removed, "files": len(files)}


def apply_patch(runtime: Runtime, patch: str) -> None:
    """Reset `runtime` to the base commit and apply `patch` (git apply, new files included)."""
    runtime.reset()
    if not patch.strip():
        return
    path = f".git/pinpoint-{uuid.uuid4().hex[:8]}.patch"  # inside .git: never part of the diff, unique per call
    runtime.write_file(path, patch if patch.endswith("\n") else patch + "\n")
    result = runtime.run(f"git apply --whitespace=nowarn {path}; rc=$?; rm -f {path}; exit $rc", timeout=120)
    if not result.ok:
        runtime.reset()
        raise PatchError(f"patch does not apply to the base commit: {result.output.strip()[-2000:]}")


@dataclass
class TestOutcome:
    """One run of a test command. Without a pytest summary, the exit code counts as one test."""

    command: str
    exit_code: int | None
    passed: int
    failed: int
    timed_out: bool
    output: str
    patch_edited_lines: int = 0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def key(self) -> tuple:
        """Better outcomes sort higher: passing first, then more passed, fewer failed, then the smaller edit."""
        return (self.ok, self.passed, -self.failed, -self.patch_edited_lines)

    def to_dict(self, output_chars: int = 4000) -> dict:
        data = asdict(self)
        data["ok"] = self.ok
        data["output"] = self.output[-output_chars:]
        return data


def outcome_from_output(command: str, exit_code: int | None, output: str, timed_out: bool = False) -> TestOutcome:
    summary = parse_pytest(output)
    if summary is not None and summary.counts:
        passed = summary.counts.get("passed", 0)
        failed = summary.counts.get("failed", 0) + summary.counts.get("error", 0)
    else:
        ok = exit_code == 0 and not timed_out
        passed, failed = int(ok), int(not ok)
    return TestOutcome(command, exit_code, passed, failed, timed_out, output)


def run_test_command(runtime: Runtime, command: str, timeout: float) -> TestOutcome:
    result = runtime.run(command, timeout=timeout)
    outcome = outcome_from_output(command, result.exit_code, result.output, result.timed_out)
    outcome.patch_edited_lines = edited_lines(runtime.diff())["total"]
    return outcome
