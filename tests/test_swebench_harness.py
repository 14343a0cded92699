"""The SWE-bench harness without containers: rows, sources, scripts, grading, patch application, edit metrics."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from pinpoint.swebench_eval import scripts, specs
from pinpoint.swebench_eval.datasets import DatasetError, load_instances
from pinpoint.swebench_eval.evaluate import classify
from pinpoint.swebench_eval.grading import grade_log, recorded_exit_code
from pinpoint.swebench_eval.metrics import edit_metrics, edited_lines
from pinpoint.swebench_eval.patches import (
    APPLY_PATCH_FAIL,
    APPLY_PATCH_PASS,
    GIT_APPLY_CMDS,
    PatchError,
    apply_patch,
)
from pinpoint.swebench_eval.predictions import read_predictions
from pinpoint.swebench_eval.reference import (
    archive_dir,
    choose_reference,
    period_of,
    shared_objects,
    tree_objects,
    write_commit_delta,
)
from pinpoint.swebench_eval.scripts import eval_script
from pinpoint.swebench_eval.sources import RepoSources, SourceError
from pinpoint.swebench_eval.specs import env_inputs, modified_test_files, spec_for

REQUESTS_ID = "psf__requests-2931"


@pytest.fixture(scope="module")
def requests_instance():
    return load_instances(ids=[REQUESTS_ID])[0]


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> RepoSources:
    return RepoSources(cache_dir=tmp_path_factory.mktemp("cache"))


def _rows(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# -- datasets ---------------------------------------------------------------------------------------------------


def test_default_dataset_loads_every_row_with_decoded_test_lists():
    instances = load_instances()
    assert len(instances) == 455
    one = next(i for i in instances if i.instance_id == REQUESTS_ID)
    assert one.FAIL_TO_PASS == ("test_requests.py::TestRequests::test_binary_put",)
    assert len(one.PASS_TO_PASS) == 84
    assert json.loads(one.to_row()["FAIL_TO_PASS"]) == list(one.FAIL_TO_PASS)


def test_malformed_row_names_the_row_and_the_field(tmp_path, requests_instance):
    good = requests_instance.to_row()
    bad = dict(good, instance_id="x__y-1", FAIL_TO_PASS="[not json")
    with pytest.raises(DatasetError) as err:
        load_instances(_rows(tmp_path, [good, bad]))
    assert "line 2" in str(err.value) and "x__y-1" in str(err.value) and "FAIL_TO_PASS" in str(err.value)

    missing = {k: v for k, v in good.items() if k != "base_commit"}
    with pytest.raises(DatasetError, match=r"line 1: field 'base_commit' must be a non-empty string \(missing\)"):
        load_instances(_rows(tmp_path, [missing]))


def test_unknown_instance_ids_and_duplicates_are_errors(tmp_path, requests_instance):
    with pytest.raises(DatasetError, match="no-such-id"):
        load_instances(ids=["no-such-id"])
    row = requests_instance.to_row()
    with pytest.raises(DatasetError, match="line 2.*duplicate"):
        load_instances(_rows(tmp_path, [row, row]))


def test_parquet_and_json_load_the_same_rows(tmp_path, requests_instance):
    import pyarrow as pa
    import pyarrow.parquet as pq

    row = requests_instance.to_row()
    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "rows.parquet")
    (tmp_path / "rows.json").write_text(json.dumps([row]))
    assert load_instances(tmp_path / "rows.parquet") == load_instances(tmp_path / "rows.json") == [requests_instance]


def test_bad_prediction_entry_is_named(tmp_path):
    path = tmp_path / "preds.jsonl"
    path.write_text(json.dumps({"instance_id": "a", "model_patch": ""}) + "\n" + json.dumps({"model_patch": "x"}) + "\n")
    with pytest.raises(DatasetError, match="line 2: a prediction needs a string 'instance_id'"):
        read_predictions(path)


# -- sources and specs ----------------------------------------------------------------------------------------------


def test_export_holds_the_base_commit_and_nothing_newer(tmp_path, sources, requests_instance):
    dest = sources.export(requests_instance.repo, requests_instance.base_commit, tmp_path / "src")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=dest, capture_output=True, text=True).stdout.strip()
    count = subprocess.run(["git", "rev-list", "--all", "--count"], cwd=dest, capture_output=True, text=True).stdout
    assert head == requests_instance.base_commit and count.strip() == "1"
    assert (dest / "requests" / "models.py").exists()


def test_missing_source_says_where_it_looked(tmp_path):
    with pytest.raises(SourceError, match="django__django.git.tar"):
        RepoSources(repos_dir=tmp_path).git_dir("django/django")


def test_official_directives_and_files_come_from_the_test_patch(requests_instance):
    assert specs.test_directives(requests_instance) == ["test_requests.py"]
    assert modified_test_files(requests_instance.test_patch) == ["test_requests.py"]
    sympy = load_instances(ids=["sympy__sympy-13031"])[0]
    assert all(d.endswith(".py") for d in specs.test_directives(sympy))


def test_requirements_files_are_read_offline(sources):
    pylint = load_instances(ids=["pylint-dev__pylint-7080"])[0]
    inputs = env_inputs(pylint, spec_for(pylint), sources)
    assert inputs.packages_kind == "requirements"
    assert "pytest" in inputs.packages and "-r " not in inputs.packages


def test_a_version_whose_setup_commit_is_missing_shares_one_environment(sources):
    """xarray 0.12's setup commit is not in the archive and 2019-2020 bases predate environment.yml: the nearest
    later commit's file stands in, so every 0.12 row gets the same packages (bottleneck, sparse, ...), not pins only."""
    rows = load_instances(ids=["pydata__xarray-3305", "pydata__xarray-4966"])
    old, new = (env_inputs(row, spec_for(row), sources) for row in rows)
    assert sources.show("pydata/xarray", rows[0].base_commit, "ci/requirements/environment.yml") is None
    assert old.packages_kind == new.packages_kind == "environment.yml"
    assert old.key() == new.key() and "bottleneck" in old.packages.split()


def test_eval_script_mirrors_the_official_one(requests_instance):
    script = eval_script(requests_instance, spec_for(requests_instance))
    base = requests_instance.base_commit
    start, end = script.index(": '>>>>> Start Test Output'"), script.index(": '>>>>> End Test Output'")
    assert script.startswith("#!/bin/bash\nset -uxo pipefail\n")
    assert "pytest -rA test_requests.py" in script[start:end]
    assert "SWEBENCH_TEST_EXIT_CODE=$?" in script[start:end]
    assert script.count(f"git checkout {base} test_requests.py") == 2
    assert script.index("python -m pip install .") < script.index("git apply -v -") < start
    assert "export TZ=UTC" in script and "export PYTHONHASHSEED=0" in script
    # the reinstall leaves a path-entry editable install like the instance layer's (astroid cannot see import hooks)
    assert "export PIP_CONFIG_SETTINGS=editable_mode=compat" in script


def test_a_test_patch_that_only_adds_files_resets_nothing():
    """A bare `git checkout <base>` would detach to the base commit and drop sphinx's `pytest -rA` edit."""
    sphinx = load_instances(ids=["sphinx-doc__sphinx-8595"])[0]
    script = eval_script(sphinx, spec_for(sphinx))
    assert f"git checkout {sphinx.base_commit}\n" not in script + "\n"
    assert script.count('echo "No test files to reset"') == 2


@pytest.mark.parametrize("error, installed", [("missing the 'build_editable' hook", True), ("no space left", False)])
def test_editable_install_without_pep660_is_retried_without_isolation_and_other_failures_stop(
        tmp_path, error, installed):
    fake = tmp_path / "python"  # stands in for pip: refuses the isolated editable install with `error`
    fake.write_text(f"""#!/bin/bash
if [[ "$*" == *--no-build-isolation* ]]; then echo installed-without-isolation; exit 0; fi
echo "ERROR: {error}"; exit 1
""")
    fake.chmod(0o755)
    step = scripts._install_step("python -m pip install -e .").replace(scripts.INSTALL_LOG, str(tmp_path / "log"))
    run = subprocess.run(["bash", "-c", f"set -euxo pipefail\nexport PATH={tmp_path}:$PATH\n{step}\necho next-step"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert (run.returncode == 0) is installed
    assert ("installed-without-isolation" in run.stdout and "next-step" in run.stdout) is installed


# -- grading ------------------------------------------------------------------------------------------------------------


def _log(instance, statuses: dict[str, str], exit_code: int = 0, end: bool = True) -> str:
    lines = ["+ : '>>>>> Start Test Output'", "collected 85 items"]
    lines += [f"{status} {test}" for test, status in statuses.items()]
    if end:
        lines += ["+ SWEBENCH_TEST_EXIT_CODE=0", "+ : '>>>>> End Test Output'", f">>>>> Test Exit Code: {exit_code}"]
    return "\n".join(lines) + "\n"


def _grade(tmp_path, instance, log: str, timed_out: bool = False) -> tuple[str, dict]:
    path = tmp_path / "test_output.txt"
    path.write_text(log)
    report = grade_log(instance, path, instance.patch)
    return classify(report[instance.instance_id], timed_out)[0], report[instance.instance_id]


def test_all_tests_passing_resolves_and_one_failing_f2p_does_not(tmp_path, requests_instance):
    passing = {t: "PASSED" for t in (*requests_instance.FAIL_TO_PASS, *requests_instance.PASS_TO_PASS)}
    outcome, entry = _grade(tmp_path, requests_instance, _log(requests_instance, passing))
    assert outcome == "resolved" and len(entry["tests_status"]["PASS_TO_PASS"]["success"]) == 84

    failing = dict(passing, **{requests_instance.FAIL_TO_PASS[0]: "FAILED"})
    outcome, entry = _grade(tmp_path, requests_instance, _log(requests_instance, failing, exit_code=1))
    assert outcome == "unresolved"
    assert entry["tests_status"]["FAIL_TO_PASS"]["failure"] == list(requests_instance.FAIL_TO_PASS)


def test_log_with_no_test_lines_is_an_error_not_a_verdict(tmp_path, requests_instance):
    outcome, entry = _grade(tmp_path, requests_instance, _log(requests_instance, {}, exit_code=4))
    assert outcome == "no_test_output" and entry["resolved"] is False
    assert recorded_exit_code(_log(requests_instance, {}, exit_code=4)) == 4


def test_run_cut_off_by_timeout_is_labelled_infrastructure(tmp_path, requests_instance):
    partial = _log(requests_instance, {requests_instance.PASS_TO_PASS[0]: "PASSED"}, end=False)
    outcome, entry = _grade(tmp_path, requests_instance, partial + "\n\nTimeout error: 5 seconds exceeded.",
                            timed_out=True)
    assert outcome == "timeout" and entry["resolved"] is False


def test_passed_lines_with_a_failing_exit_code_are_not_trusted(tmp_path, requests_instance):
    passing = {t: "PASSED" for t in (*requests_instance.FAIL_TO_PASS, *requests_instance.PASS_TO_PASS)}
    outcome, _ = _grade(tmp_path, requests_instance, _log(requests_instance, passing, exit_code=2))
    assert outcome == "no_test_output"


# -- applying patches ---------------------------------------------------------------------------------------------------


def test_patch_that_does_not_apply_is_a_clear_outcome(tmp_path, sources, requests_instance):
    from pinpoint.environments.local import LocalRuntime

    git_dir = sources.git_dir(requests_instance.repo)
    with LocalRuntime(git_dir, requests_instance.base_commit) as runtime:
        broken = requests_instance.patch.replace("-            return to_native_string(data)",
                                                 "-            return something_else(data)")
        with pytest.raises(PatchError) as failed:
            apply_patch(runtime, broken, fallbacks=True, path=str(tmp_path / "patch.diff"))
        assert str(failed.value).startswith(">>>>> Patch Apply Failed")
        assert runtime.diff() == ""  # the failed attempts left nothing behind
        log = apply_patch(runtime, requests_instance.patch, fallbacks=True, path=str(tmp_path / "patch.diff"))
        assert log.startswith(">>>>> Applied Patch") and "to_native_string(params)" in runtime.diff()


def test_patch_application_follows_the_official_harness():
    from swebench.harness import constants, run_evaluation

    assert (APPLY_PATCH_PASS, APPLY_PATCH_FAIL) == (constants.APPLY_PATCH_PASS, constants.APPLY_PATCH_FAIL)
    assert list(GIT_APPLY_CMDS) == list(run_evaluation.GIT_APPLY_CMDS)


# -- edit metrics -------------------------------------------------------------------------------------------------------

GOLD = """--- a/m.py
+++ b/m.py
@@ -1,6 +1,6 @@
 a = 1
 b = 2
-c = 3
+c = 4
 d = 4
 e = 5
 f = 6
"""


def _variant(body: str) -> str:
    return "--- a/m.py\n+++ b/m.py\n" + body


def test_edit_metrics_of_the_gold_patch_are_perfect(requests_instance):
    metrics = edit_metrics(requests_instance.patch, requests_instance.patch)
    assert (metrics.precision, metrics.recall, metrics.f1) == (1.0, 1.0, 1.0)
    assert metrics.edited_lines == 4 and metrics.gold_faults == 2


def test_edit_metrics_count_unneeded_lines_and_missed_faults():
    extra = _variant("@@ -1,6 +1,7 @@\n a = 1\n b = 2\n-c = 3\n+c = 5\n d = 4\n-e = 5\n+e = 6\n+g = 7\n f = 6\n")
    metrics = edit_metrics(extra, GOLD)
    assert metrics.edited_lines == 3 and metrics.needed_lines == 1
    assert (metrics.precision, metrics.recall) == (round(1 / 3, 4), 1.0)

    elsewhere = _variant("@@ -5,2 +5,2 @@\n-e = 5\n+e = 6\n f = 6\n")
    assert edit_metrics(elsewhere, GOLD).recall == 0.0 and edit_metrics(elsewhere, GOLD).precision == 0.0


def test_edited_lines_count_a_modified_line_once_as_edit_metrics_do():
    assert edited_lines(GOLD) == {"added": 1, "removed": 1, "total": 1, "files": 1}
    extra = _variant("@@ -1,6 +1,7 @@\n a = 1\n b = 2\n-c = 3\n+c = 5\n d = 4\n-e = 5\n+e = 6\n+g = 7\n f = 6\n")
    assert edited_lines(extra)["total"] == edit_metrics(extra, GOLD).edited_lines == 3
    assert edited_lines("")["total"] == edited_lines("not a diff")["total"] == 0


def test_insertion_bordering_the_gold_line_is_needed():
    before = _variant("@@ -2,2 +2,3 @@\n b = 2\n+x = 0\n c = 3\n")
    metrics = edit_metrics(before, GOLD)
    assert (metrics.precision, metrics.recall) == (1.0, 1.0)
    two_away = _variant("@@ -4,2 +4,3 @@\n d = 4\n+x = 0\n e = 5\n")
    assert edit_metrics(two_away, GOLD).precision == 0.0


def test_empty_prediction_is_a_noop():
    metrics = edit_metrics("", GOLD)
    assert metrics.noop and metrics.recall == 0.0


# -- CLI ------------------------------------------------------------------------------------------------------------------


def test_eval_cli_rejects_a_bad_dataset_with_one_clear_line(tmp_path, capsys):
    from pinpoint.cli import main  # the console script's guard turns the error into one line

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instance_id": "a"}\n')
    assert main(["eval", "--gold", "--dataset", str(bad)]) == 2
    assert "bad.jsonl line 1: field 'repo' must be a non-empty string" in capsys.readouterr().err


def test_fidelity_table_counts_per_repo_and_names_every_miss(tmp_path, requests_instance):
    from pinpoint.swebench_eval.evaluate import InstanceReport, write_report
    from pinpoint.swebench_eval.fidelity import fidelity_table

    other = load_instances(ids=["psf__requests-1142"])[0]
    write_report(InstanceReport(REQUESTS_ID, "resolved"), tmp_path / "gold" / REQUESTS_ID)
    write_report(InstanceReport(other.instance_id, "no_test_output"), tmp_path / "gold" / other.instance_id)
    write_report(InstanceReport(REQUESTS_ID, "resolved"), tmp_path / "empty" / REQUESTS_ID)
    table, misses = fidelity_table([requests_instance, other], tmp_path / "gold", tmp_path / "empty")
    assert "| psf/requests | 2 | 2 | 2 | 1 | 0 | 1 | 1 |" in table
    assert misses == [f"{REQUESTS_ID}: empty resolved", "psf__requests-1142: gold no_test_output"]


def test_agent_and_grader_boxes_take_the_same_cpus_from_the_spec_unless_configured():
    from pinpoint.environments.runtime import RuntimeSettings
    from pinpoint.swebench_eval.runtime import instance_cpus
    from pinpoint.swebench_eval.specs import spec_for

    for instance in load_instances(repos=["pylint-dev/pylint", "psf/requests"]):
        expected = spec_for(instance).get("nano_cpus", 1_000_000_000) / 1e9
        assert instance_cpus(instance, RuntimeSettings()) == expected
        assert instance_cpus(instance, RuntimeSettings(cpus=3.0)) == 3.0


# -- reference layer ------------------------------------------------------------------------------------------------

#: its quarter (2020 Q2) has three commits in the archive; the reference is the oldest, c98bc4cd (pytest-7236's base)
PYTEST_ID = "pytest-dev__pytest-7432"


def _git_lines(git_dir: Path, *args: str) -> list[str]:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, text=True,
                          check=True).stdout.split()


def test_a_reference_is_the_quarters_oldest_commit_and_holds_only_objects_every_commit_of_the_quarter_has(sources):

    instance = load_instances(ids=[PYTEST_ID])[0]
    reference = choose_reference(sources, instance.repo, instance.base_commit)
    git_dir = archive_dir(sources, instance.repo)
    when = {c: int(_git_lines(git_dir, "log", "-1", "--format=%ct", c)[0]) for c in reference.members}
    assert instance.base_commit in reference.members and len(reference.members) == 3
    assert reference.commit != instance.base_commit and when[reference.commit] == min(when.values())
    assert len({period_of(t) for t in when.values()}) == 1
    assert choose_reference(sources, instance.repo, instance.base_commit) == reference  # the same on every call
    shared = set(shared_objects(sources, reference))
    assert shared and all(shared <= tree_objects(git_dir, member) for member in reference.members)


def test_the_commit_delta_holds_the_commit_and_only_the_objects_its_reference_lacks(tmp_path, sources):

    instance = load_instances(ids=[PYTEST_ID])[0]
    reference = choose_reference(sources, instance.repo, instance.base_commit)
    delta = write_commit_delta(sources, reference, instance.base_commit, tmp_path / "delta")
    (index,) = delta.glob("pack-*.idx")
    listed = subprocess.run(["git", "show-index"], stdin=index.open("rb"), capture_output=True, text=True, check=True)
    packed = {line.split()[1] for line in listed.stdout.splitlines()}
    tree = tree_objects(archive_dir(sources, instance.repo), instance.base_commit)
    assert packed == {instance.base_commit} | (tree - set(shared_objects(sources, reference)))
    assert len(packed) < len(tree) / 2  # most of the tree comes from the reference
    assert (delta / "shallow").read_text().strip() == instance.base_commit
    assert f"'{instance.base_commit}' of file://" in (delta / "FETCH_HEAD").read_text()
