"""Lexical units: the leaves of the syntax tree, each with a syntactic type, the granularity FLARE scores at.

A unit is a keyword, identifier, operator, literal, punctuation mark or comment. Strings count as one unit (unless
they interpolate expressions, whose parts become units of their own), so a misspelt message is one suspect, not ten.
Languages plug in through `Lexer`; Python is the one shipped.
"""

from __future__ import annotations

import warnings
from bisect import bisect_right
from dataclasses import dataclass
from functools import cache
from typing import Protocol

#: the fixed type vocabulary; the model's type embedding is indexed by position in this tuple
UNIT_TYPES: tuple[str, ...] = (
    "keyword",
    "identifier",
    "operator",
    "punctuation",
    "integer",
    "float",
    "string",
    "boolean",
    "none",
    "comment",
    "other",
)

_PUNCTUATION = frozenset({"(", ")", "[", "]", "{", "}", ",", ":", ";", ".", "->", "\\"})


@dataclass(frozen=True)
class Unit:
    """One lexical unit. `start`/`end` are character offsets into the source; `line` is 1-based."""

    text: str
    type: str
    start: int
    end: int
    line: int


class Lexer(Protocol):
    """Splits source code of one language into lexical units, in source order."""

    language: str

    def units(self, code: str) -> list[Unit]: ...


@dataclass(frozen=True)
class TreeSitterLexer:
    """A lexer over any tree-sitter grammar: leaves become units, `literal_types` map named leaves to unit types.

    `atomic` node types (e.g. strings) are kept whole unless they contain a child of a type in `split_on`.
    """

    language: str
    literal_types: dict[str, str]
    atomic: frozenset[str]
    split_on: frozenset[str]

    def units(self, code: str) -> list[Unit]:
        data = code.encode("utf-8")
        tree = _parser(self.language).parse(data)
        char_of_byte = _byte_to_char(code, data)
        line_starts = _line_starts(code)
        out: list[Unit] = []
        stack = [tree.root_node]
        while stack:
            node = stack.pop()
            keep_whole = node.type in self.atomic and not any(c.type in self.split_on for c in node.children)
            if node.child_count == 0 or keep_whole:
                start, end = char_of_byte[node.start_byte], char_of_byte[node.end_byte]
                if end > start:
                    text = code[start:end]
                    out.append(Unit(text, self._type(node, text), start, end, _line_of(line_starts, start)))
                continue
            stack.extend(reversed(node.children))
        return out

    def _type(self, node, text: str) -> str:
        if node.type in self.literal_types:
            return self.literal_types[node.type]
        if not node.is_named:
            if text in _PUNCTUATION:
                return "punctuation"
            return "keyword" if text.isidentifier() else "operator"
        return "identifier" if "identifier" in node.type else "other"


PYTHON = TreeSitterLexer(
    language="python",
    literal_types={
        "identifier": "identifier",
        "integer": "integer",
        "float": "float",
        "string": "string",
        "concatenated_string": "string",
        "string_start": "string",
        "string_content": "string",
        "string_end": "string",
        "escape_sequence": "string",
        "format_specifier": "string",
        "type_conversion": "string",
        "true": "boolean",
        "false": "boolean",
        "none": "none",
        "comment": "comment",
        "ellipsis": "punctuation",
    },
    atomic=frozenset({"string", "format_specifier"}),
    split_on=frozenset({"interpolation"}),
)

LEXERS: dict[str, Lexer] = {"python": PYTHON}


def lexer_for(language: str) -> Lexer:
    """The lexer for `language`; a clear error names the languages there are."""
    try:
        return LEXERS[language]
    except KeyError:
        raise ValueError(f"no lexer for language {language!r}; available: {sorted(LEXERS)}") from None


def lexical_units(code: str, language: str = "python") -> list[Unit]:
    return lexer_for(language).units(code)


@cache
def _parser(language: str):
    from tree_sitter_languages import get_parser

    with warnings.catch_warnings():  # tree-sitter 0.21 warns about the loader tree-sitter-languages uses
        warnings.simplefilter("ignore", FutureWarning)
        return get_parser(language)


def _byte_to_char(code: str, data: bytes) -> list[int]:
    """Map every byte offset (and the end) to its character offset; tree-sitter speaks bytes, Python characters."""
    if len(data) == len(code):
        return list(range(len(code) + 1))
    table = [0] * (len(data) + 1)
    pos = 0
    for i, ch in enumerate(code):
        width = len(ch.encode("utf-8"))
        for k in range(width):
            table[pos + k] = i
        pos += width
    table[pos] = len(code)
    return table


def _line_starts(code: str) -> list[int]:
    starts = [0]
    starts.extend(i + 1 for i, ch in enumerate(code) if ch == "\n")
    return starts


def _line_of(line_starts: list[int], offset: int) -> int:
    return bisect_right(line_starts, offset)
