"""`mentions`: the lines the failing tests ran that name what the issue names.

Why: the spectrum knows which lines a failing run executed but not which of them the report is about; the issue
text names the code it is about (an option, an attribute, a function, a message) but not where it runs. Their
product is a line-level fact neither member has: of the lines the failing tests ran, those that spell one of the
issue's names, a name that few of those lines spell counting more (inverse document frequency over the executed
lines). On the 136 dev rows' cached oracle results, 58% of gold files have a gold line naming an issue mention
against 13% of executed lines (docs/localization.md, "Lines that name what the issue names"). No parameter; the
names are `retrieval.extract_mentions`' (its stop words, backticks, calls, snake and camel case).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence

from pinpoint.localization.retrieval import IDENTIFIER, extract_mentions
from pinpoint.localization.suspects import LocalizationRequest, Suspect

NAME = "mentions"


def issue_names(text: str) -> set[str]:
    """The names the issue text points at (three characters or more), lower-cased."""
    return {m.name.lower() for m in extract_mentions(text)}


def line_names(line: str, names: set[str]) -> set[str]:
    """The issue names a source line spells as identifiers (case ignored)."""
    return {t.lower() for t in IDENTIFIER.findall(line)} & names


class MentionsLocalizer:
    """Single-line suspects: each executed line (`lines`, path and line number, as the spectrum ranks them) that
    names an issue name, scored by the sum of those names' inverse frequency among the executed lines."""

    name = NAME

    def __init__(self, lines: Sequence[tuple[str, int]], text_of: Callable[[str], str | None]) -> None:
        self.lines = list(dict.fromkeys(lines))
        self.text_of = text_of

    def localize(self, request: LocalizationRequest) -> list[Suspect]:
        names = issue_names(request.problem_statement)
        if not names or not self.lines:
            return []
        files: dict[str, list[str]] = {}
        found: dict[tuple[str, int], set[str]] = {}
        for path, line in self.lines:
            if path not in files:
                files[path] = (self.text_of(path) or "").splitlines()
            source = files[path]
            if 0 < line <= len(source) and (named := line_names(source[line - 1], names)):
                found[(path, line)] = named
        spelled = Counter(n for named in found.values() for n in named)
        total = len(self.lines)
        out = [Suspect(path, line, line, round(sum(math.log(1 + total / spelled[n]) for n in named), 6), NAME,
                       "names " + ", ".join(sorted(named)) + " from the issue")
               for (path, line), named in found.items()]
        return sorted(out, key=lambda s: -s.score)
