"""Single routers (pure functions of state and config) and single nodes (on a real LocalRuntime over a small git
repository, with the FAKE scripted LLM server where a node needs a model), without LangGraph."""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import get_type_hints

import pytest
from fake_llm_server import FakeScriptedLLMServer, text, tool_calls
from pinpoint.agent import nodes, routes
from pinpoint.agent.config import Config, load_config
from pinpoint.agent.context import AgentContext, run_node
from pinpoint.agent.llm import LLMClient
from pinpoint.agent.state import (
    AgentState,
    BestPatch,
    Task,
    TestRecord,
    checkpoint_saver,
    initial_state,
    run_key,
)
from pinpoint.environments.local import LocalRuntime
from pinpoint.localization.suspects import Suspect
from pinpoint.swebench_eval.metrics import edited_lines
from pinpoint.tools.protocol import ToolCall
from pinpoint.tools.registry import call_tool, default_tools
from pinpoint.tools.run_tests import Frame, TestRun

BUGGY = "def add(a, b):\n    return a - b\n"
#: not the size of BUGGY: a same-size edit made within the second of the last index write can be missing from
#: diff() (environments/worktree.py copies the index without its mtime, which defeats git's racy-clean check)
FIXED = "def add(a, b):\n    return sum((a, b))\n"
TESTS = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n"
COMMAND = f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {sys.executable} -m pytest -q -p no:cacheprovider test_calc.py"
#: an endpoint nothing listens on: a node that should not call the model fails loudly if it does
NO_MODEL = "http://127.0.0.1:9/v1"
#: state keys LangGraph appends to (Annotated with a reducer) rather than replaces
APPENDED = {k for k, t in get_type_hints(AgentState, include_extras=True).items() if getattr(t, "__metadata__", None)}


def merged(state: dict, update: dict) -> dict:
    """The state after `update`, as LangGraph's reducers make it (what the router after a node sees)."""
    return {**state, **{k: state.get(k, []) + v if k in APPENDED else v for k, v in update.items()}}


def config(**fields) -> Config:
    return load_config(**{"llm.base_url": NO_MODEL, "llm.model": "fake", "llm.max_retries": 0,
                          "llm.timeout_s": 5.0, "search.policy": "none", **fields})


def state_of(oracle: str | None = None, **fields) -> dict:
    return {**initial_state(Task("calc-1", "add(2, 3) returns -1; it must return 5.", test_command=oracle)), **fields}


def record(run: TestRun, source: str = "model", patch: str = "") -> TestRecord:
    return nodes.run_record(run, source, patch)


FAILING = record(TestRun.parse("pytest -q", 1, 'calc.py:2: in add\nE   assert -1 == 5\n1 failed, 1 passed in 0.01s\n'))
PASSING = record(TestRun.parse("pytest -q", 0, "2 passed in 0.01s\n"))
LOCALIZED = [{"kind": "localize", "signals": {}}]
SUSPECTS = [Suspect("calc.py", 1, 2, 1.0, "bm25")]
SUBMIT = ToolCall("call_s", "submit", {}, "{}")


# --- routers --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("router", [routes.after_view, routes.after_localize, routes.after_edit,
                                    routes.after_test, routes.after_search, routes.after_submit])
@pytest.mark.parametrize("status", ["budget:steps", "budget:wall_time", "llm_error", "runtime_error", "submitted"])
def test_every_router_sends_a_finished_run_to_finalize(router, status):
    state = state_of(COMMAND, status=status, test_runs=[FAILING], last_test=FAILING, events=LOCALIZED,
                     pending_calls=[SUBMIT])
    assert router(state, config(**{"search.policy": "flare"})) == "finalize"


@pytest.mark.parametrize("oracle, expected", [(COMMAND, "test"), (None, "localize")])
def test_view_runs_a_known_test_command_first(oracle, expected):
    assert routes.after_view(state_of(oracle), config()) == expected


@pytest.mark.parametrize("runs, policy, searches, expected", [
    ([FAILING], "flare", 0, "search"),
    ([FAILING], "none", 0, "edit"),  # no policy
    ([FAILING], "flare", 1, "edit"),  # search.max_searches (1 by default) spent
    ([PASSING], "flare", 0, "edit"),  # nothing fails: nothing to search for
    ([], "flare", 0, "edit"),
])
def test_localize_starts_a_search_only_on_a_failing_test_when_allowed(runs, policy, searches, expected):
    state = state_of(COMMAND, test_runs=runs, searches=searches)
    assert routes.after_localize(state, config(**{"search.policy": policy})) == expected


@pytest.mark.parametrize("pending, oracle, expected", [
    (["run_tests"], None, "test"),
    (["run_tests", "submit"], None, "test"),
    (["submit"], COMMAND, "test"),  # the oracle checks a submit first
    (["submit"], None, "submit"),
    ([], COMMAND, "edit"),  # a turn without deferred calls (or without any call) loops
])
def test_edit_hands_deferred_calls_to_their_node(pending, oracle, expected):
    state = state_of(oracle, pending_calls=[ToolCall(f"c{i}", n, {}, "{}") for i, n in enumerate(pending)])
    assert routes.after_edit(state, config()) == expected


TRACEBACK_ELSEWHERE = record(TestRun.parse("pytest -q", 1, 'File "/repo/other.py", line 40, in f\n1 failed in 0.1s\n'))


@pytest.mark.parametrize("last, events, policy, relocalize, expected", [
    (FAILING, [], "flare", True, "localize"),  # the first failure localizes, even when search is allowed
    (FAILING, [], "none", True, "localize"),
    (FAILING, LOCALIZED, "flare", True, "search"),  # localized already: search when allowed
    (FAILING, LOCALIZED, "none", True, "edit"),  # no search policy: the model edits again
    (TRACEBACK_ELSEWHERE, LOCALIZED, "flare", True, "localize"),  # a traceback outside the suspects
    (TRACEBACK_ELSEWHERE, LOCALIZED, "flare", False, "search"),  # ... unless re-localizing is off
])
def test_failing_tests_localize_first_then_search_when_allowed_else_edit(last, events, policy, relocalize, expected):
    state = state_of(None, test_runs=[last], last_test=last, events=events, suspects=SUSPECTS)
    cfg = config(**{"search.policy": policy, "agent.relocalize_on_failure": relocalize})
    assert routes.after_test(state, cfg) == expected


def test_search_after_a_failing_test_needs_a_command_and_searches_left():
    state = state_of(None, test_runs=[FAILING], last_test=FAILING, events=LOCALIZED, suspects=SUSPECTS)
    cfg = config(**{"search.policy": "flare", "search.max_searches": 2})
    assert routes.after_test(state, cfg) == "search"  # the model's own command judges candidates
    assert routes.after_test({**state, "searches": 2}, cfg) == "edit"
    no_command = {**state, "test_runs": [dataclasses.replace(FAILING, source="search")]}
    assert routes.after_test(no_command, cfg) == "edit"


@pytest.mark.parametrize("last, pending, oracle, expected", [
    (PASSING, [SUBMIT], None, "submit"),
    (PASSING, [], COMMAND, "submit"),  # the oracle passed: submit without being asked
    (PASSING, [], None, "edit"),  # the model's tests pass; it decides when to submit
    (None, [SUBMIT], None, "submit"),  # no test ran (a refused run_tests call)
    (None, [], None, "edit"),
])
def test_passing_or_no_tests_go_to_submit_when_it_waits_or_the_oracle_passed(last, pending, oracle, expected):
    state = state_of(oracle, test_runs=[PASSING], last_test=last, pending_calls=pending)
    assert routes.after_test(state, config()) == expected


def test_a_submit_is_blocked_while_tests_fail():
    """The test node refuses the pending submit on a failing run; the router never reaches submit."""
    state = state_of(COMMAND, test_runs=[FAILING], last_test=FAILING, events=LOCALIZED, pending_calls=[])
    for policy in ("none", "flare"):
        assert routes.after_test(state, config(**{"search.policy": policy})) != "submit"


@pytest.mark.parametrize("last, expected", [(PASSING, "submit"), (FAILING, "edit")])
def test_search_submits_only_a_passing_program(last, expected):
    assert routes.after_search(state_of(COMMAND, test_runs=[FAILING, last]), config()) == expected


def test_an_unaccepted_submit_returns_to_the_model():
    assert routes.after_submit(state_of(None, reviewed=True), config()) == "edit"


# --- the test-run type ----------------------------------------------------------------------------------------------


def test_test_runs_round_trip_through_the_checkpointer_and_sort_by_their_key():
    run = TestRun.parse("pytest -q", 1, "\x1b[31mFAILED t.py::test_a - boom\x1b[0m\nt.py:3: in test_a\n"
                        "1 failed, 3 passed in 0.2s\n")
    assert (run.passed, run.failed, run.failed_tests, run.ok) == (3, 1, ["t.py::test_a"], False)
    assert run.frames == [Frame("t.py", 3)] and "\x1b[" not in run.output
    best = BestPatch(record(run), "the patch")
    with contextlib.closing(sqlite3.connect(":memory:")) as connection:
        serde = checkpoint_saver(connection).serde
        assert serde.loads_typed(serde.dumps_typed(best)) == best
    no_summary = TestRun.parse("make check", 2, "Error 2\n")
    assert (no_summary.passed, no_summary.failed, no_summary.counts) == (0, 1, None)
    smaller = record(TestRun.parse("pytest", 0, "4 passed in 0.1s\n"), patch=_patch(1))
    larger = record(TestRun.parse("pytest", 0, "4 passed in 0.1s\n"), patch=_patch(3))
    assert run_key(smaller) > run_key(larger) > run_key(record(run)) > run_key(None)


def _patch(lines: int) -> str:
    body = "".join(f"+x{i} = {i}\n" for i in range(lines))
    return f"diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -0,0 +1,{lines} @@\n{body}"


# --- nodes on a real runtime ----------------------------------------------------------------------------------------


@pytest.fixture
def runtime(tmp_path: Path):
    repo = tmp_path / "calc"
    repo.mkdir()
    (repo / "calc.py").write_text(BUGGY)
    (repo / "test_calc.py").write_text(TESTS)
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "base"], cwd=repo, check=True)
    with LocalRuntime(repo) as rt:
        yield rt


def context(runtime: LocalRuntime, cfg: Config | None = None) -> AgentContext:
    cfg = cfg or config()
    return AgentContext(runtime=runtime, llm=LLMClient(cfg.llm), config=cfg, localizers=[])


def test_model_test_run_is_typed_recorded_and_a_waiting_submit_refused(runtime):
    ctx = context(runtime)
    run_call = ToolCall("call_t", "run_tests", {"command": COMMAND, "timeout": 120}, "")
    state = state_of(None, pending_calls=[run_call, SUBMIT])
    update = nodes.test(state, ctx)
    [run] = update["test_runs"]
    assert (run.source, run.ok, run.run.passed, run.run.failed) == ("model", False, 1, 1)
    assert run.run.failed_tests == ["test_calc.py::test_add"] and run.run.command == COMMAND
    assert update["last_test"] == run and update["pending_calls"] == []
    answers = {m["tool_call_id"]: m["content"] for m in update["messages"]}
    assert "Result: 1 failed, 1 passed" in answers["call_t"] and "Not submitted" in answers["call_s"]
    assert update["best"].patch == "" and update["best"].record.run.failed == 1
    assert routes.after_test(merged(state, update), ctx.config) == "localize"


def test_oracle_checks_a_submit_and_a_pass_keeps_it_waiting(runtime):
    ctx = context(runtime)
    runtime.write_file("calc.py", FIXED)
    worse = BestPatch(FAILING, "old")
    state = state_of(COMMAND, pending_calls=[SUBMIT], best=worse)
    update = nodes.test(state, ctx)
    [run] = update["test_runs"]
    assert (run.source, run.ok, run.run.passed) == ("oracle", True, 2)
    diff = runtime.diff()
    assert run.patch_sha == nodes.patch_sha(diff) and run.run.patch_edited_lines == edited_lines(diff)["total"] > 0
    assert update["messages"][0]["content"].startswith(f"Check `{COMMAND}` passed (exit 0, 2 passed, 0 failed)")
    assert update["pending_calls"] == [SUBMIT] and update["best"].patch == diff
    assert routes.after_test(merged(state, update), ctx.config) == "submit"


def test_a_refused_run_tests_call_runs_nothing(runtime):
    ctx = context(runtime)
    state = state_of(None, pending_calls=[ToolCall("call_t", "run_tests", {"command": "  "}, "")])
    update = nodes.test(state, ctx)
    assert update["test_runs"] == [] and update["last_test"] is None and "best" not in update
    assert "The test command is empty" in update["messages"][0]["content"] and update["events"][0]["error"]
    assert routes.after_test(merged(state, update), ctx.config) == "edit"


def test_a_worse_run_does_not_replace_the_best_patch(runtime):
    best = BestPatch(PASSING, "the passing patch")
    update = nodes.test(state_of(COMMAND, best=best), context(runtime))
    assert not update["test_runs"][0].ok and "best" not in update


def test_run_tests_tool_carries_the_typed_run_it_renders(runtime):
    result = call_tool(default_tools(), "run_tests", {"command": COMMAND, "timeout": 120}, runtime)
    assert isinstance(result.value, TestRun) and result.output == result.value.render()
    assert result.value.failed_tests == ["test_calc.py::test_add"]
    assert call_tool(default_tools(), "view", {"path": "calc.py"}, runtime).value is None


def test_submit_refuses_nothing_then_reviews_then_accepts(runtime):
    ctx = context(runtime)
    state = state_of(None, pending_calls=[SUBMIT, dataclasses.replace(SUBMIT, id="call_s2")])
    empty = nodes.submit(state, ctx)
    assert "Nothing to submit" in empty["messages"][0]["content"] and "status" not in empty
    assert empty["messages"][1]["content"] == "(duplicate submit ignored)"
    runtime.write_file("calc.py", FIXED)
    review = nodes.submit(state, ctx)
    assert review["reviewed"] and "Review your patch" in review["messages"][0]["content"]
    assert routes.after_submit(merged(state, review), ctx.config) == "edit"
    accepted = nodes.submit({**state, "reviewed": True}, ctx)
    assert accepted["status"] == "submitted" and accepted["final_patch"] == runtime.diff()
    assert routes.after_submit(merged(state, accepted), ctx.config) == "finalize"


def test_finalize_keeps_the_better_of_the_current_and_the_best_tested_patch(runtime):
    ctx = context(runtime)
    best = BestPatch(PASSING, "the passing patch")
    failing_now = dataclasses.replace(FAILING, patch_sha=nodes.patch_sha("broken"))
    stopped = nodes.finalize(state_of(None, patch="broken", best=best, test_runs=[failing_now]), ctx)
    assert stopped == {"final_patch": "the passing patch", "status": "stopped"}
    untested = nodes.finalize(state_of(None, patch="untested", best=BestPatch(FAILING, "p"),
                                       status="budget:steps"), ctx)
    assert untested == {"final_patch": "untested", "status": "budget:steps"}
    submitted = nodes.finalize(state_of(None, status="submitted", final_patch="s", best=best), ctx)
    assert submitted == {"final_patch": "s"}


def test_edit_runs_tools_at_once_and_defers_run_tests_and_submit(runtime):
    step = tool_calls([("view", {"path": "calc.py"}), ("run_tests", {"command": COMMAND}), ("submit", {})])
    with FakeScriptedLLMServer([step]) as fake:
        ctx = context(runtime, config(**{"llm.base_url": fake.base_url}))
        state = state_of(None, messages=[{"role": "user", "content": "fix add"}], steps=3)
        update = nodes.edit(state, ctx)
    assert update["steps"] == 4 and [p.name for p in update["pending_calls"]] == ["run_tests", "submit"]
    assistant, answer = update["messages"]
    assert len(assistant["tool_calls"]) == 3 and "return a - b" in answer["content"]
    assert [e["name"] for e in update["events"]] == ["view"]
    assert routes.after_edit(merged(state, update), ctx.config) == "test"


def test_the_node_wrapper_checks_budgets_first_and_ends_on_endpoint_failures(runtime):
    def never(state, ctx):
        raise AssertionError("a spent budget must stop the node before it runs")

    ctx = context(runtime, config(**{"budget.max_steps": 2}))
    spent = run_node(state_of(None, steps=2), ctx=ctx, name="edit", node=never)
    assert spent["status"] == "budget:steps" and spent["events"][-1]["node"] == "edit"
    assert routes.after_edit(merged(state_of(None), spent), ctx.config) == "finalize"
    with FakeScriptedLLMServer([text("")]) as fake:
        ctx = context(runtime, config(**{"llm.base_url": fake.base_url}))
        failed = run_node(state_of(None, messages=[{"role": "user", "content": "fix add"}]), ctx=ctx, name="edit",
                          node=nodes.edit)
    assert failed["status"] == "llm_error" and "empty reply" in failed["detail"] and failed["patch"] == ""
