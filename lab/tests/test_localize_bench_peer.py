"""`bench localize --peer fauxpy`: FauxPy's ranking as a column beside the signals, scored with the bench row's
gold and its ties in expectation, printed and in the JSON; a peer that cannot run on a row is a miss that says why.
The rows are real ones committed by earlier runs (the bench's lab/results/localize/oracle-v3 and FauxPy's own
lab/results/fauxpy-peer/rows of psf__requests-1142), so nothing runs in a box."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from pinpoint_lab.localization import fauxpy_peer
from pinpoint_lab.localization import localize_bench as bench

ROW = "psf__requests-1142"
BENCH_ROW = bench.ROWS_DIR / f"oracle-v{bench.ROW_VERSION}" / f"{ROW}.json.gz"
PEER_ROW = fauxpy_peer.PEER.cache / f"{ROW}.json.gz"


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A bench cache holding the committed oracle row alone (so the bench computes nothing)."""
    folder = tmp_path / "cache" / f"oracle-v{bench.ROW_VERSION}"
    folder.mkdir(parents=True)
    shutil.copy(BENCH_ROW, folder)
    return tmp_path / "cache"


def test_the_fauxpy_column_is_printed_and_scored_with_the_rows_gold_and_ties_in_expectation(cache, tmp_path,
                                                                                           capsys):
    from pinpoint_lab.cli import main

    assert PEER_ROW.exists(), "FauxPy's committed row is the input of this test"
    before = PEER_ROW.read_bytes()
    out = tmp_path / "out.json"
    code = main(["bench", "localize", "--instance", ROW, "--settings", "oracle", "--cache", str(cache),
                 "--peer", "fauxpy", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    assert [line.split()[0] for line in printed.splitlines() if line.startswith("fauxpy ")] == ["fauxpy"] * 2

    report = json.loads(out.read_text())["oracle"]
    column = report["rows"][0]["signals"]["fauxpy"]
    peer = bench.read_row(PEER_ROW)
    gold = bench.read_row(BENCH_ROW)["gold_lines"]
    # FauxPy's top score is one tie of code lines holding a gold line: line@10~ is 10 over that tie's size
    code_lines = [(p, n, s) for p, n, s in peer["suspects"] if not p.startswith("test_")]
    top = [(p, n) for p, n, s in code_lines if s == code_lines[0][2]]
    assert any(n in gold.get(p, ()) for p, n in top) and len(top) > 10
    assert column["ties_line"] == len(top) and column["line@10~"] == pytest.approx(10 / len(top))
    assert column["file@5"] and column["file@1~"] == pytest.approx(1 / column["ties_file"])  # gold in a file tie
    assert report["totals"]["fauxpy"]["line@10~"] == pytest.approx(column["line@10~"])
    (instance,) = bench.dataset_rows({ROW}).values()
    row = bench.rescored(bench.backfilled(bench.read_row(BENCH_ROW), instance))  # as the bench reads its cache
    alone = json.loads(json.dumps(row["signals"]["fused"]))
    assert report["rows"][0]["signals"]["fused"] == alone  # a column beside the fusion, never a member of it
    assert PEER_ROW.read_bytes() == before  # read from its cache, not run again


def test_a_peer_that_cannot_run_on_a_row_is_a_miss_that_says_why_and_is_tried_again(tmp_path):
    calls: list[str] = []

    def broken(instance) -> dict:  # a stand-in for a tool that fails in the box
        calls.append(instance.instance_id)
        raise RuntimeError("FauxPy wrote no scores:\n  collected 0 items")

    peer = bench.Peer("broken", tmp_path / "peer", broken)
    row = bench.rescored(bench.read_row(BENCH_ROW))
    instances = [SimpleNamespace(instance_id=ROW, repo=row["repo"], created_at=row["created_at"])]
    rows = bench.with_peers([row], instances, [peer], log=lambda _: None)
    column = rows[0]["signals"]["broken"]
    assert column["error"] == "RuntimeError: FauxPy wrote no scores: collected 0 items"
    assert not any(v for k, v in column.items() if "@" in k)
    assert bench.totals(rows)["broken"]["file@5~"] == 0.0 and bench.totals(rows)["spectrum"]["file@5"] == 1.0
    table = bench.format_table("oracle", rows)
    assert f"broken could not run on 1/1 rows (counted as misses): {ROW}: RuntimeError: FauxPy wrote" in table
    bench.with_peers([bench.rescored(bench.read_row(BENCH_ROW))], instances, [peer], log=lambda _: None)
    assert calls == [ROW, ROW]  # an error row is computed again


def test_a_peer_without_the_oracle_setting_is_refused_in_one_line(capsys):
    from pinpoint_lab.cli import main

    code = main(["bench", "localize", "--instance", ROW, "--settings", "issue", "--peer", "fauxpy"])
    err = capsys.readouterr().err
    assert code == 2 and "--peer" in err and "oracle" in err and "Traceback" not in err
