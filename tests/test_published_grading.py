"""Grading a real agent's published patches as the official harness did (`pinpoint bench published`), on a sample of
a public SWE-bench Verified run (tests/data/published_runs/, see its PROVENANCE.md), and what that needed: the
repository cache keyed by its source, a summary that covers every row of a run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from pinpoint.environments import paths
from pinpoint.swebench_eval.datasets import load_instances
from pinpoint.swebench_eval.evaluate import InstanceReport, write_report
from pinpoint.swebench_eval.published_bench import compare, load_published
from pinpoint.swebench_eval.sources import RepoSources

RUN = Path(__file__).parent / "data" / "published_runs" / "20251118_mini-swe-agent_gemini-3-pro"
FLASK = "pallets__flask-5014"
OFFLINE_REPOS = {"psf/requests", "pytest-dev/pytest", "sympy/sympy", "sphinx-doc/sphinx", "pylint-dev/pylint",
                 "pydata/xarray", "pallets/flask", "mwaskom/seaborn"}


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pinpoint.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=3600)


# -- the sample ---------------------------------------------------------------------------------------------------

def test_the_sample_spans_every_offline_repository_with_both_verdicts():
    run = load_published(RUN)
    rows = load_instances(ids=sorted(run.official))
    assert len(rows) >= 25 and {r.repo for r in rows} == OFFLINE_REPOS
    assert set(run.predictions) == set(run.official)
    verdicts = [run.official[r.instance_id]["resolved"] for r in rows]
    assert 0 < sum(verdicts) < len(verdicts)


def test_a_report_wrapped_in_its_instance_id_reads_as_the_bare_entry(tmp_path):
    shutil.copy(RUN / "preds.jsonl", tmp_path / "all_preds.jsonl")
    entry = json.loads((RUN / "logs" / FLASK / "report.json").read_text())
    (tmp_path / "logs" / FLASK).mkdir(parents=True)
    (tmp_path / "logs" / FLASK / "report.json").write_text(json.dumps({FLASK: entry}))
    assert load_published(tmp_path).official == {FLASK: entry}


def test_a_differing_test_status_is_named_and_the_official_entry_agrees_with_itself():
    run = load_published(RUN)
    row = load_instances(ids=[FLASK])[0]
    official = run.official[FLASK]
    assert compare(row, official, official, "", "resolved").agrees
    ours = json.loads(json.dumps(official))
    test = ours["tests_status"]["PASS_TO_PASS"]["success"].pop()
    ours["tests_status"]["PASS_TO_PASS"]["failure"].append(test)
    disagreement = compare(row, official, ours, "", "unresolved")
    assert not disagreement.agrees and disagreement.differ == {test: "official success, pinpoint failure"}


def test_a_folder_without_reports_is_one_clear_line(tmp_path):
    shutil.copy(RUN / "preds.jsonl", tmp_path / "preds.jsonl")
    result = _cli("bench", "published", str(tmp_path))
    assert result.returncode == 2 and "no official report" in result.stderr and "Traceback" not in result.stderr


# -- the repository cache is keyed by its source -------------------------------------------------------------------

def test_one_cache_serves_two_source_folders_that_hold_different_commits(tmp_path):
    """The same PINPOINT_CACHE with another source folder: its commits are found, not looked up in the other
    folder's extracted copy."""
    first = RepoSources(paths.repos_dir(), cache_dir=tmp_path / "cache")
    base = load_instances(ids=[FLASK])[0].base_commit
    first.export("pallets/flask", base, tmp_path / "a")
    # a second folder whose flask history has a commit the first one lacks
    work = tmp_path / "work"
    subprocess.run(["git", "clone", "-q", str(first.git_dir("pallets/flask")), str(work)], check=True)
    subprocess.run(["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "newer"], check=True)
    newer = subprocess.run(["git", "-C", str(work), "rev-parse", "HEAD"], capture_output=True, text=True,
                           check=True).stdout.strip()
    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(tmp_path / "pallets__flask.git")], check=True)
    with tarfile.open(other / "pallets__flask.git.tar", "w") as tar:
        tar.add(tmp_path / "pallets__flask.git", arcname="pallets__flask.git")
    second = RepoSources(other, cache_dir=tmp_path / "cache")
    assert second.export("pallets/flask", newer, tmp_path / "b").is_dir()
    assert first.git_dir("pallets/flask") != second.git_dir("pallets/flask")


# -- the summary covers every row of a run -------------------------------------------------------------------------

def test_the_summary_covers_rows_graded_by_an_earlier_invocation(tmp_path):
    """Two rows graded earlier under one run id; grading one of them again (reused) keeps both in summary.json."""
    run = load_published(RUN)
    ids = ["psf__requests-1724", FLASK]
    preds = tmp_path / "preds.jsonl"
    preds.write_text("".join(json.dumps(run.predictions[i].__dict__) + "\n" for i in ids))
    model = run.predictions[FLASK].model_name_or_path
    for iid in ids:  # what an earlier `pinpoint eval` left: a report and the patch it graded
        folder = tmp_path / "out" / "r" / model / "eval" / iid
        folder.mkdir(parents=True)
        (folder / "patch.diff").write_text(run.predictions[iid].model_patch)
        entry = {iid: {"patch_exists": True, "patch_successfully_applied": True, "resolved": True}}
        write_report(InstanceReport(iid, "resolved", report=entry), folder)
    result = _cli("eval", "--predictions", str(preds), "-i", FLASK, "--run-id", "r", "--output",
                  str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "out" / "r" / "summary.json").read_text())
    assert summary["ids"]["resolved"] == sorted(ids) and summary["completed_instances"] == 2


# -- real rows graded in their instance images ---------------------------------------------------------------------

AGREEING_ROWS = [
    FLASK,
    "sphinx-doc__sphinx-8721",  # its patch needs `git apply --3way`, which a stale index refused
    "mwaskom__seaborn-3069",  # a binary hunk: only GNU patch, the chain's last step, applies the rest
    "sympy__sympy-14248",  # a test name in two of the files run fails in one, passes in the other: the last wins
    "psf__requests-1724",  # its tests call httpbin.org: network-bound here, named apart
]


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("instance_id", AGREEING_ROWS)
def test_a_published_row_grades_as_the_official_harness_graded_it(instance_id, tmp_path):
    result = _cli("bench", "published", str(RUN), "-i", instance_id, "--output", str(tmp_path), "--json")
    figures = json.loads(result.stdout)
    (row,) = figures["rows"]
    assert result.returncode == 0
    if instance_id == "psf__requests-1724":  # resolved officially; here its httpbin tests fail, and only they
        assert row["network_bound"] and not row["differ"], row
        assert all(s == "official success, pinpoint failure" for s in row["network"].values())
    else:
        assert row["agrees"] and not row["network"], row
    if instance_id == "mwaskom__seaborn-3069":  # applied by GNU patch, the one step that skips the binary hunk
        assert "patching file test_plot.png" in (_eval_dir(tmp_path, instance_id) / "apply_patch.txt").read_text()
    if instance_id == "sympy__sympy-14248":  # named for audit, not judged
        report = json.loads((_eval_dir(tmp_path, instance_id) / "report.json").read_text())[instance_id]
        assert report["pinpoint"]["tampering"]["conflicting"] == ["test_MatrixSymbol_printing"]


# -- tests that need two CPUs: the official box counted one ---------------------------------------------------------

PYLINT = "pylint-dev__pylint-7277"  # its patch is the gold fix; officially test_jobs_score failed
JOBS_SCORE = "tests/test_self.py::TestRunTC::test_jobs_score"  # marked needs_two_cores: skipped on one CPU


def _graded_earlier(root: Path, run_id: str, instance_id: str, jobs_score: str) -> None:
    """What a grading of the published patch left in `run_id`: its patch and a report where every required test
    has its official status but test_jobs_score has `jobs_score`."""
    run = load_published(RUN)
    official = json.loads(json.dumps(run.official[instance_id]))
    p2p = official["tests_status"]["PASS_TO_PASS"]
    p2p["success"] = [t for t in p2p["success"] + p2p["failure"] if t != JOBS_SCORE]
    p2p["failure"] = []
    p2p["success" if jobs_score == "success" else "failure"].append(JOBS_SCORE)
    official["resolved"] = jobs_score == "success"
    folder = root / run_id / run.predictions[instance_id].model_name_or_path / "eval" / instance_id
    folder.mkdir(parents=True)
    (folder / "patch.diff").write_text(run.predictions[instance_id].model_patch)
    outcome = "resolved" if official["resolved"] else "unresolved"
    write_report(InstanceReport(instance_id, outcome, report={instance_id: official}), folder)


@pytest.mark.parametrize("one_cpu_status", ["failure", "success"])
def test_a_test_the_one_cpu_grading_fails_as_officially_is_cpu_bound_and_only_then(tmp_path, one_cpu_status):
    """pinpoint's box (the spec's two CPUs) passes test_jobs_score; the row graded again in a one-CPU box (both
    gradings left from earlier invocations, so reused) fails it as the official harness did: cpu-bound, exit 0.
    Had the one-CPU grading passed it too, the row would be a disagreement."""
    name = f"published-{RUN.name}"
    _graded_earlier(tmp_path, name, PYLINT, "success")
    _graded_earlier(tmp_path, f"{name}-one-cpu", PYLINT, one_cpu_status)
    result = _cli("bench", "published", str(RUN), "-i", PYLINT, "--output", str(tmp_path), "--json")
    (row,) = json.loads(result.stdout)["rows"]
    if one_cpu_status == "failure":
        assert result.returncode == 0 and row["cpu_bound"] and not row["differ"], row
        assert row["cpu"] == {JOBS_SCORE: "official failure, pinpoint success"}
    else:
        assert result.returncode == 1 and not row["cpu_bound"] and list(row["differ"]) == [JOBS_SCORE], row


def test_only_a_spec_that_declares_cpus_is_graded_again():
    from pinpoint.swebench_eval.published_bench import declares_cpus

    assert declares_cpus(load_instances(ids=[PYLINT])[0])
    assert not declares_cpus(load_instances(ids=[FLASK])[0])


@pytest.mark.docker
def test_pylint_counts_two_cpus_in_pinpoints_box_and_one_in_a_box_without_the_quota():
    """What makes test_jobs_score skip officially: the harness never applies the spec's quota, and in a box with
    Docker's default CPU settings (cgroup v1: cpu.shares 1024) pylint counts one CPU; pinpoint's box has two."""
    from pinpoint.environments.runtime import RuntimeSettings
    from pinpoint.swebench_eval.images import build_instance_image
    from pinpoint.swebench_eval.runtime import instance_runtime

    instance = load_instances(ids=[PYLINT])[0]
    tag = build_instance_image(instance).tag
    count = "python -c 'from pylint.lint.run import _cpu_count; print(_cpu_count())'"
    with instance_runtime(instance, tag) as box:
        assert box.run(count).output.strip() == "2"
    with instance_runtime(instance, tag, RuntimeSettings(cpus=1.0)) as box:
        assert box.run(count).output.strip() == "1"


def _eval_dir(root: Path, instance_id: str) -> Path:
    (folder,) = root.glob(f"published-*/*/eval/{instance_id}")
    return folder


@pytest.mark.docker
def test_a_graded_row_is_reused_on_the_next_invocation(tmp_path):
    first = _cli("bench", "published", str(RUN), "-i", FLASK, "--output", str(tmp_path))
    assert first.returncode == 0 and "(graded earlier)" not in first.stdout, first.stderr
    again = _cli("bench", "published", str(RUN), "-i", FLASK, "--output", str(tmp_path))
    assert again.returncode == 0 and "(graded earlier)" in again.stdout
    assert "rows agree 1/1" in again.stdout


# -- tests skipped for want of a package only conda provides ---------------------------------------------------------

XARRAY = "pydata__xarray-6992"
CDMS2_TESTS = ["xarray/tests/test_dataarray.py::TestDataArray::test_to_and_from_cdms2_classic",
               "xarray/tests/test_dataarray.py::TestDataArray::test_to_and_from_cdms2_ugrid"]
#: the short summary of pinpoint's grading of the published patch (its env image has no cdms2): the importorskip
#: calls of test_to_and_from_cdms2_classic, _sgrid and _ugrid, at the base commit with the test patch applied
CDMS2_SKIPS = """SKIPPED [1] xarray/tests/test_dataarray.py:3423: could not import 'cdms2': No module named 'cdms2'
SKIPPED [1] xarray/tests/test_dataarray.py:3465: could not import 'cdms2': No module named 'cdms2'
SKIPPED [1] xarray/tests/test_dataarray.py:3491: could not import 'cdms2': No module named 'cdms2'
"""


def _graded_without(root: Path, missing: list[str], log: str) -> None:
    """What a grading of the published xarray patch left: its patch, a report where every required test has its
    official status except `missing` (absent from the log, so failed), and the log's short summary `log`."""
    run = load_published(RUN)
    official = json.loads(json.dumps(run.official[XARRAY]))
    p2p = official["tests_status"]["PASS_TO_PASS"]
    p2p["success"] = [t for t in p2p["success"] if t not in missing]
    p2p["failure"] += missing
    folder = root / f"published-{RUN.name}" / run.predictions[XARRAY].model_name_or_path / "eval" / XARRAY
    folder.mkdir(parents=True)
    (folder / "patch.diff").write_text(run.predictions[XARRAY].model_patch)
    (folder / "test_output.txt").write_text(log)
    write_report(InstanceReport(XARRAY, "unresolved", report={XARRAY: official}), folder)


@pytest.mark.parametrize("package", ["cdms2", "zarr"])
def test_a_test_skipped_for_want_of_a_conda_only_package_is_named_and_only_then(tmp_path, package):
    """cdms2 is in the env spec and on no package index: its skipped tests are conda-only, printed on the row and
    in the totals, and the row agrees (exit 0). A test skipped for want of zarr (PyPI has it, so the env image
    should) stays a disagreement (exit 1)."""
    _graded_without(tmp_path, CDMS2_TESTS, CDMS2_SKIPS.replace("cdms2", package))
    result = _cli("bench", "published", str(RUN), "-i", XARRAY, "--output", str(tmp_path))
    if package == "cdms2":
        assert result.returncode == 0, result.stdout + result.stderr
        assert "conda-only 2: " + CDMS2_TESTS[0] + " (official success, pinpoint failure)" in result.stdout
        assert "rows agree 1/1" in result.stdout and "2 conda-only, 0 differ" in result.stdout
    else:
        assert result.returncode == 1 and "DISAGREE" in result.stdout and "conda-only 2" not in result.stdout
        assert "2 differ" in result.stdout


def test_a_row_whose_verdict_differs_only_by_conda_only_tests_is_labelled_so():
    """The official harness passed the cdms2 tests and resolved the row; pinpoint skipped them: the verdicts
    differ, for want of cdms2 alone."""
    row = load_instances(ids=[XARRAY])[0]
    official = json.loads(json.dumps(load_published(RUN).official[XARRAY]))
    official["resolved"] = True
    ours = json.loads(json.dumps(official))
    ours["tests_status"]["PASS_TO_PASS"]["success"].remove(CDMS2_TESTS[0])
    ours["tests_status"]["PASS_TO_PASS"]["failure"].append(CDMS2_TESTS[0])
    skipped = frozenset(t.split("[")[0] for t in CDMS2_TESTS)
    assert compare(row, official, ours, CDMS2_SKIPS, "unresolved", conda_skipped=skipped).label == "conda-only"
    assert compare(row, official, ours, CDMS2_SKIPS, "unresolved").label == "DISAGREE"


def test_the_skipped_tests_are_found_by_the_lines_of_their_skips():
    """An importorskip in a test's body and a skip mark on its class (reported at the test's first line) both
    name their test; a skip elsewhere names none."""
    from pinpoint.swebench_eval.conda_only import conda_only_tests, functions_holding

    instance = load_instances(ids=[XARRAY])[0]
    sources = RepoSources(paths.repos_dir())
    assert conda_only_tests(instance, CDMS2_SKIPS, sources) == {
        *CDMS2_TESTS, "xarray/tests/test_dataarray.py::TestDataArray::test_to_and_from_cdms2_sgrid"}
    source = "import pytest\n\n@pytest.mark.skipif(True, reason='requires iris')\nclass TestIris:\n" \
             "    @pytest.mark.parametrize('x', [1])\n    def test_a(self, x):\n        pass\n\n\ndef helper():\n    pass\n"
    assert functions_holding(source, {5}) == {"TestIris::test_a"}
    assert functions_holding(source, {10}) == set()
    assert conda_only_tests(instance, CDMS2_SKIPS.replace("cdms2", "iris"), sources) == set()
