"""What every localization signal produces: ranked suspects, and the interface the agent's `localize` node calls."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Vote:
    """One signal's support for a fused span: the rank (from 1) of that signal's best span containing it, and what
    the signal said there (its own evidence for the span, or where its wider span is)."""

    signal: str
    rank: int
    note: str


@dataclass(frozen=True)
class Placement:
    """Why fusion put a span where reciprocal rank alone would not: `by` a lead (the span's `place` in it, from 1)
    or a file order (`place` 0), and the fused score it had before."""

    by: str
    place: int
    fused: float


@dataclass(frozen=True)
class Suspect:
    """A span of lines one signal finds suspicious. Lines are 1-based and inclusive; `describe()` is what prompts
    quote. A signal's own suspect says why in `evidence`; a fused one in `votes` and `placements`."""

    path: str
    start_line: int
    end_line: int
    score: float
    signal: str
    evidence: str = ""
    #: each signal's support for a fused span, in the members' order
    votes: tuple[Vote, ...] = ()
    #: where fusion moved the span, in the order it did
    placements: tuple[Placement, ...] = ()

    def __post_init__(self) -> None:
        # a checkpoint or a JSON row gives them back as lists
        object.__setattr__(self, "votes", tuple(self.votes))
        object.__setattr__(self, "placements", tuple(self.placements))

    def describe(self) -> str:
        """The evidence as text: the latest placement first, then each signal's vote, then the signal's own words."""
        moved = [f"[{p.by} #{p.place}, fused {p.fused:.4f}]" if p.place else f"[{p.by}, fused {p.fused:.4f}]"
                 for p in reversed(self.placements)]
        votes = " | ".join(f"[{v.signal} #{v.rank}] {v.note}" for v in self.votes)
        return " ".join(part for part in (*moved, votes, self.evidence) if part)

    def to_dict(self) -> dict:
        """JSON values, `evidence` as `describe()` words it (what trajectory readers show)."""
        return {**asdict(self), "evidence": self.describe()}


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
