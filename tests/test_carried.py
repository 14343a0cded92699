"""Report and trajectory folders carried from a worker to the driver (swebench_eval/carried.py).

A task run with `carry` (what the Ray backend does) writes nothing into the run: the run's root is a folder that
does not exist and still does not afterwards. It hands its folders back and the driver writes them: a real gold
grading of psf__requests-2931 hands back the files a local grading writes (resolved), and a local task on the
FAKE scripted model server hands back its trajectory and checkpoint, which the next attempt resumes from (no new
model call), and whose interruption names the driver's folder, not the worker's scratch one.
"""

from __future__ import annotations

import json

import pytest
from fake_llm_server import FakeScriptedLLMServer, http_error, tool_call
from pinpoint.agent.batch import Carried, _landed, solve_task
from pinpoint.agent.config import load_config
from pinpoint.agent.runner import RunInterrupted
from pinpoint.environments.executor import Outcome
from pinpoint.swebench_eval.carried import FolderFiles
from pinpoint.swebench_eval.layout import RunLayout
from test_agent_batch import _make_tasks, _reply


def test_a_folder_is_written_with_its_verdict_last_and_an_old_verdict_never_stays_beside_new_files(tmp_path):
    folder = tmp_path / "eval" / "x"
    FolderFiles({"report.json": b'{"old": 1}', "patch.diff": b"old"}).write(folder)
    assert FolderFiles.read(folder).files == {"patch.diff": b"old", "report.json": b'{"old": 1}'}
    (folder / "logs").mkdir()
    (folder / "logs" / "a.txt").mkdir()  # a file cannot replace this folder: the write fails midway
    broken = FolderFiles({"patch.diff": b"new", "logs/a.txt": b"x", "report.json": b'{"new": 1}'})
    with pytest.raises(OSError):
        broken.write(folder)
    assert not (folder / "report.json").exists()  # a resume grades it again instead of trusting the old verdict
    assert FolderFiles.read(tmp_path / "missing").files == {} and not FolderFiles.read(tmp_path / "missing")


def _config(base_url: str):
    return load_config(overrides=[f"llm.base_url={base_url}", "llm.model=fake", "llm.max_retries=0",
                                  "search.policy=none"])


def test_a_carried_task_writes_nothing_in_the_run_and_resumes_from_the_checkpoint_it_is_given(tmp_path):
    row = json.loads((_make_tasks(tmp_path, n=1)).read_text().splitlines()[0])
    driver = RunLayout("tasks", "fake", tmp_path / "driver-runs")
    with FakeScriptedLLMServer(default=_reply) as fake:
        config = _config(fake.base_url)
        carried = solve_task(row, config, driver, False, None, False, carry=FolderFiles())
        calls = len(fake.chat_requests)
        assert isinstance(carried, Carried) and carried.error is None
        assert not (tmp_path / "driver-runs").exists()  # the worker wrote nothing into the run
        assert {"trajectory.json", "checkpoint.sqlite"} <= set(carried.trajectory.files)
        assert carried.solved.result.submitted and "return 0" in carried.solved.result.patch
        landed = _landed(Outcome("task-0", value=carried), driver)
        assert landed.value is carried.solved and landed.error is None
        folder = driver.trajectory_dir("task-0")
        assert carried.solved.result.trajectory == folder / "trajectory.json"
        assert json.loads((folder / "trajectory.json").read_text())["status"] == "submitted"
        again = solve_task(row, config, driver, False, None, False, carry=FolderFiles.read(folder))
        assert again.solved.result.resumed and again.solved.result.patch == carried.solved.result.patch
        assert len(fake.chat_requests) == calls  # resumed from the carried checkpoint: no model call


def test_a_carried_interruption_comes_back_with_its_trajectory_and_names_the_drivers_folder(tmp_path):
    row = json.loads((_make_tasks(tmp_path, n=1)).read_text().splitlines()[0])
    driver = RunLayout("tasks", "fake", tmp_path / "driver-runs")
    with FakeScriptedLLMServer(default=http_error(503, "the endpoint is down")) as fake:
        carried = solve_task(row, _config(fake.base_url), driver, False, None, False, carry=FolderFiles())
    assert isinstance(carried.error, RunInterrupted), carried.error
    assert str(driver.trajectory_dir("task-0")) in str(carried.error) and "pinpoint-scratch-" not in str(carried.error)
    assert "trajectory.json" in carried.trajectory.files  # kept, for the rerun to resume from
    assert not (tmp_path / "driver-runs").exists()


@pytest.mark.docker
def test_a_carried_grading_hands_back_the_report_folder_a_local_grading_writes(tmp_path):
    from pinpoint.swebench_eval.datasets import load_instances
    from pinpoint.swebench_eval.predictions import gold_predictions
    from pinpoint.swebench_eval.run import grade_task

    instance = load_instances(ids=["psf__requests-2931"])[0]
    prediction = gold_predictions([instance])[instance.instance_id]
    local = RunLayout("gold", "", tmp_path / "local")
    here = grade_task(instance, prediction, local, None, False, 600.0)
    away = grade_task(instance, prediction, RunLayout("gold", "", tmp_path / "driver"), None, False, 600.0, True)
    assert here.report is None and here.verdict.resolved
    assert not (tmp_path / "driver").exists()  # graded into a scratch folder on the node, not into the run
    written = FolderFiles.read(local.with_model(prediction.model_name_or_path).eval_dir(instance.instance_id))
    assert set(away.report.files) == set(written.files) >= {"report.json", "test_output.txt", "patch.diff",
                                                            "eval.sh"}
    assert away.verdict.resolved and away.verdict.outcome == here.verdict.outcome == "resolved"
    assert away.report.files["patch.diff"] == written.files["patch.diff"]
    assert json.loads(away.report.files["report.json"])[instance.instance_id]["resolved"] is True


@pytest.mark.docker
def test_a_carried_batch_task_with_evaluate_hands_back_its_report_and_the_driver_can_reuse_it(tmp_path):
    from pinpoint.swebench_eval.datasets import load_instances
    from pinpoint.swebench_eval.predictions import Prediction
    from pinpoint.swebench_eval.run import reusable_report
    from test_agent_docker import INSTANCE, gold_edits

    instance = load_instances(ids=[INSTANCE])[0]
    script = [tool_call("str_replace_editor", e) for e in gold_edits(instance.patch)]
    driver = RunLayout("dev", "fake-gold-replay", tmp_path / "driver-runs")
    with FakeScriptedLLMServer(script + [tool_call("submit", {}), tool_call("submit", {})]) as fake:
        config = load_config(overrides=[f"llm.base_url={fake.base_url}", "llm.model=fake-gold-replay",
                                        "search.policy=none"])
        carried = solve_task(instance, config, driver, True, None, False, carry=FolderFiles())
    assert carried.error is None and carried.solved.graded["outcome"] == "resolved"
    assert not (tmp_path / "driver-runs").exists()
    assert {"report.json", "test_output.txt", "patch.diff"} <= set(carried.report.files)
    _landed(Outcome(INSTANCE, value=carried), driver)
    prediction = Prediction(INSTANCE, carried.solved.result.patch, "fake-gold-replay")
    reused = reusable_report(driver.eval_dir(INSTANCE), prediction)  # what a resumed `eval` on the driver finds
    assert reused is not None and reused.resolved
    assert json.loads((driver.trajectory_dir(INSTANCE) / "trajectory.json").read_text())["runtime"] == "DockerRuntime"
