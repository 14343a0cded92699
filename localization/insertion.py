"""Insertion points: where code may be missing, from what the failing and passing runs executed.

A fix that adds code has no faulty line to find: its gold "line" is the line the new code goes before, which the
failing run may never reach and the spectrum never ranks. This signal proposes such lines inside the spectrum's top
functions, read off the statement lists of their AST and each test's covered lines, no test run of its own:

- `boundary`: in a statement list, the first statement a failing run did not execute after one it did (the run
  stopped there: an exception, a return), and, weaker, the last one it executed (`stop`: a guard goes before it);
- `branch`: an `if` whose branch the failing runs took and the passing runs that reach the `if` did not (or the
  other way round): the first line of that branch, and the line after the whole `if` (where an `elif`/`else` or the
  code after the branch goes);
- `gap`: between two statements of a list that a failing run both executed, where a compound statement ends or a
  blank line separates them (where code is added between paragraphs): the second statement's line, and, weaker,
  the blank line itself (`gap_blank`: the new code goes before the blank line);
- `block_end`: the line after the last statement of an executed statement list (code appended to a block),
  strongest for the innermost such list (`outer_end` otherwise).

A candidate scores as its kind's weight times the spectrum score of the executed line it sits next to, so points by
the most suspicious code lead; ties go to the spectrum's order of that line.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pinpoint.localization.execution import ExecutionEvidence, LineScore, Sources, rank_functions, rank_lines
from pinpoint.localization.fusion import split_ties
from pinpoint.localization.suspects import LocalizationRequest, Suspect

#: how much each kind of point weighs against the spectrum score of the line it sits next to
WEIGHTS = {"boundary": 1.0, "branch": 1.0, "gap": 0.9, "block_end": 0.9, "stop": 0.8, "outer_end": 0.6,
           "gap_blank": 0.5}
TOP_FUNCTIONS = 10
_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try,
             *((ast.TryStar,) if hasattr(ast, "TryStar") else ()), *((ast.Match,) if hasattr(ast, "Match") else ()))
_BODIES = ("body", "orelse", "finalbody")


@dataclass(frozen=True)
class InsertionPoint:
    """A line new code may go before; `anchor` the executed line it sits next to."""

    path: str
    line: int
    kind: str
    anchor: int
    score: float

    def evidence(self) -> str:
        return f"insertion point ({self.kind}) next to line {self.anchor}, run by a failing test"


def _statement_lists(node: ast.AST) -> Iterator[list[ast.stmt]]:
    """Every statement list under `node` (bodies, else branches, handlers), nested definitions left out."""
    for child in ast.walk(node):
        if child is not node and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        for name in _BODIES:
            body = getattr(child, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                yield body
        for handler in getattr(child, "handlers", ()) or ():
            yield handler.body


def _function_node(tree: ast.AST, def_line: int) -> ast.AST | None:
    return next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.lineno == def_line), None)


def _points_in(function: ast.AST, failed: set[int], passed: set[int],
               blank: set[int]) -> Iterator[tuple[int, str, int]]:
    """(line, kind, anchor) for every candidate in one function (`blank`: the file's blank lines)."""
    lists = [body for body in _statement_lists(function)]
    executed = [body for body in lists if any(s.lineno in failed for s in body)]
    for body in executed:
        innermost = not any(inner is not body and body[0].lineno <= inner[0].lineno <= body[-1].end_lineno
                            for inner in executed)
        for before, after in zip(body, body[1:], strict=False):
            if before.lineno in failed and after.lineno not in failed:
                yield after.lineno, "boundary", before.lineno
                yield before.lineno, "stop", before.lineno
            elif before.lineno in failed and (isinstance(before, _COMPOUND) or before.end_lineno + 1 in blank):
                yield after.lineno, "gap", after.lineno
                if before.end_lineno + 1 in blank:
                    yield before.end_lineno + 1, "gap_blank", after.lineno
        last = body[-1]
        if last.lineno in failed:
            yield last.end_lineno + 1, "block_end" if innermost else "outer_end", last.lineno
    for node in ast.walk(function):
        if isinstance(node, ast.If) and node.lineno in failed and node.lineno in passed:
            for branch in (node.body, node.orelse):
                if branch and (branch[0].lineno in failed) != (branch[0].lineno in passed):
                    taken = branch if branch[0].lineno in failed else None
                    if taken is not None:
                        yield taken[0].lineno, "branch", node.lineno
                    yield node.end_lineno + 1, "branch", node.lineno


def insertion_points(evidence: ExecutionEvidence, sources: Sources, top_functions: int = TOP_FUNCTIONS,
                     lines: Sequence[LineScore] | None = None) -> list[InsertionPoint]:
    """Candidate insertion lines in the spectrum's top functions, best first (each line once, its best kind)."""
    lines = rank_lines(evidence) if lines is None else lines
    by_line = {(s.path, s.line): s for s in lines}
    rank = {(s.path, s.line): i for i, s in enumerate(lines)}
    best: dict[tuple[str, int], InsertionPoint] = {}
    for function in rank_functions(lines, sources, top_functions):
        text = sources.text(function.path)
        if function.span is None or text is None:
            continue
        try:
            node = _function_node(ast.parse(text), function.span.def_line)
        except (SyntaxError, ValueError):
            continue
        if node is None:
            continue
        failed = {n for t in evidence.failing for n in t.lines.get(function.path, ())}
        passed = {n for t in evidence.passing for n in t.lines.get(function.path, ())}
        blank = {i for i, row in enumerate(text.splitlines(), 1) if not row.strip()}
        for line, kind, anchor in _points_in(node, failed, passed, blank):
            spectrum = by_line.get((function.path, anchor))
            point = InsertionPoint(function.path, line, kind, anchor, WEIGHTS[kind] * (spectrum.score if spectrum else 0))
            old = best.get((point.path, point.line))
            if old is None or point.score > old.score:
                best[(point.path, point.line)] = point
    return sorted(best.values(), key=lambda p: (-p.score, rank.get((p.path, p.anchor), len(rank)), p.path, p.line))


def insertion_suspects(points: Sequence[InsertionPoint]) -> list[Suspect]:
    return [Suspect(p.path, p.line, p.line, p.score, "insertion", p.evidence()) for p in points]


def tie_break(spectrum: Sequence[Suspect], points: Sequence[InsertionPoint]) -> list[Suspect]:
    """The spectrum with its tied lines split by insertion points: a spectrum line that is also a point rises
    within its tie group by its kind's weight (`fusion.split_ties`)."""
    values: dict[tuple[str, int], float] = {}
    for p in points:
        values[(p.path, p.line)] = max(values.get((p.path, p.line), 0.0), WEIGHTS[p.kind])
    return split_ties(spectrum, values, "insertion", {(p.path, p.line): p.evidence() for p in points})


class InsertionLocalizer:
    """The `insertion` signal over evidence collected beforehand (the spectrum's traced runs)."""

    name = "insertion"

    def __init__(self, evidence: ExecutionEvidence, sources: Sources) -> None:
        self.evidence = evidence
        self.sources = sources

    def points(self) -> list[InsertionPoint]:
        return insertion_points(self.evidence, self.sources)

    def localize(self, request: LocalizationRequest) -> list[Suspect]:
        return insertion_suspects(self.points())
