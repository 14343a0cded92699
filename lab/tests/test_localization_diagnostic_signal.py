"""The diagnostic model's confidence measured inside the default fusion's top functions on the committed oracle rows:
the baseline it is compared with is the agent's default fusion itself, and its weight is chosen on other
repositories' rows only."""

from __future__ import annotations

import pytest
from pinpoint.localization.suspects import Suspect
from pinpoint_lab.localization import diagnostic_signal as ds
from pinpoint_lab.localization.fusion_choice import AGENT_DEFAULT
from pinpoint_lab.localization.localize_bench import cached_folder, row_gold


@pytest.fixture(scope="module")
def committed_rows() -> list[dict]:
    """The committed oracle rows, read and scored once for the module (the reading is most of its time)."""
    return [r for r in cached_folder(ds.CACHES[0], "oracle-mbfl") if r["repo"] in ds.REPOS]


def test_the_baseline_at_weight_zero_is_the_agents_default_fusion_on_every_committed_row(committed_rows: list[dict]):
    rows = [r for r in committed_rows if AGENT_DEFAULT in r["signals"]]  # a row whose failing test did not fail has none
    assert len(rows) >= 32  # the 32 rows the diagnostic was measured on, and the sympy rows measured after
    for row in rows:
        report = ds.row_report(row, [], weights=(0.0,))
        cached = row["signals"][AGENT_DEFAULT]
        assert report["fused + diagnostic x0.0"] == {m: float(cached[m]) for m in ds.METRICS}, row["instance_id"]
        names = [(p, n) for p, n in cached["top_functions"] if n != "<module>"][:5]
        spans = {(p, s[2]): s[0] for p, spans in row["spans"].items() for s in spans}
        assert [(p, spans[(p, a)]) for p, a, _ in ds.top_functions(row, 5)] == names


def test_a_diagnostic_that_puts_the_gold_line_first_lifts_it_and_random_counts_ties_in_expectation(
        committed_rows: list[dict]):
    row = next(r for r in committed_rows if r["signals"][AGENT_DEFAULT]["function@5"]
               and not r["signals"][AGENT_DEFAULT]["line@1"])
    gold = row_gold(row).lines
    functions = ds.top_functions(row, 5)
    path, line = next((p, n) for p, first, last in functions for n in sorted(gold.get(p, ())) if first <= n <= last)
    lines = [Suspect(p, n, n, 5.0 if (p, n) == (path, line) else -1.0, "diagnostic")
             for p, first, last in functions for n in range(first, last + 1)]
    report = ds.row_report(row, [lines], weights=(0.0, 1.0))
    assert report["diagnostic"]["line@1~"] == 1.0
    total = len(lines)
    gold_in = sum(n in gold.get(p, ()) for p, first, last in functions for n in range(first, last + 1))
    assert abs(report["random, same lines"]["line@1~"] - gold_in / total) < 1e-9
    assert report["fused + diagnostic x1.0"]["line@10~"] >= report["fused + diagnostic x0.0"]["line@10~"]


def test_a_repository_is_read_at_the_weight_the_other_repositories_chose():
    def report(repo: str, good: float) -> dict:
        metrics = {m: 0.0 for m in ds.METRICS}
        return {"repo": repo, **{f"fused + diagnostic x{w}": {**metrics, **({m: 1.0 for m in ds.OBJECTIVE}
                                                                           if w == good else {})}
                                 for w in ds.WEIGHTS}}
    reports = [report("a/a", 1.0)] * 3 + [report("b/b", 1.0)] + [report("c/c", 0.5)]
    metrics, picks = ds.held_out(reports)
    assert picks == {"a/a": 0.5, "b/b": 1.0, "c/c": 1.0}  # a: b and c tie, the smaller weight; c: not its own best
    assert metrics["line@10~"] == 1 / 5  # only b's row is read at the weight it scores at
