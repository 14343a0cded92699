"""A miss is explained by the row's own spectrum records: not there, outranked, or tied past rank 10."""

from __future__ import annotations

from pinpoint_lab.localization.line_misses import CAUSES, format_misses, row_miss


def _record(line: int, ochiai: float, rank: int, ep: int = 3) -> dict:
    return {"path": "a.py", "line": line, "ef": 1, "ep": ep, "ochiai": ochiai, "rank": rank}


def _row(gold: list[int], records: list[dict], top_lines: list[int], insertion: list[int] = ()) -> dict:
    return {"instance_id": "r", "gold_lines": {"a.py": gold}, "insertion_gold": {"a.py": list(insertion)},
            "lines": records, "spans": {"a.py": [["f", 1, 1, 50], ["g", 51, 51, 99]]},
            "signals": {"fused": {"top_files": ["a.py"], "top_lines": [["a.py", n] for n in top_lines]}}}


def test_each_cause_is_read_off_the_rows_spectrum_records():
    top = list(range(60, 70))
    assert row_miss(_row([5], [], top, insertion=[5]), "fused").cause == CAUSES[0]
    assert row_miss(_row([5, 6], [], top, insertion=[5]), "fused").cause == CAUSES[1]  # 6 is a changed line
    outranked = [_record(60 + i, 0.9, i) for i in range(12)] + [_record(5, 0.5, 12)]
    miss = row_miss(_row([5], outranked, top), "fused")
    assert miss.cause == CAUSES[2] and (miss.rank, miss.tie) == (12, 1) and not miss.function_in_top10
    tied = [_record(n, 1.0, i, ep=0) for i, n in enumerate([*range(60, 80), 7])]
    miss = row_miss(_row([7], tied, top), "fused")
    assert miss.cause == CAUSES[3] and miss.tie == 21 and miss.failing_only
    assert row_miss(_row([61], tied, top), "fused") is None  # a gold line in the top 10: no miss
    other_file = _row([5], [], top)
    other_file["signals"]["fused"]["top_files"] = ["b.py"]
    assert row_miss(other_file, "fused") is None  # the top file is not gold: not this table's miss


def test_the_table_counts_rows_per_cause():
    top = list(range(60, 70))
    text = format_misses([_row([5], [], top, insertion=[5]), _row([55], [], [*top[:9], 52])], "fused")
    assert "2 of 2 rows" in text
    assert any(line.startswith(CAUSES[1]) and "    1" in line for line in text.splitlines())
