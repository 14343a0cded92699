"""Line order from execution facts the cached rows keep (`lab/line_order.py`): each member reads only what a row's
line records say, a demotion keeps the list in score order, and the table judges every variant leave one
repository out beside the shipped choices."""

from __future__ import annotations

from pinpoint.localization.suspects import Suspect
from pinpoint_lab.localization import fusion_choice as fc
from pinpoint_lab.localization import line_order as lo


def _record(line: int, rank: int, ep: int = 0, recency: int | None = None, frame_depth: int | None = None,
            path: str = "pkg/a.py") -> dict:
    return {"path": path, "line": line, "ef": 1, "ep": ep, "failed": 1, "passed": 5, "ochiai": 1.0 / (1 + ep),
            "dstar": 1.0 / (ep + 0.5), "rank": rank, "frame_depth": frame_depth, "recency": recency}


def test_recent_keeps_the_failing_only_lines_a_failing_run_ran_last_latest_first():
    records = [_record(10, 0, recency=5), _record(11, 1, recency=0, ep=2), _record(12, 2, recency=1),
               _record(13, 3), _record(14, 4, recency=3)]
    assert [s.start_line for s in lo.recent(records)] == [12, 14, 10]  # 11 a passing test ran; 13 not recent
    assert [s.start_line for s in lo.recent(records, failing_only=False)] == [11, 12, 14, 10]


def test_frames_rank_the_deepest_traceback_line_first():
    records = [_record(5, 0, frame_depth=2), _record(6, 1), _record(7, 2, frame_depth=0)]
    assert [(s.start_line, s.score) for s in lo.frames(records)] == [(7, 1.0), (5, 1.0 / 3)]


def test_statement_kinds_name_the_statement_a_line_starts_and_nothing_for_its_continuation():
    kinds = lo.statement_kinds("def f(x):\n    if x:\n        g(x,\n          1)\n    return x\n")
    assert kinds == {1: "FunctionDef", 2: "If", 3: "Expr", 5: "Return"}
    assert lo.statement_kinds("def broken(:\n") == {}


def test_a_demotion_moves_the_top_files_lines_of_a_kind_last_and_keeps_the_list_in_score_order():
    fused = [Suspect("pkg/a.py", 3, 3, 0.05, "fusion"), Suspect("pkg/a.py", 2, 2, 0.04, "fusion"),
             Suspect("pkg/b.py", 9, 9, 0.03, "fusion"), Suspect("pkg/a.py", 5, 5, 0.02, "fusion")]
    kinds = {"pkg/a.py": {3: "Expr", 2: "If", 5: "Return"}, "pkg/b.py": {9: "Expr"}}
    out = lo.demoted(fused, lambda p: kinds.get(p, {}), lo.CALLS)
    assert [(s.path, s.start_line) for s in out] == [("pkg/a.py", 2), ("pkg/b.py", 9), ("pkg/a.py", 5),
                                                     ("pkg/a.py", 3)]  # another file's call line stays
    assert all(a.score > b.score for a, b in zip(out, out[1:], strict=False))


def test_a_line_member_is_fused_beside_the_default_and_a_row_without_its_spectrum_has_no_variant():
    spectrum = [Suspect("pkg/a.py", n, n, 1.0, "spectrum") for n in (1, 2, 3)]
    records = [_record(1, 0), _record(2, 1), _record(3, 2, recency=0)]
    signals = {"spectrum_mbfl": spectrum}
    plain = lo.line_variant_fusion({"spectrum": spectrum}, signals, records, lambda p: {}, lo.LineVariant("recent", 0))
    added = lo.line_variant_fusion({"spectrum": spectrum}, signals, records, lambda p: {},
                                   lo.LineVariant("recent", 0.25))
    assert plain[0].start_line == 1 and added[0].start_line == 3  # the line a failing run ran last, only it ran
    assert lo.line_variant_fusion({"spectrum": spectrum}, {}, records, lambda p: {}, lo.LINE_VARIANTS["fused_recent"]) \
        is None


def test_the_table_judges_each_variant_leave_one_repository_out_beside_the_shipped_choices():
    def row(repo: str, i: int, recent: float) -> dict:
        base = {m: 0.5 for m in lo.COLUMNS}
        return {"instance_id": f"{repo}-{i}", "repo": repo,
                "signals": {"fused": base, fc.AGENT_DEFAULT: base, "fused_recent": {m: recent for m in lo.COLUMNS}}}

    rows = [row("x/a", i, 1.0) for i in range(2)] + [row("y/b", i, 0.0) for i in range(2)]
    values, picks = lo.held_out(rows, (*fc.CHOICES, "fused_recent"))
    assert picks == [fc.CHOICES[0], "fused_recent"]  # each fold sees only the other repository (a tie: the first)
    assert values["line@1"] == (2 * 0.5 + 2 * 0.0) / 4
    table = lo.format_line_order(rows)
    assert "CHOICES (shipped)" in table and "+ family recent" in table
