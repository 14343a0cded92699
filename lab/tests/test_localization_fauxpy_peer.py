"""The FauxPy peer baseline: its output read into pinpoint's suspects, its ties, its rcfile, and one real row."""

from __future__ import annotations

import configparser
import json
import os
import sqlite3
import subprocess
import sys

import pytest
from pinpoint.localization.suspects import Suspect
from pinpoint_lab.localization import fauxpy_peer as peer
from pinpoint_lab.localization import localize_bench as bench

#: as FauxPy 0.7.0 writes `Scores_Ochiai.csv` (csv module, Entity = absolute path :: line), from a requests row
SCORES = """Entity,Score
/testbed/requests/models.py::396,0.9090909090909091\r
/testbed/requests/models.py::389,0.9090909090909091\r
/usr/local/lib/python3.9/site-packages/urllib3/util.py::12,0.9090909090909091\r
/testbed/requests/utils.py::43,0.47619047619047616\r
/testbed/test_requests.py::63,0.0\r
"""

#: FauxPy's `TestCase` table as its SBFL database manager creates it
TEST_CASE_TABLE = ("CREATE TABLE TestCase (Rowid INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT UNIQUE, "
                   "TestName TEXT NOT NULL UNIQUE, Type TEXT NOT NULL,Target INTEGER NOT NULL);")


def test_fauxpys_scores_become_line_suspects_relative_to_the_box_in_its_order():
    suspects = peer.read_scores(SCORES, "/testbed")
    assert [(s.path, s.start_line, s.end_line) for s in suspects] == [
        ("requests/models.py", 396, 396), ("requests/models.py", 389, 389), ("requests/utils.py", 43, 43),
        ("test_requests.py", 63, 63)]  # the site-packages line is not the repository's
    assert suspects[0].score == pytest.approx(1 / 1.1) and {s.signal for s in suspects} == {"fauxpy"}


def test_the_test_counts_come_from_fauxpys_database(tmp_path):
    path = tmp_path / "fauxpy.db"
    with sqlite3.connect(path) as db:
        db.execute(TEST_CASE_TABLE)
        db.executemany("INSERT INTO TestCase (TestName, Type, Target) VALUES (?, ?, ?)",
                       [("t.py::1::a", "failed", 1), ("t.py::2::b", "failed", 0), ("t.py::3::c", "passed", 0),
                        ("t.py::4::d", "passed", 0)])
    assert peer.read_tests(path.read_bytes()) == (2, 1, 1)


def test_targets_are_generalized_names_fauxpy_can_match():
    assert peer.targets(["a/test_x.py::test_one[1-2]", "a/test_x.py::test_one[3]", "a/test_x.py::K::test_two",
                         "a/test_x.py::K::L::test_deep"]) == ["a/test_x.py::test_one", "a/test_x.py::K::test_two"]


def _suspects(scores: list[float]) -> list[Suspect]:
    return [Suspect("pkg/m.py", n, n, s, "fauxpy") for n, s in enumerate(scores, start=1)]


def test_random_ties_shuffle_only_inside_a_group_and_repeat_for_the_same_row():
    ranked = _suspects([0.9] * 6 + [0.5] * 6 + [0.1])
    first = peer.random_ties(ranked, "row-1")
    assert [s.score for s in first] == [s.score for s in ranked]
    assert {s.start_line for s in first[:6]} == set(range(1, 7)) and first[-1].start_line == 13
    assert peer.random_ties(ranked, "row-1") == first
    assert any(peer.random_ties(ranked, f"row-{i}") != ranked for i in range(5))


def test_a_gold_line_inside_a_tie_counts_in_expectation_not_by_the_printed_order():
    gold_line = 12  # the last of a 12-line tie at the top, as FauxPy prints ties in reverse order
    row = {"instance_id": "r", "gold_files": ["pkg/m.py"], "gold_functions": [["pkg/m.py", "<module>"]],
           "gold_lines": {"pkg/m.py": [gold_line]}, "spans": {"pkg/m.py": []},
           "suspects": [["pkg/m.py", n, 0.7] for n in range(12, 0, -1)] + [["pkg/m.py", 40, 0.2]]}
    printed = bench.peer_hits(row, row, "fauxpy")  # as `bench localize --peer fauxpy` scores it
    assert printed["line@1"] and printed["line@1~"] == pytest.approx(1 / 12)
    assert printed["line@10~"] == pytest.approx(10 / 12) and printed["ties_line"] == 12
    assert printed["file@1"] and printed["file@1~"] == 1.0


def test_the_rcfile_keeps_the_repositorys_config_and_coverage_warnings_out():
    rc = configparser.ConfigParser()
    rc.read_string(peer.RCFILE.format(folder="/tmp/pinpoint-fauxpy-x"))
    assert rc.sections() == ["run"]
    assert rc["run"]["data_file"] == "/tmp/pinpoint-fauxpy-x/.coverage"  # never a file in the repository
    assert not {"source", "include", "omit", "parallel", "plugins"} & set(rc["run"])
    disabled = {w.strip() for w in rc["run"]["disable_warnings"].split(",")}
    assert {"no-data-collected", "module-not-imported", "already-imported"} <= disabled


def test_the_selection_plugin_runs_what_pinpoints_runner_would_for_ids_swebench_cut_at_a_space(tmp_path):
    from pinpoint.localization.execution import SPECTRUM_RULES, TRACE_RUNNER

    (tmp_path / "stub").mkdir()
    (tmp_path / "stub" / "pinpoint_select.py").write_text(peer.SELECT_PLUGIN)
    for module in (TRACE_RUNNER, SPECTRUM_RULES):  # as the box gets them
        (tmp_path / "stub" / module.name).write_text(module.read_text())
    (tmp_path / "test_x.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('v', ['a b', 'a c', 'd e'])\ndef test_p(v):\n    pass\n\n"
        "def test_other():\n    pass\n\ndef test_kept():\n    pass\n")
    wanted = ["test_x.py::test_p[a", "test_x.py::test_kept"]  # as SWE-bench lists `test_p[a b]`, cut at the space
    (tmp_path / "tests.json").write_text(json.dumps(wanted))
    env = {**os.environ, "PINPOINT_FAUXPY_TESTS": str(tmp_path / "tests.json"), "PYTHONPATH": str(tmp_path / "stub")}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "pinpoint_select", "-p", "no:cacheprovider", "-q",
                          "-rA", "test_x.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    ran = sorted(line.removeprefix("PASSED ") for line in run.stdout.splitlines() if line.startswith("PASSED "))
    assert ran == ["test_x.py::test_kept", "test_x.py::test_p[a b]", "test_x.py::test_p[a c]"]


@pytest.mark.docker
@pytest.mark.slow
def test_fauxpy_runs_in_a_real_instance_box_and_ranks_the_gold_file(docker_client, tmp_path):
    from pinpoint.swebench_eval.datasets import load_instances

    instance = load_instances(ids=["psf__requests-1142"])[0]
    row = peer.cached([instance], tmp_path)[0]
    assert not row.get("error"), row.get("error")
    assert row["tests"]["failed_targets"] == 1 and row["tests"]["failed_other"] == 0
    assert row["tests"]["passed"] == row["tests"]["passing"] > 0
    assert all(score > 0 for _, _, score in row["suspects"])
    scored = peer.scored(row, pinpoint_rows=tmp_path / "none")
    assert scored["signals"]["fauxpy"]["file@5"], scored["signals"]["fauxpy"]
    assert peer.cached([instance], tmp_path)[0] == json.loads(json.dumps(row))  # read back, not run again
