"""Insertion points: candidates where code is missing, from real traced runs of a small repository whose fix is a
pure insertion (the spectrum cannot rank its gold line: no failing run executes it), the tie-break, and the bench's
count of insertion gold lines."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pinpoint.environments.local import LocalRuntime
from pinpoint.localization.execution import Sources, collect_spectrum, rank_lines
from pinpoint.localization.insertion import InsertionLocalizer, insertion_points, tie_break
from pinpoint.localization.suspects import Suspect
from pinpoint_lab.localization.localize_bench import insertion_gold
from test_localization_execution import _git

PARSE = """\
def parse(text):
    parts = text.split(",")
    if len(parts) == 2:
        return int(parts[0]), int(parts[1])
    if not text:
        return ()
    return None
"""
# the fix inserts `if len(parts) == 3: return tuple(int(p) for p in parts)` before line 5 (gold: line 5)
GOLD_LINE = 5
TESTS = """\
from pkg.parse import parse


def test_pair():
    assert parse("1,2") == (1, 2)


def test_empty():
    assert parse("") == ()


def test_triple():
    assert parse("1,2,3") == (1, 2, 3)
"""
FAILING = ["tests/test_parse.py::test_triple"]
PASSING = ["tests/test_parse.py::test_pair", "tests/test_parse.py::test_empty"]


@pytest.fixture(scope="module")
def parse_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("parse-repo")
    for path, text in {"pkg/__init__.py": "", "pkg/parse.py": PARSE, "tests/test_parse.py": TESTS,
                       "conftest.py": ""}.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "parse")
    return repo


def test_a_missing_branch_is_found_where_the_spectrum_ties_it_with_its_whole_path(parse_repo):
    with LocalRuntime(parse_repo) as runtime:
        evidence = collect_spectrum(runtime, FAILING, PASSING, python=sys.executable)
        assert [t.outcome for t in evidence.failing] == ["failed"]
        spectrum = rank_lines(evidence)
        # the failing run goes 2, 3, 5, 7: the spectrum cannot tell line 5 from the `if` or the final return
        assert GOLD_LINE in [s.line for s in spectrum] and spectrum[0].line != GOLD_LINE
        points = insertion_points(evidence, Sources(runtime))
        kinds = {(p.line, p.kind) for p in points}
        # after line 3's `if` (passing runs take its branch, the failing one does not), before the next statement
        assert (GOLD_LINE, "gap") in kinds or (GOLD_LINE, "branch") in kinds
        assert [p.line for p in points].index(GOLD_LINE) < 3
        assert all(p.path == "pkg/parse.py" for p in points)
        suspects = InsertionLocalizer(evidence, Sources(runtime)).localize(None)
        assert [(s.start_line, s.signal) for s in suspects[:3]] == [(p.line, "insertion") for p in points[:3]]


def test_the_tie_break_lifts_insertion_points_inside_their_tie_only():
    spectrum = [Suspect("m.py", n, n, 0.7, "spectrum") for n in (7, 3, 5)] + [Suspect("m.py", 9, 9, 0.5, "spectrum")]
    from pinpoint.localization.insertion import InsertionPoint
    points = [InsertionPoint("m.py", 5, "branch", 3, 0.7), InsertionPoint("m.py", 9, "boundary", 8, 0.9)]
    assert [s.start_line for s in tie_break(spectrum, points)] == [5, 7, 3, 9]


def test_the_bench_counts_a_pure_insertions_gold_line_apart_from_changed_lines():
    patch = """\
diff --git a/pkg/parse.py b/pkg/parse.py
--- a/pkg/parse.py
+++ b/pkg/parse.py
@@ -2,6 +2,8 @@ def parse(text):
     parts = text.split(",")
     if len(parts) == 2:
         return int(parts[0]), int(parts[1])
+    if len(parts) == 3:
+        return tuple(int(p) for p in parts)
     if not text:
-        return ()
+        return tuple()
     return None
"""
    assert insertion_gold(patch) == {"pkg/parse.py": [GOLD_LINE]}  # line 6 is changed, not inserted before


def test_the_bench_reports_how_many_rows_each_ranking_reaches_an_insertions_gold_line():
    from pinpoint_lab.localization.localize_bench import insertion_reach, signal_cost

    rows = [{"gold_lines": {"a.py": [5, 9]}, "insertion_gold": {"a.py": [5]},
             "signals": {"insertion": {"top_lines": [["a.py", 2], ["a.py", 5]]}, "spectrum": {"top_lines": [["a.py", 9]]}}},
            {"gold_lines": {"b.py": [3]}, "insertion_gold": {},
             "signals": {"insertion": {"top_lines": [["b.py", 3]]}, "spectrum": {"top_lines": []}}}]
    line = insertion_reach(rows)
    assert line.startswith("insertions: 1 of 3 gold lines on 1/2 rows") and "insertion 1, spectrum 0" in line
    costs = [{"predicates_seconds": 10.0, "predicates_ran": 4, "execution_seconds": 5.0, "failing_test_seconds": 0.1},
             {"predicates_seconds": 90.0, "predicates_ran": 6, "execution_seconds": 5.0, "failing_test_seconds": 0.1,
              "failing_run_seconds": 2.0}]
    assert signal_cost("predicates", costs).endswith("within 3x + 60 s on 1/2 rows (>= 90%: not met)")  # 90 > 66
    assert signal_cost("execution", costs).endswith("on 2/2 rows (>= 90%: met)")  # the spectrum + LDB, same budget
