"""What every localization signal produces: ranked suspects, and the interface the agent's `localize` node calls."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Suspect:
    """A span of lines one signal finds suspicious. Lines are 1-based and inclusive; `evidence` is quoted in prompts."""

    path: str
    start_line: int
    end_line: int
    score: float
    signal: str
    evidence: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class LocalizationRequest:
    """Everything a localizer may use. Signals take what they need and ignore the rest."""

    problem_statement: str = ""
    #: repository files the localizer may read: path -> source text (callers pass only what is relevant)
    files: dict[str, str] = field(default_factory=dict)
    #: output of failing test runs (tracebacks), if any
    test_output: str = ""
    failing_tests: list[str] = field(default_factory=list)


@runtime_checkable
class Localizer(Protocol):
    """A localization signal: ranked suspects, best first."""

    name: str

    def localize(self, request: LocalizationRequest) -> list[Suspect]: ...
