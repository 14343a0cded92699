"""The code files the failing tests are named after: test-to-code traceability by naming convention.

Why: a repository's tests are named after what they test (`sympy/core/tests/test_numbers.py` tests
`sympy/core/numbers.py`, `tests/test_util_inspect.py` tests `sphinx/util/inspect.py`), the oldest link from a test
to its unit under test (Van Rompaey and Demeyer, 2009). The spectrum scores lines, not that link, so it ranks the
helpers every failing run passes through above the module the test is about. Grounded in execution: a file counts
only when the failing run that names it also ran it. It has no parameter and no repository's names.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pinpoint.localization.retrieval import is_test_path
from pinpoint.localization.suspects import LocalizationRequest, Suspect

#: what a test file's name adds around the name of what it tests
TEST_PREFIXES = ("test_", "tests_")
TEST_SUFFIXES = ("_test", "_tests")
#: how many trailing path parts a test name may join (`test_ext_napoleon_docstring` -> ext/napoleon/docstring.py)
JOINED_PARTS = 3


def _normal(name: str) -> str:
    """Case and leading underscores do not change what a name says (`_axes.py` is tested by `test_axes.py`)."""
    return name.lower().lstrip("_")


def under_test(test_path: str) -> str | None:
    """What a test file's name says it tests (`test_numbers.py`, `numbers_test.py` -> `numbers`), or None."""
    stem = test_path.rsplit("/", 1)[-1].removesuffix(".py").lower()
    for prefix in TEST_PREFIXES:
        if stem.startswith(prefix) and len(stem) > len(prefix):
            return _normal(stem[len(prefix):]) or None
    for suffix in TEST_SUFFIXES:
        if stem.endswith(suffix) and len(stem) > len(suffix):
            return _normal(stem[:-len(suffix)]) or None
    return None


def test_file_names(module_stem: str) -> set[str]:
    """The file names a test of module `module_stem` goes by (the inverse of `under_test`'s plain form)."""
    return {f"{TEST_PREFIXES[0]}{module_stem}.py", f"{TEST_PREFIXES[1]}{module_stem}.py",
            f"{module_stem}{TEST_SUFFIXES[0]}.py"}


def code_names(path: str) -> set[str]:
    """The names a test may give code file `path`: its module name (a package's for `__init__.py`) and its last
    two and three path parts joined by `_`."""
    parts = path.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    parts = [_normal(p) for p in parts]
    return {"_".join(parts[-n:]) for n in range(1, JOINED_PARTS + 1) if len(parts) >= n}


def _shared_dirs(a: str, b: str) -> int:
    """How many leading folders two paths share: a test beside its module names that one first."""
    shared = 0
    for x, y in zip(a.split("/")[:-1], b.split("/")[:-1], strict=False):
        if x != y:
            break
        shared += 1
    return shared


@dataclass(frozen=True)
class NamedFile:
    """A code file the failing tests are named after, by how many of them (each counted once) and how close."""

    path: str
    tests: int
    shared_dirs: int
    named_by: str


def named_files(failing: Iterable[tuple[str, Iterable[str]]]) -> list[NamedFile]:
    """Per failing test (its file, the files its run executed), the code files it is named after among those it
    ran; best first: named by more failing tests, then nearer the test file, then by path."""
    found: dict[str, NamedFile] = {}
    for test_file, executed in failing:
        name = under_test(test_file)
        if name is None:
            continue
        for path in set(executed):
            if not path.endswith(".py") or is_test_path(path) or name not in code_names(path):
                continue
            before = found.get(path)
            near = _shared_dirs(test_file, path)
            found[path] = NamedFile(path, (before.tests if before else 0) + 1,
                                    max(near, before.shared_dirs if before else 0),
                                    before.named_by if before else test_file)
    return sorted(found.values(), key=lambda f: (-f.tests, -f.shared_dirs, f.path))


class TestNamesLocalizer:
    """`test_names`: each named file as one whole-file suspect (its lines from `line_count`)."""

    name = "test_names"
    __test__ = False  # not a pytest class, whatever its name

    def __init__(self, failing: Sequence[tuple[str, Iterable[str]]], line_count) -> None:
        self.failing, self.line_count = failing, line_count

    def localize(self, request: LocalizationRequest) -> list[Suspect]:
        found = named_files(self.failing)
        return [Suspect(f.path, 1, max(1, self.line_count(f.path)), float(f.tests) + f.shared_dirs / 100, self.name,
                        f"named by {f.named_by}, which ran it ({f.tests} failing tests named after it)" if f.tests > 1
                        else f"named by {f.named_by}, which ran it") for f in found]
