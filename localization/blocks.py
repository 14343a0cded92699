"""Basic blocks of a Python function's control-flow graph, from `ast`, for LDB-style block traces.

A block is a maximal run of straight-line statements of one statement list. A compound statement's header (an `if`
test, the `with` items, `try:`) ends the run it follows: the condition is the last thing its block computes. Loop
headers are blocks of their own (every iteration jumps back to them), so are `elif` tests; bodies, `else`, `except`,
`finally` and `case` arms start new blocks, and so does the code after a compound statement, after a `return`,
`raise`, `break` or `continue` (unreachable code is still a block: the tracer only reports what runs), and after a
statement that yields (a generator leaves and re-enters there). Expressions never split a block: comprehensions and
lambdas stay in their statement's block, and a nested `def` or `class` is one statement of the outer function.

A line's block is the block whose span holds it; the line tracer maps each executed line to its block that way.
One-line compound statements (`if x: return y`) share their line with their header's block, which wins.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DEFINITIONS = (*_FUNCTIONS, ast.ClassDef)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_JUMPS = (ast.Return, ast.Raise, ast.Break, ast.Continue)
_TRY = (ast.Try, *((ast.TryStar,) if hasattr(ast, "TryStar") else ()))


@dataclass(frozen=True)
class Block:
    """Lines `start_line`..`end_line` (1-based, inclusive) of one basic block; `kind` says how control reaches it."""

    start_line: int
    end_line: int
    kind: str

    def to_json(self) -> list:
        return [self.start_line, self.end_line, self.kind]


@dataclass(frozen=True)
class FunctionSpan:
    """A function or method: `first_line` is its first decorator (what `co_firstlineno` says), `def_line` its def."""

    qualname: str
    first_line: int
    def_line: int
    end_line: int

    @property
    def name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class FunctionBlocks:
    """A function's basic blocks, in source order."""

    path: str
    span: FunctionSpan
    blocks: tuple[Block, ...]

    @property
    def key(self) -> str:
        """`path::qualname`, how traces name the function."""
        return f"{self.path}::{self.span.qualname}"

    def block_at(self, line: int) -> Block | None:
        """The block that holds `line` (the earliest, where a one-line compound statement shares it), or None."""
        return next((b for b in self.blocks if b.start_line <= line <= b.end_line), None)

    def to_json(self) -> dict:
        """The target description the standalone trace runner reads (it cannot import this module)."""
        return {"key": self.key, "path": self.path, "name": self.span.name, "qualname": self.span.qualname,
                "first_line": self.span.first_line, "def_line": self.span.def_line,
                "end_line": self.span.end_line, "blocks": [b.to_json() for b in self.blocks]}


def _start(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", None) or []
    return min([node.lineno, *(d.lineno for d in decorators)])


def _end(node: ast.AST) -> int:
    return node.end_lineno or node.lineno  # type: ignore[attr-defined]


def _functions(tree: ast.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(qualified name, node) of every function and method, nested ones too, in source order."""
    found: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _DEFINITIONS):
                qualname = f"{prefix}{child.name}"
                if isinstance(child, _FUNCTIONS):
                    found.append((qualname, child))
                walk(child, qualname + ".")
            else:
                walk(child, prefix)

    walk(tree, "")
    return sorted(found, key=lambda qf: (_start(qf[1]), qf[1].lineno))


def _span(qualname: str, func: ast.FunctionDef | ast.AsyncFunctionDef) -> FunctionSpan:
    return FunctionSpan(qualname, _start(func), func.lineno, _end(func))


def function_spans(source: str) -> list[FunctionSpan]:
    """Every function and method of a module (nested ones too), with qualified names, in source order."""
    return [_span(q, f) for q, f in _functions(ast.parse(source))]


def innermost_function(spans: list[FunctionSpan], line: int) -> FunctionSpan | None:
    """The narrowest function whose lines (decorators included) hold `line`."""
    holding = [s for s in spans if s.first_line <= line <= s.end_line]
    return min(holding, key=lambda s: s.end_line - s.first_line) if holding else None


class _Splitter:
    """Collects blocks while walking statement lists; `run` is the open straight-line run (start, end)."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.run: list[int] | None = None
        self.kind = "entry"

    def extend(self, start: int, end: int) -> None:
        if self.run is None:
            self.run = [start, end]
        else:
            self.run[1] = max(self.run[1], end)

    def close(self, next_kind: str) -> None:
        if self.run is not None:
            self.blocks.append(Block(self.run[0], self.run[1], self.kind))
        self.run, self.kind = None, next_kind

    def header(self, node: ast.stmt, first_body: ast.stmt) -> None:
        """A compound statement's header joins the open run and ends it."""
        self.extend(_start(node), max(node.lineno, first_body.lineno - 1))

    def statements(self, body: list[ast.stmt], kind: str) -> None:
        self.close(kind)
        for node in body:
            self.statement(node)
        self.close("after")

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, ast.If):
            self._if(node, elif_=False)
        elif isinstance(node, _LOOPS):
            self._loop(node)
        elif isinstance(node, _TRY):
            self._try(node)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            self.header(node, node.body[0])
            self.statements(node.body, "with")
        elif hasattr(ast, "Match") and isinstance(node, ast.Match):
            self.header(node, node.cases[0].pattern)  # type: ignore[arg-type]
            for case in node.cases:
                self.close("case")
                self.extend(case.pattern.lineno, max(case.pattern.lineno, case.body[0].lineno - 1))
                self.statements(case.body, "case_body")
        else:  # simple statement, or a nested def/class: one statement of this function
            self.extend(_start(node), _end(node))
            if _yields(node):
                self.close("resume")
            elif isinstance(node, _JUMPS):
                self.close("after")

    def _if(self, node: ast.If, elif_: bool) -> None:
        if elif_:
            self.close("elif")
        self.header(node, node.body[0])
        self.statements(node.body, "branch")
        if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If) and _is_elif(node.orelse[0], node):
            self._if(node.orelse[0], elif_=True)
        elif node.orelse:
            self.statements(node.orelse, "else")

    def _loop(self, node: ast.For | ast.AsyncFor | ast.While) -> None:
        self.close("loop")
        self.header(node, node.body[0])
        self.statements(node.body, "loop_body")
        if node.orelse:
            self.statements(node.orelse, "loop_else")

    def _try(self, node: ast.Try) -> None:
        self.header(node, node.body[0])
        self.statements(node.body, "try")
        for handler in node.handlers:
            self.close("except")
            self.extend(handler.lineno, max(handler.lineno, handler.body[0].lineno - 1))
            for child in handler.body:
                self.statement(child)
            self.close("after")
        if node.orelse:
            self.statements(node.orelse, "else")
        if node.finalbody:
            self.statements(node.finalbody, "finally")


def _is_elif(inner: ast.If, outer: ast.If) -> bool:
    """`elif` and `else:` + an indented `if` parse alike; an `elif` starts in the column of its `if`."""
    return inner.col_offset == outer.col_offset


def _yields(node: ast.stmt) -> bool:
    """A yield or await of this statement's own frame (not one inside a nested def or a lambda)."""
    if isinstance(node, _DEFINITIONS):
        return False
    stack: list[ast.AST] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, (ast.Yield, ast.YieldFrom, ast.Await)):
            return True
        if not isinstance(current, (ast.Lambda, *_DEFINITIONS)):
            stack.extend(ast.iter_child_nodes(current))
    return False


def _find(tree: ast.Module, name: str | None, line: int | None) -> tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    candidates = [(q, f) for q, f in _functions(tree) if name is None or q == name or q.endswith("." + name)]
    if line is not None:
        candidates = [(q, f) for q, f in candidates if _start(f) <= line <= _end(f)]
        candidates.sort(key=lambda qf: _end(qf[1]) - _start(qf[1]))  # innermost first
    if not candidates:
        where = f" at line {line}" if line is not None else ""
        raise LookupError(f"no function {name or ''}{where}".replace("  ", " "))
    return candidates[0]


def function_blocks(source: str, name: str | None = None, line: int | None = None, path: str = "") -> FunctionBlocks:
    """The basic blocks of the function named `name` (its qualified name or a dotted tail of it: `method`,
    `Class.method`) or holding `line`.

    With both, the innermost function of that name holding the line. Raises LookupError when none matches."""
    qualname, func = _find(ast.parse(source), name, line)
    splitter = _Splitter()
    splitter.statements(func.body, "entry")
    return FunctionBlocks(path, _span(qualname, func), tuple(splitter.blocks))
