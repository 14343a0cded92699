"""Repair likelihood: a line is suspicious when a one-edit rewrite of it makes the program more probable to the LLM.

FLARE reads the LLM's confidence in the code as written; this asks the converse question. Each candidate repair (a
comparison or arithmetic operator from the same family, a number one off, an index one off, and every edit of the
mutation operators, and excess logic taken out) is scored with the description read first, and a line's gain is the
best rise in the program's mean log-probability per token over the repairs on it. A bug the LLM can see is one whose
repair it finds more natural.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterator, Sequence

from localization.confidence import TokenLogprob
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


_ARITHMETIC = {"+", "-", "*", "/", "//", "%", "**"}


def _removals(src: Source) -> Iterator[Edit]:
    """Excess logic taken out: an operand of an arithmetic operation, a method call (`s.strip()` -> `s`), a
    one-argument wrapper (`abs(x)` -> `x`), an element of a collection literal, `op=` made plain `=`, and a simple
    statement on its own lines (the block keeps at least one)."""
    for node in nodes(src.tree.root_node):
        s, e = src.span(node)
        if node.type == "binary_operator" and src.text(node.child_by_field_name("operator")) in _ARITHMETIC:
            for side in ("left", "right"):
                yield Edit(s, e, src.text(node.child_by_field_name(side)), "drop_operand")
        elif node.type == "augmented_assignment":
            op = node.child_by_field_name("operator")
            yield Edit(*src.span(op), "=", "plain_assignment")
        elif node.type == "call":
            func, args = node.child_by_field_name("function"), node.child_by_field_name("arguments")
            if func is not None and func.type == "attribute":
                yield Edit(s, e, src.text(func.child_by_field_name("object")), "drop_method_call")
            elif (func is not None and func.type == "identifier" and args is not None and args.type == "argument_list"
                  and len(args.named_children) == 1 and args.named_children[0].type != "keyword_argument"):
                yield Edit(s, e, src.text(args.named_children[0]), "unwrap_call")
        elif node.type in {"list", "tuple", "set"} and len(node.named_children) >= 2:
            items = node.named_children
            for i, item in enumerate(items):  # up to the next element, or from the previous one for the last
                start, end = (src.span(item)[0], src.span(items[i + 1])[0]) if i + 1 < len(items) else (
                    src.span(items[i - 1])[1], src.span(item)[1])
                yield Edit(start, end, "", "drop_element")
        elif node.type == "block" and len(node.named_children) >= 2:
            for stmt in node.named_children:
                if stmt.type == "expression_statement":
                    start, end = src.span(stmt)
                    line_start = src.code.rfind("\n", 0, start) + 1
                    line_end = src.code.find("\n", end)
                    if src.code[line_start:start].strip() == "" and line_end != -1 and not src.code[end:line_end].strip():
                        yield Edit(line_start, line_end + 1, "", "drop_statement")


def repair_edits(code: str, lines: Collection[int] | None = None) -> list[tuple[str, Edit, int]]:
    """Distinct parsable one-edit rewrites of `code`, each with its edit and the edit's line (deterministic order);
    `lines` keeps only the edits on those lines, before any rewrite is built or parsed."""
    src = Source(code)
    edits = [*_operator_alternatives(src), *_one_off(src), *_removals(src)]
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
    """Per line (of `lines`, default all), the most a one-edit repair on it raises the program's mean log-probability
    per token (negative: every repair makes the code less probable). Per token, so that a repair that removes code
    does not win for being shorter: the total over fewer tokens is higher by itself. Lines with no candidate repair
    are absent."""
    rewrites = repair_edits(code, set(lines) if lines is not None else None)
    if not rewrites:
        return {}
    prefix = description_prefix(description)
    base = _mean_logprob(scorer.score(code, prefix))
    scored = scorer.score_mutants(code, [new for new, _, _ in rewrites], after=_AFTER, prefix=prefix)
    gains: dict[int, float] = {}
    for (_, _, line), tokens in zip(rewrites, scored, strict=True):
        gain = _mean_logprob(tokens) - base
        gains[line] = max(gains.get(line, float("-inf")), gain)
    return gains


def _mean_logprob(tokens: Sequence[TokenLogprob]) -> float:
    return sum(t.logprob for t in tokens) / max(1, len(tokens))
