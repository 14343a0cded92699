"""Figures for docs/security.md, printed at the end of a pytest run: how many cases a module tried and how many
came out as they must (faults survived, bad inputs rejected cleanly).

A module creates one `Tally` per kind of figure and calls `count(kind, ok)` per case; `summary_fixture` prints one
line per tally on pytest's terminal (shown even with -q), so the figure and the command that reproduces it are the
same thing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest


@dataclass(eq=False)  # a pytest plugin: pluggy keeps its plugins in sets
class Tally:
    """Cases tried and cases that came out right, per kind (e.g. `show`, `eval --predictions`)."""

    title: str
    tried: Counter = field(default_factory=Counter)
    ok: Counter = field(default_factory=Counter)

    def count(self, kind: str, ok: bool = True) -> None:
        self.tried[kind] += 1
        self.ok[kind] += int(ok)

    def line(self) -> str:
        kinds = ", ".join(f"{k} {self.ok[k]}/{self.tried[k]}" for k in sorted(self.tried))
        return f"{self.title}: {sum(self.ok.values())}/{sum(self.tried.values())} ({kinds})"


class OutcomeTally(Tally):
    """A pytest plugin: each test of `module` is one case, ok when it passed (a failed test is a fault not
    survived)."""

    def __init__(self, title: str, module: str) -> None:
        super().__init__(title)
        self.module = module

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.module not in report.nodeid:
            return
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            if report.skipped:
                return
            self.count(report.nodeid.split("::")[-1].split("[")[0].removeprefix("test_"), report.passed)


class _Summary:
    """Writes the tallies' lines in pytest's terminal summary (after the run, outside output capture)."""

    def __init__(self, tallies: tuple[Tally, ...]) -> None:
        self.tallies = tallies

    def pytest_terminal_summary(self, terminalreporter) -> None:
        for tally in self.tallies:
            if tally.tried:
                terminalreporter.write_line(tally.line())


def print_tallies(config: pytest.Config, *tallies: Tally) -> None:
    """Show each tally's line at the end of the run (what `pytest -q` still shows)."""
    name = f"pinpoint-tally-{'-'.join(t.title for t in tallies)}"
    if not config.pluginmanager.has_plugin(name):
        config.pluginmanager.register(_Summary(tallies), name)
