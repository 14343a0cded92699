"""Python parsing for the tools: tree-sitter for symbol lookup, and a guard against edits that break syntax."""

from __future__ import annotations

import ast
import functools
import warnings
from dataclasses import dataclass

from tree_sitter import Node, Parser

PYTHON_SUFFIXES = (".py", ".pyi")


@functools.cache
def python_parser() -> Parser:
    """The tree-sitter Python parser (tree-sitter-languages warns about its own deprecated loader; hide it)."""
    import tree_sitter_languages

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return tree_sitter_languages.get_parser("python")


@dataclass(frozen=True)
class SyntaxProblem:
    line: int
    column: int
    message: str


def syntax_problem(source: str) -> SyntaxProblem | None:
    """The first syntax error in `source`, from Python's own parser (the messages models understand best)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(source)
    except SyntaxError as error:
        return SyntaxProblem(error.lineno or 1, error.offset or 0, error.msg)
    except ValueError as error:  # e.g. null bytes in the source
        return SyntaxProblem(1, 0, str(error))
    return None


def _tree_sitter_errors(source: str) -> list[Node]:
    """ERROR and MISSING nodes of the tree-sitter parse; tolerant of old Python dialects `ast` rejects."""
    found: list[Node] = []
    stack = [python_parser().parse(source.encode("utf-8", errors="surrogateescape")).root_node]
    while stack:
        node = stack.pop()
        if node.type == "ERROR" or node.is_missing:
            found.append(node)
        elif node.has_error:
            stack.extend(node.children)
    return found


def broken_by_edit(before: str | None, after: str) -> SyntaxProblem | None:
    """The syntax error an edit introduces, or None.

    A file `ast` already rejected (say, Python 2 code) is judged by tree-sitter instead: the edit is refused only
    if it adds parse errors, so legacy files stay editable.
    """
    problem = syntax_problem(after)
    if problem is None or before is None or syntax_problem(before) is None:
        return problem
    errors_after = _tree_sitter_errors(after)
    if len(errors_after) <= len(_tree_sitter_errors(before)):
        return None
    first = min(errors_after, key=lambda node: node.start_point)
    row, column = first.start_point
    what = f"missing {first.type!r}" if first.is_missing else "invalid syntax"
    return SyntaxProblem(row + 1, column + 1, what)
