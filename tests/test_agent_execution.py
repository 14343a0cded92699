"""Execution-grounded localization inside the agent: a user's pytest command is traced (coverage spectrum, LDB block
states), the signals reach the fused suspects, and the trajectory keeps the runs and the traces they came from.
The model is the FAKE scripted server (a frontier LLM cannot run here); the repository, its tests and the tracer
are real."""

from __future__ import annotations

import json

import pytest
from fake_llm_server import FakeScriptedLLMServer, tool_call

from agent.config import load_config
from agent.demo import build_demo_repo
from agent.runner import make_clients, run_task
from environments.local import LocalRuntime
from localization.failing_tests import ExecutionSignals, pytest_selection
from localization.suspects import LocalizationRequest

FIX = {"command": "str_replace", "path": "numeric/functions.py", "old_str": "return number % 1.0 + 1.0",
       "new_str": "return number % 1.0"}


@pytest.fixture
def demo(tmp_path):
    return build_demo_repo(tmp_path / "repo", "Python/2")


def test_a_pytest_command_is_read_as_its_selection_options_and_interpreter():
    tests = pytest_selection("/venv/bin/python -m pytest -q -x tests/test_a.py::t -k 'a and b' --tb=short")
    assert tests.failing == ["tests/test_a.py::t"] and tests.pytest_args == ["-k", "a and b"]
    assert tests.python == "/venv/bin/python"
    assert pytest_selection("pytest").failing == ["."]
    assert pytest_selection("make test") is None and pytest_selection("echo 'unbalanced") is None


def test_the_commands_failing_test_ranks_the_buggy_line_first_and_leaves_the_tree_clean(demo):
    with LocalRuntime(demo.path) as runtime:
        execution = ExecutionSignals(runtime, pytest_selection(demo.task.test_command), budget_s=120)
        spectrum, ldb = (loc.localize(LocalizationRequest()) for loc in execution.localizers())
        assert runtime.diff() == ""
    (line,) = demo.buggy_lines
    assert (spectrum[0].path, spectrum[0].start_line) == (demo.buggy_path, line)
    assert any(s.start_line <= line <= s.end_line for s in ldb[:1])
    assert [t.nodeid for t in execution.spectrum.failing] == ["tests/test_truncate_number.py::test_truncate_number"]
    assert len(execution.spectrum.passing) == 4
    assert "test_truncate_number" in execution.failure_output()


def test_a_run_with_a_test_command_uses_spectrum_and_ldb_and_records_the_traces(demo, tmp_path):
    script = [tool_call("str_replace_editor", FIX), tool_call("submit", {}), tool_call("submit", {})]
    with FakeScriptedLLMServer(script) as fake:
        config = load_config(**{"llm.base_url": fake.base_url, "llm.model": "fake", "search.policy": "none",
                                "llm.max_retries": 0})
        with LocalRuntime(demo.path) as runtime:
            result = run_task(demo.task, runtime, config, run_dir=tmp_path / "run", clients=make_clients(config.llm))
    assert result.status == "submitted"
    trajectory = json.loads(result.trajectory.read_text())
    (execution,) = [e for e in trajectory["events"] if e["kind"] == "execution"]
    assert execution["source"] == "command" and "1 failed, 4 passed" in execution["spectrum"]["summary"]
    assert execution["blocks"] and execution["blocks"][0]["signal"] == "ldb"
    localize = next(e for e in trajectory["events"] if e["kind"] == "localize")
    top = localize["signals"]["spectrum"][0]
    assert (top["path"], top["start_line"]) == (demo.buggy_path, demo.buggy_lines[0])
    assert localize["signals"]["ldb"]
