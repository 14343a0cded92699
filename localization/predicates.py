"""Predicate switching (Zhang, Gupta & Gupta, 2006): force the other outcome of a branch the failing tests take near
the spectrum's suspects, rerun the failing tests, and implicate the predicate (and the block it guards) when a failing
test then passes, or, more weakly, when its normalized outcome changes.

A predicate is an `if`/`elif`/`while` test, a conditional expression's test, a comprehension's `if`, or an operand of
a short-circuit `and`/`or` inside one of those, on a line some failing test ran, inside the spectrum's top functions.
Each switch is one edit of the source: `not (cond)` for every evaluation (`all`), or only for its first evaluation in
the run (`first`: the condition wrapped so a flag set on the first pass flips it once). The edits run through MBFL's
harness (`mbfl.run_mutants`: tests loaded once, one forked child per switch with the function's code object swapped,
per-child timeout, outcomes compared normalized), against the failing tests only; results are cached by (file hash,
line, edit), so a second run of the same row runs nothing. Crashed runs (the harness broke) are unknown.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from pinpoint.environments import paths
from pinpoint.environments.runtime import Runtime
from pinpoint.localization.execution import (
    DEFAULT_PYTHON,
    ExecutionEvidence,
    LineScore,
    Sources,
    rank_functions,
    rank_lines,
)
from pinpoint.localization.fusion import split_ties
from pinpoint.localization.mbfl import (
    MbflConfig,
    MutantResult,
    MutationEvidence,
    PlannedMutant,
    TestOutcome,
    failing_ids,
    file_hash,
    outcome_changes,
    run_mutants,
)
from pinpoint.localization.suspects import LocalizationRequest, Suspect

#: the two ways to switch a predicate, run breadth first (every predicate's first evaluation before any `all`)
MODES = ("first", "all")
#: how much a changed-but-still-failing outcome counts beside a failing test made to pass
CHANGED_WEIGHT = 0.1
#: a guarded block's lines are implicated at this share of their predicate's score
BLOCK_WEIGHT = 0.5
#: the flag a `first` switch sets: on `sys`, which every child has, so the edit needs no import of its own
_FLAG = '__import__("sys").__dict__'


@dataclass(frozen=True)
class PredicateConfig:
    """The budget: at most `max_predicates` predicates in the spectrum's top `top_functions` functions, each
    switched in every mode of `modes`; the cost bounded by `3 x the failing tests' own run + slack_s`."""

    top_functions: int = 5
    max_predicates: int = 40
    modes: tuple[str, ...] = MODES
    slack_s: float = 45.0
    budget_s: float | None = None
    #: where results are cached (None: not cached); `$PINPOINT_CACHE/predicates` by default, resolved when made
    cache_dir: Path | None = field(default_factory=lambda: paths.cache_dir() / "predicates")
    #: fuse `predicates` as a member (the switches that made a failing test pass: `fusion.FusionRule()`), those
    #: that made half the failing tests pass leading the top file; chosen leave one repository out on 91 dev rows of
    #: 8 repositories among variants that include switching as the spectrum's tie-break (docs/localization.md, "All
    #: measured dev rows")
    fuse_member: bool = True

    def harness(self) -> MbflConfig:
        """MBFL's harness settings for switches: failing tests only, this budget and cache."""
        return MbflConfig(max_passing=0, slack_s=self.slack_s, budget_s=self.budget_s, cache_dir=self.cache_dir)


@dataclass(frozen=True)
class Predicate:
    """One branch condition: `[start, end)` its characters in the file, `line` its first line, `kind` what holds it,
    `block_end` the last line of the statement it guards (its own line for an expression)."""

    path: str
    line: int
    kind: str
    start: int
    end: int
    text: str
    block_end: int


@dataclass(frozen=True)
class PredicateScore:
    """A predicate's best switch: the share of failing tests it made pass, the share whose outcome it changed."""

    path: str
    line: int
    block_end: int
    switched: float
    changed: float
    mode: str
    runs: int

    @property
    def score(self) -> float:
        return min(1.0, self.switched + CHANGED_WEIGHT * self.changed)

    def evidence(self) -> str:
        return (f"switching it ({self.mode}) makes {self.switched:.0%} of the failing tests pass, changes "
                f"{self.changed:.0%} ({self.runs} switches ran)")


# -- finding predicates --------------------------------------------------------------------------------------------
def _conditions(tree: ast.AST) -> Iterator[tuple[ast.expr, str, ast.AST]]:
    """(condition, kind, the node it guards) for every branch condition of a module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            yield node.test, "if", node
        elif isinstance(node, ast.While):
            yield node.test, "while", node
        elif isinstance(node, ast.IfExp):
            yield node.test, "ifexp", node.test
        elif isinstance(node, ast.comprehension):
            yield from ((c, "comprehension", c) for c in node.ifs)


def find_predicates(path: str, text: str) -> list[Predicate]:
    """Every branch condition of a module and the short-circuit operands inside them, in source order."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    offsets = _line_offsets(text)
    found = []
    for condition, kind, guarded in _conditions(tree):
        parts = [(condition, kind)]
        if isinstance(condition, ast.BoolOp):  # an operand decides whether the rest is evaluated
            parts += [(v, "operand") for v in condition.values[:-1]]
        for expr, what in parts:
            start, end = _offset(text, offsets, expr.lineno, expr.col_offset), _offset(
                text, offsets, expr.end_lineno, expr.end_col_offset)
            block_end = guarded.end_lineno if what in ("if", "while") else expr.lineno
            found.append(Predicate(path, expr.lineno, what, start, end, text[start:end], block_end))
    return sorted(found, key=lambda p: (p.start, -p.end))  # a whole condition before its first operand


def _line_offsets(text: str) -> list[int]:
    offsets = [0]
    for line in text.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    return offsets


def _offset(text: str, offsets: list[int], line: int, col: int) -> int:
    """A character offset from ast's (line, UTF-8 byte column)."""
    start = offsets[line - 1]
    row = text[start: offsets[line] if line < len(offsets) else len(text)]
    return start + len(row.encode("utf-8")[:col].decode("utf-8", "replace"))


def switch_text(predicate: Predicate, mode: str) -> str:
    """The condition's replacement: negated always, or only on its first evaluation (the original text is kept
    once, with its line breaks, so every later line keeps its number; the unflipped copy is one line)."""
    if mode == "all":
        return f"(not ({predicate.text}))"
    flat = ast.unparse(ast.parse(f"({predicate.text})", mode="eval"))
    first = f'not {_FLAG}.setdefault("_pinpoint_switched", []) and not {_FLAG}["_pinpoint_switched"].append(1)'
    return f"((not ({predicate.text})) if {first} else ({flat}))"


def plan_switches(evidence: ExecutionEvidence, sources: Sources, config: PredicateConfig = PredicateConfig(),
                  lines: Sequence[LineScore] | None = None) -> tuple[list[PlannedMutant], dict[str, Predicate]]:
    """The switches to run, best predicates first (by their line's spectrum rank), each mode breadth first; and
    each switch's predicate by switch id."""
    lines = rank_lines(evidence) if lines is None else lines
    rank = {(s.path, s.line): i for i, s in enumerate(lines)}
    ran = {(p, n) for t in evidence.failing for p, ns in t.lines.items() for n in ns}
    chosen: list[Predicate] = []
    for function in rank_functions(lines, sources, config.top_functions):
        text = sources.text(function.path)
        if function.span is None or text is None:
            continue
        span = function.span
        chosen += [p for p in find_predicates(function.path, text)
                   if span.def_line <= p.line <= span.end_line and (p.path, p.line) in ran and p not in chosen]
    chosen = sorted(chosen, key=lambda p: (rank.get((p.path, p.line), len(rank)), p.start))[: config.max_predicates]
    planned, of = [], {}
    for mode in config.modes:
        for p in chosen:
            text = sources.text(p.path) or ""
            switch = PlannedMutant(p.path, p.line, f"switch-{mode}-{p.kind}", p.start, p.end, switch_text(p, mode),
                                   file_hash(text))
            planned.append(switch)
            of[switch.id] = p
    return planned, of


# -- running and scoring -------------------------------------------------------------------------------------------
@dataclass
class SwitchEvidence:
    """Every switch's run (MBFL's harness evidence) and the predicate each one switched."""

    runs: MutationEvidence
    predicates: dict[str, Predicate]

    @property
    def seconds(self) -> float:
        return self.runs.seconds

    @property
    def status(self) -> str:
        return self.runs.status

    def summary(self) -> str:
        return f"{len(set(self.predicates.values()))} predicates switched: {self.runs.summary()}"


def collect_switches(runtime: Runtime, evidence: ExecutionEvidence, sources: Sources,
                     config: PredicateConfig = PredicateConfig(), *, python: str = DEFAULT_PYTHON,
                     pytest_args: Sequence[str] = ()) -> SwitchEvidence:
    """Plan the switches and run them against the failing tests (the whole signal's cost)."""
    planned, of = plan_switches(evidence, sources, config)
    runs = run_mutants(runtime, evidence, planned, config.harness(), python=python, pytest_args=pytest_args)
    return SwitchEvidence(runs, of)


def predicate_scores(results: Sequence[MutantResult], baseline: dict[str, TestOutcome], failing: Sequence[str],
                     predicates: dict[str, Predicate]) -> dict[tuple[str, int], PredicateScore]:
    """Per predicate line, its best switch (failing tests made to pass first, then outcomes changed); switches
    that crashed the harness are left out."""
    total = len(failing_ids(baseline, failing)) or 1
    out: dict[tuple[str, int], PredicateScore] = {}
    for r in results:
        if not r.informative or r.mutant.id not in predicates:
            continue
        p = predicates[r.mutant.id]
        fk, _, f2p, _ = outcome_changes(r, baseline, failing)
        mode = r.mutant.operator.split("-")[1]
        new = PredicateScore(p.path, p.line, p.block_end, min(1.0, f2p / total), min(1.0, fk / total), mode, 1)
        old = out.get((p.path, p.line))
        if old is not None:
            best = max(old, new, key=lambda s: (s.switched, s.changed))
            new = replace(best, runs=old.runs + 1)
        out[(p.path, p.line)] = new
    return out


def predicate_suspects(scores: dict[tuple[str, int], PredicateScore],
                       order: Sequence[tuple[str, int]] = ()) -> list[Suspect]:
    """Switched predicates by score, then the spectrum's order; an implicated `if`/`while` is followed by the
    statement it guards (a span, at `BLOCK_WEIGHT` of its score)."""
    rank = {k: i for i, k in enumerate(order)}
    ranked = sorted(scores.values(), key=lambda s: (-s.score, rank.get((s.path, s.line), len(rank)), s.path, s.line))
    out = []
    for s in ranked:
        out.append(Suspect(s.path, s.line, s.line, s.score, "predicates", s.evidence()))
        if s.score > 0 and s.block_end > s.line:
            out.append(Suspect(s.path, s.line, s.block_end, BLOCK_WEIGHT * s.score, "predicates",
                               f"the block line {s.line}'s predicate guards; {s.evidence()}"))
    return sorted(out, key=lambda x: -x.score)


def line_values(scores: dict[tuple[str, int], PredicateScore]) -> dict[tuple[str, int], float]:
    """Per line, what predicate switching says of it: an implicated predicate's score, and `BLOCK_WEIGHT` of it on
    every line of the block it guards (the better where two meet)."""
    out: dict[tuple[str, int], float] = {}
    for s in scores.values():
        if s.score <= 0:
            continue
        for line in range(s.line + 1, s.block_end + 1):
            out[(s.path, line)] = max(out.get((s.path, line), 0.0), BLOCK_WEIGHT * s.score)
    for s in scores.values():
        out[(s.path, s.line)] = max(out.get((s.path, s.line), 0.0), s.score)
    return out


def tie_break(spectrum: Sequence[Suspect], scores: dict[tuple[str, int], PredicateScore]) -> list[Suspect]:
    """The spectrum with its tied lines split by predicate switching (`fusion.split_ties`)."""
    notes = {(s.path, s.line): s.evidence() for s in scores.values()}
    return split_ties(spectrum, line_values(scores), "predicates", notes)


class PredicateLocalizer:
    """The `predicates` signal over switches run beforehand (`collect_switches`)."""

    name = "predicates"

    def __init__(self, switches: SwitchEvidence, evidence: ExecutionEvidence) -> None:
        self.switches = switches
        self.order = [(s.path, s.line) for s in rank_lines(evidence)]

    def scores(self) -> dict[tuple[str, int], PredicateScore]:
        runs = self.switches.runs
        return predicate_scores(runs.results, runs.baseline, runs.failing, self.switches.predicates)

    def localize(self, request: LocalizationRequest) -> list[Suspect]:
        return predicate_suspects(self.scores(), self.order)
