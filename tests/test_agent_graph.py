"""The agent graph, node by node and edge by edge, driven by the FAKE scripted LLM server over real HTTP, on a real
small repository (a HumanEvalFix bug placed among correct HumanEval functions) in a LocalRuntime."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import sqlite3
import types
import typing
from pathlib import Path

import pytest
from fake_llm_server import (
    FakeScriptedLLMServer,
    delay,
    empty_reply,
    http_error,
    malformed_tool_call,
    text,
    tool_call,
)
from langgraph.checkpoint.sqlite import SqliteSaver
from pinpoint.agent.config import load_config
from pinpoint.agent.demo import build_demo_repo
from pinpoint.agent.llm import LLMClient
from pinpoint.agent.runner import default_localizers, make_clients, run_task
from pinpoint.agent.state import AgentState, Task, checkpoint_saver
from pinpoint.environments.local import LocalRuntime
from pinpoint.localization.suspects import Suspect

FIX = {"command": "str_replace", "path": "numeric/functions.py", "old_str": "return number % 1.0 + 1.0",
       "new_str": "return number % 1.0"}
BREAK = {"command": "str_replace", "path": "numeric/functions.py", "old_str": "return len(string)",
         "new_str": "return len(string) + 2"}


@pytest.fixture
def demo(tmp_path: Path):
    return build_demo_repo(tmp_path / "repo", "Python/2")


def _run(demo, fake, tmp_path, *, oracle=True, extra_localizers=(), **overrides):
    settings = {"llm.base_url": fake.base_url, "llm.model": "fake", "llm.retry_backoff_s": 0.01,
                "llm.timeout_s": 5.0, "llm.max_retries": 1, "search.policy": "none", **overrides}
    config = load_config(**settings)
    task = demo.task if oracle else Task(demo.task.instance_id, demo.task.problem_statement)
    with LocalRuntime(demo.path) as runtime:
        localizers = default_localizers(runtime, config) + list(extra_localizers)
        result = run_task(task, runtime, config, run_dir=tmp_path / "run", clients=make_clients(config.llm),
                          localizers=localizers)
        tree_diff = runtime.diff()
    return result, json.loads(result.trajectory.read_text()), tree_diff


def _nodes(trajectory):
    return [e["node"] for e in trajectory["events"] if e["kind"] == "node"]


def test_happy_path_visits_every_main_node_and_reviews_before_accepting(demo, tmp_path):
    script = [tool_call("view", {"path": "numeric/functions.py"}), tool_call("str_replace_editor", FIX),
              tool_call("run_tests", {"command": demo.task.test_command}), tool_call("submit", {}),
              tool_call("submit", {})]
    with FakeScriptedLLMServer(script) as fake:
        result, traj, tree = _run(demo, fake, tmp_path, oracle=False)
    assert result.status == "submitted"
    assert "-    return number % 1.0 + 1.0\n+    return number % 1.0\n" in result.patch
    assert tree == result.patch
    assert result.edited_lines["total"] == 1
    assert _nodes(traj) == ["view", "localize", "edit", "edit", "edit", "test", "edit", "submit", "edit", "submit",
                            "finalize"]
    tool_messages = [m["content"] for m in traj["messages"] if m["role"] == "tool"]
    assert any("Review your patch" in m for m in tool_messages)  # review-on-submit showed the diff once
    assert traj["test_runs"][-1]["ok"] and traj["test_runs"][-1]["source"] == "model"
    llm_events = [e for e in traj["events"] if e["kind"] == "llm"]
    assert len(llm_events) == 5 and all(e["logprobs"] for e in llm_events)
    assert traj["prompt_tokens"] > 0 and traj["completion_tokens"] > 0
    # localization found the buggy function from the issue text and quoted it
    localize_msg = next(m["content"] for m in traj["messages"] if "Localization ranked" in str(m.get("content")))
    assert "numeric/functions.py" in localize_msg and "truncate_number" in localize_msg


def test_oracle_test_runs_first_and_traceback_feeds_localization(demo, tmp_path):
    script = [tool_call("str_replace_editor", FIX), tool_call("submit", {}), tool_call("submit", {})]
    with FakeScriptedLLMServer(script) as fake:
        result, traj, _ = _run(demo, fake, tmp_path)
    assert result.status == "submitted"
    nodes = _nodes(traj)
    assert nodes[:4] == ["view", "test", "localize", "edit"]
    assert traj["test_runs"][0]["source"] == "oracle" and not traj["test_runs"][0]["ok"]
    assert traj["test_runs"][-1]["ok"]  # submit went through the oracle check before review
    signals = next(e for e in traj["events"] if e["kind"] == "localize")["signals"]
    assert signals["traceback"], "failing-test output produced traceback suspects"
    top = traj["suspects"][0]
    assert top["path"] == demo.buggy_path and top["start_line"] <= demo.buggy_lines[0] <= top["end_line"]


def test_submit_with_failing_oracle_is_refused_and_search_off_goes_back_to_edit(demo, tmp_path):
    script = [tool_call("str_replace_editor", BREAK), tool_call("submit", {}), text("I give up.")]
    with FakeScriptedLLMServer(script) as fake:
        result, traj, _ = _run(demo, fake, tmp_path, **{"budget.max_steps": 3})
    refused = [m for m in traj["messages"] if m["role"] == "tool" and "Not submitted" in m["content"]]
    assert refused
    assert result.status == "budget:steps"
    nudges = [m for m in traj["messages"] if m["role"] == "user" and "no tool call" in m["content"]]
    assert nudges  # a plain-text reply gets a nudge, not a crash


def test_malformed_tool_call_becomes_an_error_observation(demo, tmp_path):
    script = [malformed_tool_call("view", '{"path": "numeric/'), tool_call("str_replace_editor", FIX),
              tool_call("submit", {}), tool_call("submit", {})]
    with FakeScriptedLLMServer(script) as fake:
        result, traj, _ = _run(demo, fake, tmp_path, oracle=False)
    assert result.status == "submitted"
    first_tool = next(m for m in traj["messages"] if m["role"] == "tool")
    assert "could not be read" in first_tool["content"]


@pytest.mark.parametrize("failure, expected", [
    (http_error(500, "boom"), "gave up after 2 attempts"),
    (delay(8.0, then=text("late")), "no reply within"),
    (empty_reply(), ""),
])
def test_endpoint_failures_end_the_run_cleanly_with_the_trajectory(demo, tmp_path, failure, expected):
    script = [tool_call("str_replace_editor", FIX), failure, failure]
    with FakeScriptedLLMServer(script) as fake:
        result, traj, _ = _run(demo, fake, tmp_path, oracle=False, **{"llm.timeout_s": 2.0})
    assert result.status == "llm_error"
    assert expected in result.detail
    assert traj["status"] == "llm_error" and _nodes(traj)[-1] == "finalize"
    # the work before the failure is kept: the fix and its observation
    assert any(m["role"] == "tool" and "Edited numeric/functions.py" in m["content"] for m in traj["messages"])
    assert "return number % 1.0\n" in result.patch


def test_budget_end_keeps_the_best_tested_patch(demo, tmp_path):
    script = [tool_call("str_replace_editor", FIX), tool_call("run_tests", {"command": demo.task.test_command}),
              tool_call("str_replace_editor", BREAK), tool_call("view", {"path": "README.md"})]
    with FakeScriptedLLMServer(script) as fake:
        result, traj, tree = _run(demo, fake, tmp_path, oracle=False, **{"budget.max_steps": 4})
    assert result.status == "budget:steps"
    assert "return number % 1.0\n" in result.patch and "len(string) + 2" not in result.patch
    assert tree == result.patch  # the runtime is left holding the chosen patch


def test_token_budget_stops_before_the_next_call(demo, tmp_path):
    script = [tool_call("view", {"path": "numeric/functions.py"})] * 5
    with FakeScriptedLLMServer(script) as fake:
        result, traj, _ = _run(demo, fake, tmp_path, oracle=False, **{"budget.max_tokens": 10})
        calls = len(fake.chat_requests)
    assert result.status == "budget:tokens" and calls == 1


def _revision_reply(request):
    prompt = request["messages"][-1]["content"]
    if "Rewrite line" in prompt:
        line = int(re.search(r"Rewrite line (\d+)", prompt).group(1))
        original = prompt.split("is suspicious:\n", 1)[1].split("\n", 1)[0]
        if "number % 1.0 + 1.0" in original:
            return text(f"line {line}:\n```python\n    return number % 1.0\n```")
        return text("```python\n" + original.replace("return", "return  ") + "\n```")
    return tool_call("submit", {})


def test_flare_search_finds_the_passing_revision_among_top_k_lines(demo, tmp_path):
    with FakeScriptedLLMServer(default=_revision_reply) as fake:
        result, traj, _ = _run(demo, fake, tmp_path, **{"search.policy": "flare", "search.k": 4})
    assert _nodes(traj)[:4] == ["view", "test", "localize", "search"]
    cands = traj["candidates"]
    assert 1 <= len(cands) <= 4 and all(c["origin"] == "flare" for c in cands)
    winners = [c for c in cands if c["ok"]]
    assert winners and winners[0]["target"] == f"{demo.buggy_path}:{demo.buggy_lines[0]}"
    assert result.status == "submitted" and result.edited_lines["total"] == 1
    assert "+    return number % 1.0\n" in result.patch


def test_bester_reflects_then_repairs_and_expands_the_best(demo, tmp_path):
    def reply(request):
        prompt = request["messages"][-1]["content"]
        if "explain what is wrong" in prompt:
            return text("It adds 1.0 to the fractional part; drop the + 1.0.")
        if "Analysis of the bug" in prompt:
            region = re.search(r"lines \d+-\d+:\n(.*?)\n\nAnalysis", prompt, re.DOTALL).group(1)
            return text("```python\n" + region.replace("number % 1.0 + 1.0", "number % 1.0") + "\n```")
        return tool_call("submit", {})

    with FakeScriptedLLMServer(default=reply) as fake:
        result, traj, _ = _run(demo, fake, tmp_path, **{"search.policy": "bester", "search.reflections": 2,
                                                         "search.depth": 2})
        temps = {r["temperature"] for r in fake.chat_requests if "explain what is wrong" in r["messages"][-1]["content"]}
    cands = traj["candidates"]
    assert [c["origin"] for c in cands] == ["bester", "bester"]
    assert all(c["reflection"].startswith("It adds") for c in cands)
    assert cands[0]["ok"] and result.status == "submitted"
    assert temps == {0.8}  # reflections are sampled, repairs greedy
    assert result.edited_lines["total"] == 1


def test_interrupted_run_resumes_by_thread_id_without_redoing_steps(demo, tmp_path):
    script = [tool_call("view", {"path": "numeric/functions.py"}), tool_call("str_replace_editor", FIX),
              tool_call("view", {"path": "README.md"}), tool_call("submit", {}), tool_call("submit", {})]
    config = load_config(**{"search.policy": "none"})
    with FakeScriptedLLMServer(script) as fake:
        config.llm.base_url, config.llm.model = fake.base_url, "fake"
        client = LLMClient(config.llm)

        class Stop(Exception):
            pass

        def stop_after_edit(state):
            if state.get("steps") == 2:
                raise Stop

        with LocalRuntime(demo.path) as runtime, pytest.raises(Stop):
            run_task(demo.task.__class__(demo.task.instance_id, demo.task.problem_statement), runtime, config,
                     run_dir=tmp_path / "run", clients=(client, client), on_state=stop_after_edit)
        interrupted = json.loads((tmp_path / "run" / "trajectory.json").read_text())
        assert interrupted["status"] == "crashed" and interrupted["steps"] == 2
        with LocalRuntime(demo.path) as fresh_runtime:  # a new process would start from a fresh checkout
            result = run_task(demo.task.__class__(demo.task.instance_id, demo.task.problem_statement), fresh_runtime,
                              config, run_dir=tmp_path / "run", clients=(client, client))
        assert len(fake.chat_requests) == 5  # no model call was repeated
    assert result.resumed and result.status == "submitted"
    assert "+    return number % 1.0\n" in result.patch  # the edit made before the interruption survived


def test_failed_search_returns_to_edit_and_a_later_failing_test_searches_again(demo, tmp_path):
    def reply(request):
        prompt = request["messages"][-1]["content"]
        if "Rewrite line" in prompt:  # a revision that changes the line but fixes nothing
            original = prompt.split("is suspicious:\n", 1)[1].split("\n", 1)[0]
            return text("```python\n" + original.replace("return", "return 0 or") + "\n```")
        return tool_call("submit", {})

    with FakeScriptedLLMServer(default=reply) as fake:
        result, traj, _ = _run(demo, fake, tmp_path, **{"search.policy": "flare", "search.k": 2,
                                                         "search.max_searches": 2, "budget.max_steps": 2})
    nodes = _nodes(traj)
    assert nodes == ["view", "test", "localize", "search", "edit", "test", "search", "edit", "test", "finalize"]
    assert all(not c["ok"] for c in traj["candidates"]) and len(traj["candidates"]) >= 2
    assert not any(c["target"].startswith("tests/") for c in traj["candidates"])  # tests are never rewritten
    assert result.status == "budget:steps" and result.patch == ""  # no candidate beat the base program


class CodeReadingSignal:
    """A stand-in for a line-level signal such as the diagnostic model: it reads the files it is given."""

    name = "code-reader"

    def __init__(self):
        self.seen: list[str] = []

    def localize(self, request):
        self.seen = sorted(request.files)
        return [Suspect(path, i, i, 1.0, self.name, "odd arithmetic")
                for path, text in request.files.items()
                for i, line in enumerate(text.splitlines(), 1) if "+ 1.0" in line]


def test_a_new_signal_plugs_in_and_reads_the_files_other_signals_point_at(demo, tmp_path):
    signal = CodeReadingSignal()
    with FakeScriptedLLMServer([text("looking")]) as fake:
        _, traj, _ = _run(demo, fake, tmp_path, oracle=False, extra_localizers=[signal], **{"budget.max_steps": 1})
    assert demo.buggy_path in signal.seen and not any(p.startswith("tests/") for p in signal.seen)
    signals = next(e for e in traj["events"] if e["kind"] == "localize")["signals"]
    assert signals["code-reader"][0]["start_line"] == demo.buggy_lines[0]
    top = traj["suspects"][0]
    assert top["start_line"] == demo.buggy_lines[0] and "[code-reader #1] odd arithmetic" in top["evidence"]


def test_a_checkpoint_left_running_without_a_next_step_restarts_the_task(demo, tmp_path):
    """A process killed while LangGraph writes a step can leave a state that is still running but names no next
    node; the resumed run must do the task again, not report it done with whatever patch it had."""
    once = [tool_call("view", {"path": "numeric/functions.py"}), tool_call("str_replace_editor", FIX),
            tool_call("submit", {}), tool_call("submit", {})]
    with FakeScriptedLLMServer(once + once) as fake:
        first, _, _ = _run(demo, fake, tmp_path, oracle=False)
        assert first.status == "submitted"
        with sqlite3.connect(str(tmp_path / "run" / "checkpoint.sqlite")) as connection:
            saver = SqliteSaver(connection)
            last = saver.get_tuple({"configurable": {"thread_id": demo.task.instance_id}})
            last.checkpoint["channel_values"].update(status="running", final_patch="")
            saver.put(last.config, last.checkpoint, last.metadata, {})
        second, _, tree = _run(demo, fake, tmp_path, oracle=False)
        assert len(fake.chat_requests) == 2 * len(once)  # the task was done again
    assert second.status == "submitted" and not second.resumed
    assert "+    return number % 1.0\n" in second.patch and tree == second.patch


REPRO = ("```python\nfrom numeric.functions import truncate_number\n"
         "assert truncate_number(3.5) == 0.5, truncate_number(3.5)\n```")


def _typed_mismatches(value, hint, where: str) -> list[str]:
    """Where `value` is not of its declared type `hint`, descending into lists and the records' own typed fields."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return _typed_mismatches(value, args[0], where)
    if origin in (typing.Union, types.UnionType):
        found = [_typed_mismatches(value, a, where) for a in args if a is not type(None)]
        return [] if value is None or not all(found) else found[0]
    if origin in (list, tuple):  # list[X] and tuple[X, ...]
        return [m for i, item in enumerate(value) for m in _typed_mismatches(item, args[0], f"{where}[{i}]")]
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, hint):
            return [f"{where} is a {type(value).__name__}, not a {hint.__name__}"]
        hints = typing.get_type_hints(hint)
        return [m for f in dataclasses.fields(hint) for m in _typed_mismatches(getattr(value, f.name), hints[f.name],
                                                                                f"{where}.{f.name}")]
    return []


def test_the_checkpointed_state_keeps_typed_records_and_reads_them_back(demo, tmp_path):
    """Every record field of the state (suspects, test runs, best, last test, reproduction, pending calls) holds
    its record type, not a dict, after a real run and after the checkpointer stored and read it back."""
    script = [text(REPRO), tool_call("str_replace_editor", FIX), tool_call("run_tests", {"command": demo.task.test_command}),
              tool_call("submit", {}), tool_call("submit", {})]
    with FakeScriptedLLMServer(script) as fake:
        result, traj, _ = _run(demo, fake, tmp_path, oracle=False, **{"agent.reproduce": True})
    assert result.status == "submitted" and traj["test_runs"][-1]["source"] == "model"
    with contextlib.closing(sqlite3.connect(str(tmp_path / "run" / "checkpoint.sqlite"))) as connection:
        saved = checkpoint_saver(connection).get_tuple({"configurable": {"thread_id": demo.task.instance_id}})
    state = saved.checkpoint["channel_values"]
    hints = typing.get_type_hints(AgentState, include_extras=True)
    records = {k: h for k, h in hints.items() if any(dataclasses.is_dataclass(a) for a in _leaves(h))}
    assert set(records) == {"suspects", "targets", "pending_calls", "test_runs", "last_test", "reproduction", "best"}
    assert state["suspects"][0].votes and state["test_runs"] and state["best"] and state["reproduction"].fails
    assert [m for key, hint in records.items() for m in _typed_mismatches(state.get(key), hint, key)] == []
    assert state["best"].record.ok and state["best"].patch == result.patch


def _leaves(hint) -> list:
    args = typing.get_args(hint)
    return [leaf for a in args for leaf in _leaves(a)] if args else [hint]
