"""Repair likelihood: a line is suspicious when a one-edit rewrite of it makes the program more probable to the LLM.

FLARE reads the LLM's confidence in the code as written; this asks the converse question. Each candidate repair (a
comparison or arithmetic operator from the same family, a number one off, an index one off, and every edit of the
mutation operators, and excess logic taken out) is scored with the description read first, and a line's gain is the
best rise in the program's mean log-probability per token (scaled to its length) over the repairs on it. A bug the
LLM can see is one whose repair it finds more natural.
"""

from __future__ import annotations

import random
import textwrap
from collections.abc import Collection, Iterator, Sequence
from typing import TYPE_CHECKING

from pinpoint.localization.confidence import TokenLogprob
from pinpoint.localization.mutations import OPERATORS, Edit, Source, nodes
from pinpoint.localization.scorer import LocalScorer, description_prefix
from pinpoint.localization.suspects import LocalizationRequest, Suspect
from pinpoint.localization.units import _line_of, _line_starts

if TYPE_CHECKING:
    from pinpoint.localization.diagnostic import DiagnosticLocalizer

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
    per token, times the program's token count (negative: every repair makes the code less probable). Per token, so
    that a repair that removes code does not win for being shorter (the total over fewer tokens is higher by itself);
    times the count, so that gains in a short and a long function compare. Lines with no candidate repair are
    absent."""
    rewrites = repair_edits(code, set(lines) if lines is not None else None)
    gains: dict[int, float] = {}
    for (_, _, line), gain in zip(rewrites, rewrite_gains(code, [new for new, _, _ in rewrites], scorer, description),
                                  strict=True):
        gains[line] = max(gains.get(line, float("-inf")), gain)
    return gains


def rewrite_gains(code: str, rewrites: Sequence[str], scorer: LocalScorer, description: str = "") -> list[float]:
    """Per rewrite of `code`, the change in mean log-prob per token it brings, scaled to the code's token count:
    comparable between functions of any length, and not won by a rewrite for being shorter."""
    if not rewrites:
        return []
    prefix = description_prefix(description)
    base = scorer.score(code, prefix)
    base_mean = _mean_logprob(base)
    scored = scorer.score_mutants(code, list(rewrites), after=_AFTER, prefix=prefix)
    return [(_mean_logprob(tokens) - base_mean) * len(base) for tokens in scored]


def _mean_logprob(tokens: Sequence[TokenLogprob]) -> float:
    return sum(t.logprob for t in tokens) / max(1, len(tokens))


def enclosing_functions(code: str, lines: Collection[int]) -> dict[tuple[int, int], set[int]]:
    """The innermost function around each of `lines`: {(first line, last line): the lines in it}. Lines outside
    every function are left out."""
    spans = [(n.start_point[0] + 1, n.end_point[0] + 1) for n in nodes(Source(code).tree.root_node)
             if n.type == "function_definition"]
    out: dict[tuple[int, int], set[int]] = {}
    for line in lines:
        around = [span for span in spans if span[0] <= line <= span[1]]
        if around:
            out.setdefault(min(around, key=lambda span: span[1] - span[0]), set()).add(line)
    return out


class RepairLocalizer:
    """Implements `Localizer`: the diagnostic model's `top_lines` per file, ranked by repair likelihood within their
    enclosing function, the problem statement read first. Within a function, because a whole file is beyond the
    scorer's window (each rewrite would be read whole) and ~7 candidates a line are too many to score everywhere."""

    name = "repair"

    def __init__(self, diagnostic: DiagnosticLocalizer, top_lines: int = 5):
        self.diagnostic = diagnostic
        self.top_lines = top_lines

    def localize(self, request: LocalizationRequest) -> list[Suspect]:
        suspects = []
        for path, text in request.files.items():
            if not path.endswith(".py"):
                continue
            ranked = self.diagnostic.rank_lines(text, description=request.problem_statement)[: self.top_lines]
            source_lines = text.splitlines(keepends=True)
            for (first, last), wanted in enclosing_functions(text, [r.line for r in ranked]).items():
                function = textwrap.dedent("".join(source_lines[first - 1 : last]))
                gains = line_gains(function, self.diagnostic.scorer, request.problem_statement,
                                   {line - first + 1 for line in wanted})
                for line, gain in gains.items():
                    at = first + line - 1
                    suspects.append(Suspect(path, at, at, gain, self.name, f"its best one-edit repair changes the "
                                            f"function's log-prob (per token, times its length) by {gain:+.2f}"))
        return sorted(suspects, key=lambda s: -s.score)
