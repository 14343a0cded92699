"""Candidate repairs at the suspect lines: the one-edit rewrites of `repair.repair_edits` and of
`edit_kinds.more_edits` (names misused, operands swapped, a call missing), pairs of them and a few insertions (a
missing `return`, a guard at the function's start), each as a region of its file to replace, in the order a search
should try them.

Test-driven repair with a small model fails because the model rarely writes the right line; the right line is often
one operator, one number or one removal away, and trying those costs test runs, not model calls. The edits are made
inside the enclosing function (dedented, so tree-sitter parses it alone) and spliced back into the file; the model's
likelihood of each rewrite (how much more probable it makes the function after the issue text), when a scorer is
given, orders them together with the rank of the suspect line.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from pinpoint.localization.edit_kinds import guards, more_edits
from pinpoint.localization.mutations import Edit, Source, nodes
from pinpoint.localization.repair import enclosing_functions, repair_edits, rewrite_gains

if TYPE_CHECKING:
    from pinpoint.localization.scorer import LocalScorer

#: without a likelihood, the edit kinds most often right first (operators and off-by-ones, then removals)
KIND_PRIOR = {"other_operator": 0, "number_one_off": 1, "index_one_off": 1, "missing_return": 2, "drop_operand": 2,
              "plain_assignment": 2, "drop_method_call": 3, "unwrap_call": 3, "drop_element": 3, "drop_statement": 4,
              "function_misuse": 5, "swap_operands": 5, "variable_misuse": 6, "missing_call": 7, "guard": 8}
#: the kinds with many edits a line, tried as if their line were this many places further down the suspect list:
#: the cheap kinds of the next few lines come before them
KIND_DELAY = {"function_misuse": 1, "swap_operands": 1, "variable_misuse": 2, "missing_call": 3, "guard": 3}
#: how many places in the likelihood order one step down the suspect list costs
LINE_WEIGHT = 2.0
#: pairs are made of each suspect line's best few singles, on the best few lines
PAIR_PER_LINE = 4
PAIR_LINES = 4


@dataclass(frozen=True)
class _Unit:
    """A region edits are made in: a function (dedented) or, outside any function, the whole file."""

    first: int
    last: int
    indent: str
    code: str
    #: False for the whole file (too long to score)
    function: bool = True


@dataclass(frozen=True)
class Candidate:
    """One repair: lines `first..last` of `path` (1-based; `last = first - 1` inserts before `first`) become
    `replacement` (whole lines, no trailing newline; empty deletes them)."""

    path: str
    first: int
    last: int
    replacement: str
    kinds: tuple[str, ...]
    #: the suspect lines the edits are on, and the best rank among them (0 = the top suspect line)
    lines: tuple[int, ...]
    rank: int
    #: "edit" (one rewrite), "pair" (two), "insertion"
    source: str
    #: the model's repair likelihood (rise of the function's per-token log-prob, times its length); None unscored
    gain: float | None = None
    #: the region the edits were made in and the candidate's rewrite of it, for scoring and pairing
    unit: _Unit | None = field(default=None, repr=False, compare=False)
    rewrite: str = field(default="", repr=False, compare=False)
    edits: tuple[Edit, ...] = field(default=(), repr=False, compare=False)

    @property
    def size(self) -> int:
        """Lines the candidate removes or adds, whichever is more (the edit's size in a diff)."""
        return max(self.last - self.first + 1, len(self.replacement.splitlines()) if self.replacement else 0)

    def apply(self, text: str) -> str:
        lines = text.splitlines(keepends=True)
        new = [line + "\n" for line in self.replacement.split("\n")] if self.replacement else []
        return "".join(lines[: self.first - 1] + new + lines[self.last :])

    def describe(self) -> str:
        where = f"{self.path}:{self.first}" + (f"-{self.last}" if self.last > self.first else "")
        shown = " | ".join(line.strip() for line in self.replacement.splitlines()) or "(lines removed)"
        return f"{where} {'+'.join(self.kinds)}: {shown}"


def _units(text: str, lines: Sequence[int]) -> list[tuple[_Unit, set[int]]]:
    """The innermost function around each line, dedented, with the lines in it (unit-relative); lines outside
    every function share the whole file."""
    source_lines = text.splitlines(keepends=True)
    out = []
    for (first, last), wanted in enclosing_functions(text, lines).items():
        body = "".join(source_lines[first - 1 : last])
        code = textwrap.dedent(body)
        indent = body[: len(body) - len(body.lstrip(" \t"))] if code != body else ""
        out.append((_Unit(first, last, indent, code), {line - first + 1 for line in wanted}))
    loose = set(lines) - {u.first + line - 1 for u, ls in out for line in ls}
    if loose:
        out.append((_Unit(1, len(source_lines), "", text, function=False), loose))
    return out


def _splice(unit: _Unit, rewrite: str) -> tuple[int, int, str]:
    """The file region a unit-level rewrite changes: (first, last, re-indented replacement lines)."""
    old, new = unit.code.splitlines(), rewrite.splitlines()
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    changed = [unit.indent + line if line.strip() else line for line in new[head : len(new) - tail]]
    return unit.first + head, unit.first + len(old) - tail - 1, "\n".join(changed)


def _candidate(path: str, unit: _Unit, rewrite: str, edits: tuple[Edit, ...], lines: tuple[int, ...],
               rank: int, source: str) -> Candidate:
    first, last, replacement = _splice(unit, rewrite)
    return Candidate(path, first, last, replacement, tuple(e.operator for e in edits), lines, rank, source,
                     unit=unit, rewrite=rewrite, edits=edits)


def _missing_returns(unit: _Unit, wanted: set[int]) -> list[tuple[str, Edit, int]]:
    """`expr` made `return expr` on the wanted lines (a function that computes its answer and drops it)."""
    src = Source(unit.code)
    out = []
    stack = [src.tree.root_node]
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.type == "expression_statement" and node.start_point[0] + 1 in wanted and node.named_children and \
                node.named_children[0].type not in {"assignment", "augmented_assignment", "string"}:
            start, _ = src.span(node)
            rewrite = unit.code[:start] + "return " + unit.code[start:]
            out.append((rewrite, Edit(start, start, "return ", "missing_return"), node.start_point[0] + 1))
    return out


def single_candidates(files: dict[str, str], targets: Sequence[tuple[str, int]]) -> list[Candidate]:
    """Every one-edit rewrite (and `return` insertion) on the target lines, which come ranked, best first, and a
    few guards at the start of each function they are in."""
    rank_of: dict[tuple[str, int], int] = {}
    for i, target in enumerate(targets):
        rank_of.setdefault(target, i)
    out: list[Candidate] = []
    for path, text in files.items():
        lines = [line for p, line in rank_of if p == path]
        functions = _function_names(text)
        for unit, wanted in _units(text, lines):
            found = repair_edits(unit.code, wanted) + _missing_returns(unit, wanted) + more_edits(
                unit.code, wanted, functions)
            for rewrite, edit, line in found:
                at = unit.first + line - 1
                source = "insertion" if edit.operator == "missing_return" else "edit"
                out.append(_candidate(path, unit, rewrite, (edit,), (at,), rank_of[(path, at)], source))
            if unit.function:
                rank = min(rank_of[(path, unit.first + line - 1)] for line in wanted)
                out += [_candidate(path, unit, rewrite, (edit,), (unit.first + line - 1,), rank, "insertion")
                        for rewrite, edit, line in guards(unit.code)]
    return out


def _function_names(text: str) -> list[str]:
    """The names of the functions a file defines (what a call in it may have meant instead)."""
    src = Source(text)
    return sorted({src.text(n.child_by_field_name("name")) for n in nodes(src.tree.root_node)
                   if n.type == "function_definition"})


def pair_candidates(ordered: Sequence[Candidate], limit: int) -> list[Candidate]:
    """Up to `limit` two-edit candidates from the best singles: same unit, different lines, best pairs first."""
    per_line: dict[tuple[str, tuple[int, ...]], int] = {}
    pool = []
    for c in ordered:
        key = (c.path, c.lines)
        if c.source == "edit" and per_line.get(key, 0) < PAIR_PER_LINE and (key in per_line or
                                                                             len(per_line) < PAIR_LINES):
            per_line[key] = per_line.get(key, 0) + 1
            pool.append(c)
    pairs = sorted(((i, j) for i in range(len(pool)) for j in range(i + 1, len(pool))), key=lambda ij: (sum(ij), ij))
    out: list[Candidate] = []
    for i, j in pairs:
        a, b = pool[i], pool[j]
        if len(out) >= limit:
            break
        if a.path != b.path or a.unit != b.unit or a.lines == b.lines:
            continue
        code = a.unit.code
        ea, eb = sorted((a.edits[0], b.edits[0]), key=lambda e: e.start)
        if ea.end > eb.start:
            continue
        rewrite = code[: ea.start] + ea.replacement + code[ea.end : eb.start] + eb.replacement + code[eb.end :]
        if Source(rewrite).tree.root_node.has_error:
            continue
        out.append(_candidate(a.path, a.unit, rewrite, (ea, eb), tuple(sorted(a.lines + b.lines)),
                              min(a.rank, b.rank), "pair"))
    return out


def with_likelihood(candidates: Sequence[Candidate], scorer: LocalScorer, description: str) -> list[Candidate]:
    """The candidates with their repair likelihood, scored per function (module-level ones stay unscored)."""
    by_unit: dict[_Unit, list[int]] = {}
    for i, c in enumerate(candidates):
        if c.unit is not None and c.unit.function:
            by_unit.setdefault(c.unit, []).append(i)
    out = list(candidates)
    for unit, indices in by_unit.items():
        gains = rewrite_gains(unit.code, [candidates[i].rewrite for i in indices], scorer, description)
        for i, gain in zip(indices, gains, strict=True):
            out[i] = replace(candidates[i], gain=gain)
    return out


def ordered(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Best first. Scored: the likelihood order, each step down the suspect list worth `LINE_WEIGHT` places;
    unscored: suspect rank (later for the kinds of `KIND_DELAY`), then the kind's prior, then the smaller edit."""
    if candidates and all(c.gain is not None for c in candidates):
        by_gain = sorted(range(len(candidates)), key=lambda i: -(candidates[i].gain or 0.0))
        place = {i: n for n, i in enumerate(by_gain)}
        keys = {i: place[i] + LINE_WEIGHT * candidates[i].rank for i in range(len(candidates))}
        return [candidates[i] for i in sorted(keys, key=lambda i: (keys[i], candidates[i].size))]
    return sorted(candidates, key=lambda c: (c.rank + max(KIND_DELAY.get(k, 0) for k in c.kinds),
                                             min(KIND_PRIOR.get(k, 5) for k in c.kinds), c.size))
