"""Execution-grounded localization inside the agent: a user's pytest command is traced (coverage spectrum, LDB block
states), the signals reach the fused suspects, and the trajectory keeps the runs and the traces they came from.
The model is the FAKE scripted server (a frontier LLM cannot run here); the repository, its tests and the tracer
are real."""

from __future__ import annotations

import json
import os

import pytest
from fake_llm_server import FakeScriptedLLMServer, tool_call
from pinpoint.agent.config import load_config
from pinpoint.agent.demo import build_demo_repo
from pinpoint.agent.nodes import reproduce_path
from pinpoint.agent.runner import make_clients, run_task
from pinpoint.environments.local import LocalRuntime
from pinpoint.localization.failing_tests import ExecutionSignals, pytest_selection
from pinpoint.localization.suspects import LocalizationRequest

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
        spectrum, ldb, named, mentions = (loc.localize(LocalizationRequest()) for loc in execution.localizers())
        assert runtime.diff() == ""
    (line,) = demo.buggy_lines
    assert (spectrum[0].path, spectrum[0].start_line) == (demo.buggy_path, line)
    assert any(s.start_line <= line <= s.end_line for s in ldb[:1])
    assert [t.nodeid for t in execution.spectrum.failing] == ["tests/test_truncate_number.py::test_truncate_number"]
    assert named == []  # test_truncate_number.py is named after a function, not after a module it ran
    assert mentions == []  # no issue text names anything
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
    prompt = next(m["content"] for m in trajectory["messages"] if "Execution trace of the failing test" in
                  str(m.get("content")))
    assert "numeric/functions.py" in prompt.split("Execution trace")[1]  # the traced block's state is quoted


REPRO = ("```python\nfrom numeric.functions import truncate_number\n"
         "assert truncate_number(3.5) == 0.5, truncate_number(3.5)\n```")


def _reproduce_run(demo, tmp_path, first_reply):
    from fake_llm_server import text

    script = [text(first_reply), tool_call("str_replace_editor", FIX), tool_call("submit", {}),
              tool_call("submit", {})]
    with FakeScriptedLLMServer(script) as fake:
        config = load_config(**{"llm.base_url": fake.base_url, "llm.model": "fake", "search.policy": "none",
                                "llm.max_retries": 0, "agent.reproduce": True})
        no_oracle = type(demo.task)(demo.task.instance_id, demo.task.problem_statement)  # the issue alone
        with LocalRuntime(demo.path) as runtime:
            result = run_task(no_oracle, runtime, config, run_dir=tmp_path / "run", clients=make_clients(config.llm))
            tree = runtime.diff()
            script = reproduce_path(runtime)
            # outside the tree, in this checkout's own folder (not the host's shared /tmp), gone with the checkout
            assert not script.startswith(runtime.workdir) and script.startswith(os.path.dirname(runtime.workdir))
    assert not os.path.exists(script)
    return result, json.loads(result.trajectory.read_text()), tree, script


def test_a_failing_reproduction_feeds_localization_and_stays_out_of_the_patch(demo, tmp_path):
    result, trajectory, tree, script = _reproduce_run(demo, tmp_path, REPRO)
    nodes = [e["node"] for e in trajectory["events"] if e["kind"] == "node"]
    assert nodes[:3] == ["view", "reproduce", "localize"]
    (event,) = [e for e in trajectory["events"] if e["kind"] == "reproduce"]
    assert event["status"] == "fails" and "AssertionError" in event["output"] and "1.5" in event["output"]
    localize = next(e for e in trajectory["events"] if e["kind"] == "localize")
    assert localize["signals"]["traceback"], "the reproduction's traceback reached the traceback signal"
    # the script ran whole under the tracer, with the tests of the module it went through as passing tests
    (execution,) = [e for e in trajectory["events"] if e["kind"] == "execution"]
    assert execution["source"] == "reproduce"
    outcomes = {t["nodeid"]: t["outcome"] for t in execution["spectrum"]["tests"]}
    assert outcomes[f"script::{script}"] == "failed"
    assert all(t["cpu_s"] >= 0 and t["seconds"] > 0 for t in execution["spectrum"]["tests"])  # what each cost
    top = localize["signals"]["spectrum"][0]
    assert (top["path"], top["start_line"]) == (demo.buggy_path, demo.buggy_lines[0])
    assert result.status == "submitted" and "reproduce" not in result.patch and tree == result.patch
    assert {line[6:] for line in result.patch.splitlines() if line.startswith("+++ ")} == {"numeric/functions.py"}


def test_a_reproduction_that_passes_or_is_missing_is_recorded_and_the_run_goes_on(demo, tmp_path):
    passing = "```python\nprint('all good')\n```"
    for reply, status in ((passing, "passes"), ("I cannot write one.", "no_script")):
        result, trajectory, _, _ = _reproduce_run(demo, tmp_path / status, reply)
        (event,) = [e for e in trajectory["events"] if e["kind"] == "reproduce"]
        assert event["status"] == status and result.status == "submitted"


def test_after_view_reproduces_only_when_asked_and_a_test_command_comes_first():
    from pinpoint.agent import routes
    from pinpoint.agent.state import Task, initial_state

    issue, command = Task("t", "issue"), Task("t", "issue", test_command="pytest -q")
    on, off = load_config(**{"agent.reproduce": True}), load_config()
    assert routes.after_view(initial_state(issue), on) == "reproduce"
    assert routes.after_view(initial_state(issue), off) == "localize"
    assert routes.after_view(initial_state(command), on) == "test"


def test_ldb_llm_asks_for_one_verdict_per_block_in_one_query_and_quotes_the_reason(demo, tmp_path):
    from fake_llm_server import text

    verdict = text("BLOCK-0: wrong - it adds 1.0 to the decimal part, so 3.5 gives 1.5")
    script = [verdict, tool_call("str_replace_editor", FIX), tool_call("submit", {}), tool_call("submit", {})]
    with FakeScriptedLLMServer(script) as fake:
        config = load_config(**{"llm.base_url": fake.base_url, "llm.model": "fake", "search.policy": "none",
                                "llm.max_retries": 0, "agent.ldb_llm": True})
        with LocalRuntime(demo.path) as runtime:
            result = run_task(demo.task, runtime, config, run_dir=tmp_path / "run", clients=make_clients(config.llm))
        asked = fake.chat_requests[0]["messages"][-1]["content"]
    assert "BLOCK-0" in asked and "truncate_number" in asked  # LDB's query: the blocks and their states
    trajectory = json.loads(result.trajectory.read_text())
    assert [e["purpose"] for e in trajectory["events"] if e["kind"] == "llm"][0] == "ldb"
    localize = next(e for e in trajectory["events"] if e["kind"] == "localize")
    (judged,) = localize["signals"]["ldb_llm"]
    assert judged["path"] == demo.buggy_path and "3.5 gives 1.5" in judged["evidence"]
    assert result.status == "submitted"
