"""Repair likelihood: a line is suspicious when a one-edit rewrite of it makes the program more probable to the LLM.

FLARE reads the LLM's confidence in the code as written; this asks the converse question. Each candidate repair (a
comparison or arithmetic operator from the same family, a number one off, an index one off, and every edit of the
mutation operators) is scored with the description read first, and a line's gain is the best rise in the program's
total log-probability over the repairs on it. A bug the LLM can see is one whose repair it finds more natural.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterator

from localization.mutations import OPERATORS, Edit, Source, nodes
from localization.scorer import LocalScorer, description_prefix
from localization.units import _line_of, _line_starts

_FAMILIES = (("<", "<=", ">", ">=", "==", "!="), ("+", "-", "*", "/", "//", "%"), ("and", "or"),
             ("+=", "-=", "*=", "/=", "//=", "%="))
_ALTERNATIVES = {op: [other for other in family if other != op] for family in _FAMILIES for op in family}
#: seeds of the mutation operators' random choices (a wrong variable's name, an off-by-one's sign): more seeds, more
#: of each operator's alternatives become candidates
_SEEDS = range(4)
#: every token after a repair is read again, so a repair's effect on later code counts (short programs; see
#: `LocalScorer.score_mutants`)
_AFTER = 100_000


def _operator_alternatives(src: Source) -> Iterator[Edit]:
    for node in nodes(src.tree.root_node):
        if node.type in {"binary_operator", "comparison_operator", "boolean_operator", "augmented_assignment"}:
            for op in (c for c in node.children if not c.is_named):
                s, e = src.span(op)
                for rep in _ALTERNATIVES.get(src.code[s:e], []):
                    yield Edit(s, e, rep, "other_operator")


def _one_off(src: Source) -> Iterator[Edit]:
    """Numbers and subscripts one off in either direction (off-by-one bugs are the commonest the LLM can see)."""
    for node in nodes(src.tree.root_node):
        s, e = src.span(node)
        if node.type == "integer" and src.text(node).isdigit():
            value = int(src.text(node))
            for rep in {value - 1, value + 1} - {-1}:
                yield Edit(s, e, str(rep), "number_one_off")
        elif node.type == "subscript":
            index = node.child_by_field_name("subscript")
            if index is not None and index.type != "slice":
                _, end = src.span(index)
                for rep in (" - 1", " + 1"):
                    yield Edit(end, end, rep, "index_one_off")


def repair_edits(code: str, lines: Collection[int] | None = None) -> list[tuple[str, Edit, int]]:
    """Distinct parsable one-edit rewrites of `code`, each with its edit and the edit's line (deterministic order);
    `lines` keeps only the edits on those lines, before any rewrite is built or parsed."""
    src = Source(code)
    edits = [*_operator_alternatives(src), *_one_off(src)]
    for seed in _SEEDS:
        rng = random.Random(seed)
        for operator in OPERATORS.values():
            edits.extend(operator(src, rng))
    starts = _line_starts(code)
    out: dict[str, tuple[Edit, int]] = {}
    for edit in edits:
        line = _line_of(starts, edit.start)
        if lines is not None and line not in lines:
            continue
        new = code[: edit.start] + edit.replacement + code[edit.end :]
        if new != code and new not in out and not Source(new).tree.root_node.has_error:
            out[new] = (edit, line)
    return [(new, edit, line) for new, (edit, line) in out.items()]


def line_gains(code: str, scorer: LocalScorer, description: str = "", lines: Collection[int] | None = None
               ) -> dict[int, float]:
    """Per line (of `lines`, default all), the most a one-edit repair on it raises the program's log-probability
    (negative: every repair makes the code less probable). Lines with no candidate repair are absent."""
    rewrites = repair_edits(code, set(lines) if lines is not None else None)
    if not rewrites:
        return {}
    prefix = description_prefix(description)
    base = sum(t.logprob for t in scorer.score(code, prefix))
    scored = scorer.score_mutants(code, [new for new, _, _ in rewrites], after=_AFTER, prefix=prefix)
    gains: dict[int, float] = {}
    for (_, _, line), tokens in zip(rewrites, scored, strict=True):
        gain = sum(t.logprob for t in tokens) - base
        gains[line] = max(gains.get(line, float("-inf")), gain)
    return gains
