"""File order from file-level votes of signal families (`lab/file_order.py`): each family votes once whatever its
size, the named files still lead, and the miss table says what put a wrong file first."""

from __future__ import annotations

from pinpoint.localization.suspects import Suspect
from pinpoint_lab.localization import file_order as fo


def _file(path: str, signal: str, score: float = 1.0) -> Suspect:
    return Suspect(path, 1, 200, score, signal)


def _line(path: str, line: int, signal: str, score: float = 1.0) -> Suspect:
    return Suspect(path, line, line, score, signal)


def test_each_family_votes_once_so_a_family_with_more_members_does_not_outvote_the_other():
    lists = {n: [_line("a.py", 1, n), _line("b.py", 1, n)] for n in fo.EXECUTION_FAMILY} | {"bm25": [_file("b.py", "bm25")]}
    flat = fo.family_order(lists, fo.FileVariant((fo.EXECUTION_FAMILY + fo.TEXT_FAMILY,), k=1.0), {})
    families = fo.family_order(lists, fo.FileVariant((fo.EXECUTION_FAMILY, fo.TEXT_FAMILY), k=1.0), {})
    assert flat == ["a.py", "b.py"]  # five execution votes for a.py
    assert families == ["b.py", "a.py"]  # both families name b.py, one names a.py


def test_agreement_ranks_by_the_worse_family_rank():
    lists = {"spectrum": [_line(p, 1, "spectrum") for p in ("a.py", "b.py", "c.py")],
             "bm25": [_file(p, "bm25") for p in ("c.py", "b.py", "a.py")]}
    assert fo.family_order(lists, fo.FILE_VARIANTS["fused_families_agree"], {}) == ["b.py", "a.py", "c.py"]


def _row() -> dict:
    spectrum = [_line("pkg/x.py", 5, "spectrum").to_dict()]
    signals = {"spectrum": spectrum, "spectrum_mbfl": spectrum, "ldb": [_line("pkg/x.py", 5, "ldb").to_dict()],
               "bm25": [_file("pkg/y.py", "bm25").to_dict(), _file("pkg/x.py", "bm25").to_dict()],
               "retrieval": [_file("pkg/y.py", "retrieval").to_dict()], "lexical": [_file("pkg/y.py", "lexical").to_dict()],
               "test_names": [_file("pkg/z.py", "test_names").to_dict()]}
    return {"instance_id": "o__r-1", "repo": "o/r", "setting": "oracle", "gold_lines": {"pkg/x.py": [5]},
            "gold_functions": [["pkg/x.py", "<module>"]], "lines": [], "spans": {},
            "signals": {n: {"suspects": v} for n, v in signals.items()}}


def test_the_named_file_still_leads_and_the_others_follow_the_families_vote():
    from pinpoint_lab.localization import fusion_choice as fc
    from pinpoint_lab.localization import localize_bench as lb

    signals, _ = lb.row_inputs(_row())
    members = {n: s for n, s in signals.items() if n in lb.FUSED["oracle"]}
    default = fc.variant_fusion(members, signals, fc.VARIANTS[fc.AGENT_DEFAULT])
    assert fo.files_of(default) == ["pkg/z.py", "pkg/y.py", "pkg/x.py"]  # three text members' whole file wins
    families = fo.file_variant_fusion(members, signals, fo.FILE_VARIANTS["fused_families"])
    assert fo.files_of(families) == ["pkg/z.py", "pkg/x.py", "pkg/y.py"]  # x: both families; y: text only
    assert all(a.score >= b.score for a, b in zip(families, families[1:], strict=False))
    assert fo.file_variant_fusion(members, {}, fo.FILE_VARIANTS["fused_families"]) is None


def test_the_miss_table_says_what_put_the_wrong_file_first():
    row = _row()
    row["signals"].pop("test_names")
    table = fo.file_misses([row])
    assert "o__r-1" in table and "text only" in table and "pkg/y.py" in table
    assert "text only 1" in table.splitlines()[-2]
