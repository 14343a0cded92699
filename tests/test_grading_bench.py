"""Pooled grading (a warm box reset in place) against fresh containers: per-test agreement on a real row, gold and
empty, and the comparison itself on hand-made verdicts."""

from __future__ import annotations

import pytest
from pinpoint.swebench_eval.grading_bench import Grading, differences, format_row, format_totals, unexplained

REQUIRED = {"FAIL_TO_PASS": {"success": ["t::a"], "failure": []}, "PASS_TO_PASS": {"success": ["t::b"], "failure": []}}


def test_identical_gradings_agree():
    fresh = Grading("resolved", 4.0, REQUIRED, {"t::a": "PASSED", "t::b": "PASSED"})
    pooled = Grading("resolved", 2.0, REQUIRED, {"t::a": "PASSED", "t::b": "PASSED"})
    assert differences(fresh, pooled) == []


def test_any_test_status_outcome_or_missing_test_is_a_difference():
    fresh = Grading("resolved", 4.0, REQUIRED, {"t::a": "PASSED", "t::b": "PASSED", "t::c": "SKIPPED"})
    flipped = {"FAIL_TO_PASS": {"success": [], "failure": ["t::a"]}, "PASS_TO_PASS": REQUIRED["PASS_TO_PASS"]}
    pooled = Grading("unresolved", 2.0, flipped, {"t::a": "FAILED", "t::b": "PASSED"})
    assert differences(fresh, pooled) == ["outcome resolved vs unresolved", "FAIL_TO_PASS/PASS_TO_PASS statuses differ",
                                          "t::a: PASSED vs FAILED", "t::c: SKIPPED vs absent"]


def test_a_status_some_fresh_container_also_gave_is_the_harness_own_nondeterminism_and_no_other():
    """sympy-13091 as seen: fresh containers themselves error on different tests from run to run (a hash seed per
    run); a pooled status is explained only by a fresh grading that gave it, test by test."""
    fresh = Grading("resolved", 6.0, REQUIRED, {"t::a": "PASSED", "t::b": "PASSED", "t::c": "ERROR"})
    again = Grading("resolved", 6.0, REQUIRED, {"t::a": "PASSED", "t::b": "ERROR", "t::c": "PASSED"})
    pooled = Grading("resolved", 1.5, REQUIRED, {"t::a": "PASSED", "t::b": "ERROR", "t::c": "PASSED"})
    assert differences(fresh, pooled) and unexplained(pooled, [fresh]) == ["t::b: PASSED vs ERROR",
                                                                           "t::c: ERROR vs PASSED"]
    assert unexplained(pooled, [fresh, again]) == []
    forged = Grading("unresolved", 1.5, REQUIRED, {"t::a": "FAILED", "t::b": "ERROR", "t::c": "PASSED"})
    assert unexplained(forged, [fresh, again]) == ["outcome resolved vs unresolved", "t::a: PASSED vs FAILED"]


def test_format_row_names_both_ways_and_the_load():
    half = {"fresh_outcome": "resolved", "pooled_outcome": "resolved", "tests": 3, "fresh_s": 4.0, "pooled_s": 2.0,
            "speedup": 2.0, "pooled_tests_s": 1.6, "ceiling": 2.5}
    row = {"instance": "x__y-1", "agree": True, "exact": True, "gold": half, "empty": half, "load_average": [1, 2, 3]}
    line = format_row(row)
    assert "agree" in line and "fresh 4.00s pooled 2.00s (2.0x; its tests 1.60s, at most 2.5x)" in line
    assert "load 1.00 2.00 3.00" in line and "flaky" not in line
    flaky = {**half, "fresh_rechecks": 1}
    assert "agree up to the harness's own flaky tests (1 fresh rechecks)" in format_row(
        {**row, "exact": False, "gold": flaky})
    wrong = {**half, "fresh_rechecks": 3, "unexplained": ["t::a: PASSED vs FAILED"]}
    line = format_row({**row, "exact": False, "agree": False, "gold": wrong})
    assert "DISAGREE (3 fresh rechecks)" in line and line.endswith("no fresh grading gave: t::a: PASSED vs FAILED")


def test_the_closing_line_says_how_many_installs_the_warm_boxes_skipped():
    line = format_totals({"rows_agree": 2, "rows_exact": 1, "rows_total": 2, "fresh_s_mean": 4.0, "pooled_s_mean": 2.0,
                          "speedup_total": 2.0, "pooled_tests_s_mean": 1.6, "ceiling_total": 2.5,
                          "installs_skipped": 3, "load_average_after": [1.0, 1.0, 1.0]})
    assert "rows agree 2/2 (1 at the first fresh grading)" in line and "fresh/pooled 2.0x" in line
    assert "installs skipped 3/4" in line
    assert "its tests alone 1.6s: at most 2.5x" in line


@pytest.mark.docker
@pytest.mark.slow
def test_pooled_gives_the_fresh_per_test_verdicts_on_a_real_row_gold_and_empty():
    """psf__requests-1142 graded fresh and in one warm, primed box (gold first, then empty on the same box); its
    copying install (`pip install .`) is rerun for every tree it has not installed."""
    from pinpoint.swebench_eval.datasets import load_instances
    from pinpoint.swebench_eval.grading_bench import bench_row
    from pinpoint.swebench_eval.sources import RepoSources

    instance = load_instances(ids=["psf__requests-1142"])[0]
    row = bench_row(instance, RepoSources())
    assert row["gold"]["fresh_outcome"] == row["gold"]["pooled_outcome"] == "resolved"
    assert row["empty"]["fresh_outcome"] == row["empty"]["pooled_outcome"] == "unresolved"
    assert row["gold"]["tests"] > 0 and row["empty"]["tests"] > 0
    assert row["gold"]["differences"] == [] and row["empty"]["differences"] == []
    assert row["agree"] and row["exact"] and row["prime_s"] > 0
    assert not row["gold"]["install_skipped"] and not row["empty"]["install_skipped"]
    for kind in ("gold", "empty"):  # the tests are a part of the pooled grading, so they bound its speedup
        assert 0 < row[kind]["pooled_tests_s"] < row[kind]["pooled_s"]
        assert row[kind]["ceiling"] >= row[kind]["speedup"]
