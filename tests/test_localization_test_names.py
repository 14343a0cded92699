"""`test_names`: the code files the failing tests are named after (and ran), and how fusion puts them first."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pinpoint.localization.fusion import PLAIN_RULE, fuse
from pinpoint.localization.suspects import LocalizationRequest, Suspect
from pinpoint.localization.test_names import TestNamesLocalizer, code_names, named_files, under_test


@pytest.mark.parametrize("test_path, name", [
    ("sympy/core/tests/test_numbers.py", "numbers"),
    ("tests/test_util_inspect.py", "util_inspect"),
    ("testing/test_assertrewrite.py", "assertrewrite"),
    ("pkg/numbers_test.py", "numbers"),
    ("lib/tests/test__axes.py", "axes"),
    ("tests/forms_tests/tests.py", None),
    ("tests/conftest.py", None),
    ("test_.py", None),
])
def test_a_test_file_name_says_what_it_tests(test_path, name):
    assert under_test(test_path) == name


def test_a_code_file_goes_by_its_module_its_package_and_its_joined_parts():
    assert code_names("sphinx/ext/napoleon/docstring.py") == {"docstring", "napoleon_docstring",
                                                               "ext_napoleon_docstring"}
    assert code_names("sphinx/util/inspect.py") >= {"inspect", "util_inspect"}
    assert "autodoc" in code_names("sphinx/ext/autodoc/__init__.py")
    assert "axes" in code_names("lib/matplotlib/axes/_axes.py")


def test_only_files_the_naming_test_ran_count_and_more_tests_come_first():
    helpers = "sympy/core/tests/helpers.py"
    failing = [
        ("sympy/core/tests/test_numbers.py", ["sympy/core/numbers.py", "sympy/core/basic.py", helpers]),
        ("sympy/core/tests/test_numbers.py", ["sympy/core/numbers.py"]),
        ("sympy/core/tests/test_basic.py", ["sympy/core/basic.py"]),
        ("sympy/printing/tests/test_str.py", ["sympy/core/numbers.py"]),  # no str.py ran: names nothing
    ]
    found = named_files(failing)
    assert [(f.path, f.tests) for f in found] == [("sympy/core/numbers.py", 2), ("sympy/core/basic.py", 1)]


def test_a_nearer_module_of_the_same_name_comes_first():
    failing = [("pkg/io/tests/test_core.py", ["pkg/core.py", "pkg/io/core.py"])]
    assert [f.path for f in named_files(failing)] == ["pkg/io/core.py", "pkg/core.py"]


def test_the_localizer_gives_whole_file_suspects():
    localizer = TestNamesLocalizer([("tests/test_models.py", ["app/models.py"])], lambda path: 120)
    assert localizer.localize(LocalizationRequest()) == [
        Suspect("app/models.py", 1, 120, 1.0, "test_names", "named by tests/test_models.py, which ran it")]


def _line(path: str, line: int, score: float, signal: str = "spectrum") -> Suspect:
    return Suspect(path, line, line, score, signal)


def test_fusion_puts_the_named_file_first_and_leads_it_with_the_spectrums_lines_there():
    """The spectrum ranks a helper every failing run passes through above the module the test is about; with the
    named file the fused list opens with that module, its own best spectrum lines first."""
    spectrum = [_line("app/helpers.py", 10, 0.9), _line("app/helpers.py", 11, 0.9), _line("app/models.py", 40, 0.7),
                _line("app/models.py", 41, 0.6)]
    ldb = [_line("app/helpers.py", 10, 1.0, "ldb")]
    named = [Suspect("app/models.py", 1, 200, 1.0, "test_names")]
    plain = fuse({"spectrum": spectrum, "ldb": ldb}, rule=PLAIN_RULE)
    assert plain[0].path == "app/helpers.py"
    fused = fuse({"spectrum": spectrum, "ldb": ldb, "test_names": named}, rule=PLAIN_RULE)
    assert [(s.path, s.start_line) for s in fused[:2]] == [("app/models.py", 40), ("app/models.py", 41)]
    assert all(a.score >= b.score for a, b in zip(fused, fused[1:], strict=False))  # in score order for every reader
    default = fuse({"spectrum": spectrum, "ldb": ldb, "test_names": named})  # no spectrum lead: the file opens
    assert (default[0].path, default[0].start_line) == ("app/models.py", 40)
    off = fuse({"spectrum": spectrum, "ldb": ldb, "test_names": named}, rule=replace(PLAIN_RULE, named_first=False))
    assert off[0].path == "app/helpers.py"
