"""A scripted run that resolves a real SWE-bench dev instance: the FAKE scripted model replays the gold fix as
`str_replace_editor` calls inside the instance's real container (`pinpoint run --evaluate`), and the official
grading logic (FAIL_TO_PASS / PASS_TO_PASS) must call the prediction resolved."""

from __future__ import annotations

import json
import subprocess

import pytest
from fake_llm_server import FakeScriptedLLMServer, tool_call
from pinpoint.cli import main
from pinpoint.swebench_eval.datasets import load_instances
from unidiff import PatchSet

INSTANCE = "psf__requests-1142"  # fast to build; also the harness's own real-container instance


def gold_edits(patch: str) -> list[dict]:
    """The gold patch as str_replace edits: each hunk's old side (context + removed) becomes its new side."""
    edits = []
    for patched_file in PatchSet(patch):
        for hunk in patched_file:
            old = "".join(line.value for line in hunk if line.is_context or line.is_removed)
            new = "".join(line.value for line in hunk if line.is_context or line.is_added)
            edits.append({"command": "str_replace", "path": patched_file.path, "old_str": old, "new_str": new})
    return edits


@pytest.mark.docker
def test_gold_replay_through_the_agent_resolves_under_official_grading(tmp_path, docker_client):
    instance = load_instances(ids=[INSTANCE])[0]
    edits = gold_edits(instance.patch)
    assert len(edits) == 1
    script = [tool_call("str_replace_editor", e) for e in edits] + [tool_call("submit", {}), tool_call("submit", {})]
    with FakeScriptedLLMServer(script) as fake:
        code = main(["run", INSTANCE, "--evaluate", "--output", str(tmp_path), "--set", "search.policy=none",
                     "--set", f"llm.base_url={fake.base_url}", "--set", "llm.model=fake-gold-replay"])
    assert code == 0
    run = tmp_path / "swebench_verified_dev" / "fake-gold-replay"  # <runs root>/<run id>/<model>
    (pred,) = [json.loads(line) for line in (run / "preds.jsonl").read_text().splitlines()]
    assert pred["instance_id"] == INSTANCE and pred["status"] == "submitted"
    assert pred["resolved"] is True and pred["outcome"] == "resolved"
    report = json.loads((run / "eval" / INSTANCE / "report.json").read_text())[INSTANCE]
    assert report["resolved"] is True
    assert report["tests_status"]["FAIL_TO_PASS"]["success"] == list(instance.FAIL_TO_PASS)
    trajectory = json.loads((run / "trajectories" / INSTANCE / "trajectory.json").read_text())
    assert trajectory["runtime"] == "DockerRuntime" and trajectory["edited_lines"]["total"] == 3
    # and the same predictions file resolves under `pinpoint eval`
    code = main(["eval", "--predictions", str(run / "preds.jsonl"), "--instance", INSTANCE,
                 "--output", str(tmp_path / "graded"), "--run-id", "replay"])
    summary = json.loads((tmp_path / "graded" / "replay" / "summary.json").read_text())
    assert summary["resolved_instances"] == 1 and summary["ids"]["resolved"] == [INSTANCE]
    # and `eval` on the run's own folder and run id reuses the report `run --evaluate` wrote
    graded_at = (run / "eval" / INSTANCE / "report.json").stat().st_mtime_ns
    code = main(["eval", "--predictions", str(run / "preds.jsonl"), "--instance", INSTANCE,
                 "--output", str(tmp_path), "--run-id", "swebench_verified_dev"])
    assert code == 0 and (run / "eval" / INSTANCE / "report.json").stat().st_mtime_ns == graded_at
    assert json.loads((tmp_path / "swebench_verified_dev" / "summary.json").read_text())["resolved_instances"] == 1


@pytest.mark.docker
def test_fix_in_a_container_built_from_the_repository_install_files(tmp_path, docker_client):
    from pinpoint.agent.demo import build_demo_repo

    demo = build_demo_repo(tmp_path / "team-repo", "Python/2")
    (demo.path / "requirements.txt").write_text("# no third-party dependencies\n")
    subprocess.run(["git", "-C", str(demo.path), "add", "requirements.txt"], check=True)
    subprocess.run(["git", "-C", str(demo.path), "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm",
                    "requirements"], check=True)
    issue = tmp_path / "issue.txt"
    issue.write_text(demo.task.problem_statement)
    check = "python -c 'from numeric.functions import truncate_number as t; assert t(3.5) == 0.5'"
    fix = {"command": "str_replace", "path": "numeric/functions.py", "old_str": "return number % 1.0 + 1.0",
           "new_str": "return number % 1.0"}
    script = [tool_call("str_replace_editor", fix), tool_call("submit", {}), tool_call("submit", {})]
    with FakeScriptedLLMServer(script) as fake:
        code = main(["fix", str(demo.path), "--issue", str(issue), "--test-cmd", check, "--offline",
                     "--branch", "pinpoint/fix", "--output", str(tmp_path / "out"), "--set", "search.policy=none",
                     "--set", f"llm.base_url={fake.base_url}", "--set", "llm.model=fake"])
    assert code == 0
    run = tmp_path / "out" / "fix" / "fake"  # <runs root>/<run id>/<model>
    [path] = (run / "trajectories").glob("*/trajectory.json")  # named after the issue's title and the run's key
    trajectory = json.loads(path.read_text())
    assert trajectory["runtime"] == "DockerRuntime" and trajectory["status"] == "submitted"
    assert trajectory["test_runs"][0]["ok"] is False and trajectory["test_runs"][-1]["ok"] is True
    shown = subprocess.run(["git", "-C", str(demo.path), "show", "pinpoint/fix"], capture_output=True, text=True)
    assert "+    return number % 1.0" in shown.stdout


@pytest.mark.docker
def test_oracle_mode_traces_the_instances_failing_tests_and_keeps_them_out_of_the_patch(tmp_path, docker_client):
    instance = load_instances(ids=[INSTANCE])[0]
    script = [tool_call("str_replace_editor", e) for e in gold_edits(instance.patch)]
    script += [tool_call("submit", {}), tool_call("submit", {})]
    with FakeScriptedLLMServer(script) as fake:
        code = main(["run", INSTANCE, "--output", str(tmp_path), "--set", "search.policy=none", "--run-id", "oracle",
                     "--set", "agent.oracle_tests=true", "--set", f"llm.base_url={fake.base_url}",
                     "--set", "llm.model=fake-oracle"])
    assert code == 0
    run = tmp_path / "oracle" / "fake-oracle"
    trajectory = json.loads((run / "trajectories" / INSTANCE / "trajectory.json").read_text())
    (execution,) = [e for e in trajectory["events"] if e["kind"] == "execution"]
    assert execution["source"] == "oracle" and execution["failing"] == list(instance.FAIL_TO_PASS)
    outcomes = {t["nodeid"]: t["outcome"] for t in execution["spectrum"]["tests"]}
    assert all(outcomes[t] == "failed" for t in instance.FAIL_TO_PASS)
    localize = next(e for e in trajectory["events"] if e["kind"] == "localize")
    assert "requests/models.py" in {s["path"] for s in localize["signals"]["spectrum"]}  # the gold file is run
    assert "requests/models.py" in {s["path"] for s in trajectory["suspects"][:10]}
    (pred,) = [json.loads(line) for line in (run / "preds.jsonl").read_text().splitlines()]
    assert {f.path for f in PatchSet(pred["model_patch"])} == {"requests/models.py"}  # no test file
