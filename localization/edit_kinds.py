"""Edit kinds `repair.repair_edits` lacks, for the candidate search: a name used in place of another (a variable or
a function), operands in the wrong order, a call left out, and a guard missing at a function's start.

These are the common one-token bugs beyond operators and numbers (variable and function misuse are as frequent as
operator misuse in the classic bug sets), and the commonest missing statement (an early return on empty input).
They multiply with the names in scope, so each line gets a bounded number, the likeliest first: names that occur
near the line before those far from it, and confusable functions from a fixed table of siblings.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence

from pinpoint.localization.mutations import Edit, Source, nodes
from pinpoint.localization.units import _line_of, _line_starts

#: functions and methods commonly written one for the other
SIBLINGS = (("min", "max"), ("any", "all"), ("sorted", "reversed"), ("append", "extend"),
            ("lower", "upper", "swapcase"), ("startswith", "endswith"), ("find", "rfind"), ("index", "rindex"),
            ("floor", "ceil"), ("isupper", "islower"), ("isdigit", "isalpha"), ("keys", "values", "items"),
            ("strip", "lstrip", "rstrip"), ("split", "rsplit"), ("int", "float"), ("list", "set", "sorted"),
            ("sum", "len"), ("remove", "discard"))
_SIBLING = {name: [o for o in group if o != name] for group in SIBLINGS for name in group}
#: calls a value is often missing (`x` where `abs(x)` was meant)
WRAPPERS = ("abs", "len", "sorted", "set", "list", "int", "str", "sum")
#: operators whose operands do not commute (and `+`, which does not on strings and lists)
_ORDERED_OPS = {"-", "/", "//", "%", "**", "+", "<<", ">>"}
#: per line, at most this many edits of each generator; per function, at most this many guards
PER_LINE = 24
GUARDS = 12
#: what a guard returns when the function shows no literal return value to copy
GUARD_VALUES = ("None", "[]", "0", "False", "''")
_BINDERS = {"parameters", "lambda_parameters", "default_parameter", "typed_parameter", "typed_default_parameter"}


def more_edits(code: str, lines: Collection[int], functions: Sequence[str] = ()) -> list[tuple[str, Edit, int]]:
    """Distinct parsable rewrites of `code` (one function, dedented) on `lines`: variable misuse, function misuse
    (`functions`: other functions of the file a call may have meant), swapped operands, a missing call; each with
    its edit and line, at most `PER_LINE` per generator and line."""
    src = Source(code)
    starts = _line_starts(code)
    out: dict[str, tuple[Edit, int]] = {}
    for generator in (_variable_misuse(src, lines), _function_misuse(src, lines, functions), _swaps(src, lines),
                      _wraps(src, lines)):
        per_line: dict[int, int] = {}
        for edit in generator:
            line = _line_of(starts, edit.start)
            if line not in lines or per_line.get(line, 0) >= PER_LINE:
                continue
            new = code[: edit.start] + edit.replacement + code[edit.end :]
            if new != code and new not in out and not Source(new).tree.root_node.has_error:
                out[new] = (edit, line)
                per_line[line] = per_line.get(line, 0) + 1
    return [(new, edit, line) for new, (edit, line) in out.items()]


def _on(src: Source, node, lines: Collection[int]) -> bool:
    return node.start_point[0] + 1 in lines


def _values(src: Source) -> list:
    """The identifiers the function reads or binds as values: not calls, attributes, keywords or its own name."""
    out = []
    for node in nodes(src.tree.root_node):
        parent = node.parent
        if node.type != "identifier" or parent is None or parent.type in {"function_definition", "keyword_argument"}:
            continue
        if parent.type in {"attribute", "call"} and node in (parent.child_by_field_name("attribute"),
                                                             parent.child_by_field_name("function")):
            continue
        out.append(node)
    return out


def _variable_misuse(src: Source, lines: Collection[int]) -> Iterator[Edit]:
    """Each value name on a line (not a parameter's declaration) replaced by another name of the function, the
    names occurring nearest the line first."""
    values = _values(src)
    names: dict[str, list[int]] = {}
    for node in values:
        names.setdefault(src.text(node), []).append(node.start_point[0] + 1)
    for node in values:
        if not _on(src, node, lines) or node.parent.type in _BINDERS:
            continue
        text, line = src.text(node), node.start_point[0] + 1
        others = sorted((n for n in names if n != text), key=lambda n: (min(abs(x - line) for x in names[n]), n))
        s, e = src.span(node)
        for other in others:
            yield Edit(s, e, other, "variable_misuse")


def _function_misuse(src: Source, lines: Collection[int], functions: Sequence[str]) -> Iterator[Edit]:
    """A called function or method replaced by a sibling (`min`/`max`, `startswith`/`endswith`, ...) or, for a
    plain call, by another function of the file."""
    for node in nodes(src.tree.root_node):
        if node.type != "call" or not _on(src, node, lines):
            continue
        func = node.child_by_field_name("function")
        name = func.child_by_field_name("attribute") if func is not None and func.type == "attribute" else func
        if name is None or name.type != "identifier":
            continue
        text = src.text(name)
        others = list(_SIBLING.get(text, []))
        if func.type == "identifier":
            others += [f for f in functions if f != text and f not in others]
        s, e = src.span(name)
        for other in others:
            yield Edit(s, e, other, "function_misuse")


def _swaps(src: Source, lines: Collection[int]) -> Iterator[Edit]:
    """The two operands of a non-commutative operation or comparison, or two neighbouring elements of a tuple or
    list (an assignment's targets too), in the other order."""
    for node in nodes(src.tree.root_node):
        if not _on(src, node, lines):
            continue
        pairs = []
        if node.type == "binary_operator" and src.text(node.child_by_field_name("operator")) in _ORDERED_OPS:
            pairs.append((node.child_by_field_name("left"), node.child_by_field_name("right")))
        elif node.type == "comparison_operator" and len(node.named_children) == 2:
            pairs.append(tuple(node.named_children))
        elif node.type in {"tuple", "list", "pattern_list", "expression_list"}:
            items = [c for c in node.named_children if c.type != "comment"]
            pairs.extend(zip(items, items[1:], strict=False))
        for a, b in pairs:
            if a is None or b is None or src.text(a) == src.text(b):
                continue
            (s, mid), (mid_end, e) = src.span(a), src.span(b)
            yield Edit(s, e, src.text(b) + src.code[mid:mid_end] + src.text(a), "swap_operands")


def _wraps(src: Source, lines: Collection[int]) -> Iterator[Edit]:
    """A value returned, assigned, compared or passed, wrapped in a common call it may be missing."""
    for node in nodes(src.tree.root_node):
        if not _on(src, node, lines):
            continue
        values = []
        if node.type == "return_statement" and node.named_children:
            values.append(node.named_children[0])
        elif node.type in {"assignment", "augmented_assignment"}:
            values.append(node.child_by_field_name("right"))
        elif node.type in {"comparison_operator", "argument_list"}:
            values.extend(c for c in node.named_children if c.type not in {"keyword_argument", "comment"})
        for value in values:
            if value is None or value.type in {"string", "integer", "float", "true", "false", "none", "tuple"}:
                continue
            s, e = src.span(value)
            for wrapper in WRAPPERS:
                yield Edit(s, e, f"{wrapper}({src.text(value)})", "missing_call")


def guards(code: str) -> list[tuple[str, Edit, int]]:
    """`if not <parameter>: return <value>` inserted before the function's first statement (after its docstring):
    the early return on empty input a function is often missing. Values: the literals the function already returns,
    then a few common ones; at most `GUARDS`."""
    src = Source(code)
    func = next((n.child_by_field_name("definition") if n.type == "decorated_definition" else n
                 for n in src.tree.root_node.named_children), None)
    func = func if func is not None and func.type == "function_definition" else None
    body = func.child_by_field_name("body") if func is not None else None
    if body is None or not body.named_children:
        return []
    params = [src.text(p) for p in func.child_by_field_name("parameters").named_children if p.type == "identifier"]
    params = [p for p in params if p not in {"self", "cls"}]
    statements = [s for s in body.named_children if s.type != "comment"]
    first = statements[0]
    if first.type == "expression_statement" and first.named_children and first.named_children[0].type == "string":
        if len(statements) < 2:
            return []
        first = statements[1]
    returned = [src.text(n.named_children[0]) for n in nodes(func) if n.type == "return_statement" and
                n.named_children and n.named_children[0].type in {"string", "integer", "float", "true", "false",
                                                                  "none", "list", "tuple"}
                and len(src.text(n.named_children[0])) <= 20]
    values = list(dict.fromkeys(returned[::-1] + list(GUARD_VALUES)))
    start = src.code.rfind("\n", 0, src.span(first)[0]) + 1
    indent = src.code[start : src.span(first)[0]]
    out = []
    for value in values:
        for param in params:
            text = f"{indent}if not {param}:\n{indent}    return {value}\n"
            out.append((code[:start] + text + code[start:], Edit(start, start, text, "guard"),
                        first.start_point[0] + 1))
    return out[:GUARDS]
