"""The graph's nodes: one function per node, `(state, ctx) -> update`. Nodes act and record what happened; the
routers in `agent.routes` decide where the graph goes next, and `agent.context.run_node` does the bookkeeping every
node shares (budgets, failures, usage, the working tree's patch)."""

from __future__ import annotations

import dataclasses
import hashlib
import posixpath
import re
import shlex
from typing import Any

from pinpoint.agent import prompts
from pinpoint.agent.config import Config
from pinpoint.agent.context import AgentContext
from pinpoint.agent.llm import LLMError
from pinpoint.agent.search import Node, SearchResult, bester_search, flare_refine, run_candidates
from pinpoint.agent.state import (
    AgentState,
    BestPatch,
    Reproduction,
    TestRecord,
    last_failure,
    run_key,
    task_of,
    test_command_of,
)
from pinpoint.environments.runtime import Runtime, RuntimeFailure
from pinpoint.localization.failing_tests import reproduction_tests
from pinpoint.localization.fusion import fuse, fuse_localizers
from pinpoint.localization.learned_fusion import LearnedFusion, line_records
from pinpoint.localization.retrieval import is_test_path
from pinpoint.localization.suspects import LocalizationRequest, Localizer, Suspect
from pinpoint.swebench_eval.metrics import edited_lines
from pinpoint.swebench_eval.patches import PatchError, apply_patch
from pinpoint.tools.base import numbered
from pinpoint.tools.protocol import ToolCall
from pinpoint.tools.registry import ToolResult
from pinpoint.tools.run_tests import OUTPUT_TAIL_CHARS, TestRun, run_tests

#: tools whose calls the edit node leaves to the test and submit nodes
DEFERRED = ("run_tests", "submit")
#: LDB blocks whose recorded state the localize prompt quotes, whatever their fused rank
TRACED_BLOCKS = 3
SNIPPET_LINES = 12


def patch_sha(patch: str) -> str:
    return hashlib.sha256(patch.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def tool_message(call_id: str, content: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def tool_event(name: str, arguments: Any, observation: str, error: bool) -> dict:
    return {"kind": "tool", "name": name, "arguments": arguments, "error": error, "observation": observation}


def test_event(record: TestRecord, output_chars: int = 2000) -> dict:
    """A test run as a step's event, so a reader of the timeline sees what the `test` step ran and what it printed."""
    run = record.run
    return {"kind": "test", "source": record.source, "command": run.command, "exit_code": run.exit_code,
            "passed": run.passed, "failed": run.failed, "ok": run.ok, "timed_out": run.timed_out,
            "patch_sha": record.patch_sha, "output": run.output[-output_chars:]}


def run_record(run: TestRun, source: str, patch: str) -> TestRecord:
    """A test run as state keeps it: the run on `patch` (its edit size included, its output's tail only), where it
    came from, which patch."""
    run = dataclasses.replace(run, output=run.output[-OUTPUT_TAIL_CHARS:],
                              patch_edited_lines=edited_lines(patch)["total"])
    return TestRecord(run, source, patch_sha(patch))


def best_update(state: AgentState, record: TestRecord | None, patch: str) -> dict:
    """{"best": ...} when `record` beats the best tested patch so far, else nothing."""
    if record is not None and run_key(record) > run_key(state.get("best")):
        return {"best": BestPatch(record, patch)}
    return {}


# --- view -----------------------------------------------------------------------------------------------------------


def view(state: AgentState, ctx: AgentContext) -> dict:
    """The system prompt, the issue and the repository tree."""
    task = task_of(state)
    tree = ctx.call_tool("view", {"path": "."}).output
    task_text = prompts.task_message(task.problem_statement, tree, task.hints, task.test_command)
    return {"messages": [{"role": "system", "content": prompts.SYSTEM}, {"role": "user", "content": task_text}],
            "status": "running"}


# --- reproduce ------------------------------------------------------------------------------------------------------
def reproduce_path(runtime: Runtime) -> str:
    """Where the reproduction script goes: outside the repository, so it never shows in `diff()` or the patch, and
    in the runtime's own scratch folder, so two local runs side by side never run each other's script."""
    return posixpath.join(runtime.scratch_dir, "reproduce.py")


_CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def reproduce(state: AgentState, ctx: AgentContext) -> dict:
    """The model's script that shows the issue, run on the base commit; a failing one feeds localization."""
    reply = ctx.ask(prompts.reproduce_message(task_of(state).problem_statement), "reproduce")
    match = _CODE_BLOCK.search(reply)
    if match is None or not match.group(1).strip():
        record = Reproduction("no_script", None, reply[-2000:], "")
    else:
        record = _run_reproduction(match.group(1), ctx)
    event = {"kind": "reproduce", **record.to_dict()}
    note = prompts.reproduction_note(_REPRODUCE_NOTES[record.status], record.output)
    return {"reproduction": record, "events": [event], "messages": [{"role": "user", "content": note}]}


_REPRODUCE_NOTES = {"fails": "fails on the current code, as it should", "passes": "does not fail on the current code "
                    "(it does not show the issue; it is left out)", "timed_out": "timed out (it is left out)",
                    "no_script": "was not found in your reply (no ```python block; going on without one)"}


def _run_reproduction(script: str, ctx: AgentContext) -> Reproduction:
    path = reproduce_path(ctx.runtime)
    ctx.runtime.write_file(path, script)
    result = ctx.runtime.run(f"PYTHONPATH=.:$PYTHONPATH python {shlex.quote(path)}",
                             timeout=ctx.config.agent.reproduce_timeout_s)
    status = "timed_out" if result.timed_out else ("passes" if result.exit_code == 0 else "fails")
    return Reproduction(status, result.exit_code, result.output[-4000:], script)


# --- localize -------------------------------------------------------------------------------------------------------


def localize(state: AgentState, ctx: AgentContext) -> dict:
    """Fuse every localizer's suspects for the issue (and the last failing test's output); quote the top ones."""
    sources = execution_sources(ctx.localizers)
    _arm_reproduction(state, sources)
    request = LocalizationRequest(problem_statement=task_of(state).problem_statement,
                                  test_output=_failure_output(state, sources))
    fused, per_signal = fused_suspects(ctx.localizers, ctx.runtime, ctx.config, request)
    top = fused[: ctx.config.agent.show_suspects]
    message = prompts.suspects_message(top, {i: _snippet(ctx, s) for i, s in enumerate(top)}, request.test_output)
    message += prompts.trace_message(per_signal.get("ldb", [])[:TRACED_BLOCKS])
    event = {"kind": "localize", "signals": {k: [s.to_dict() for s in v[:20]] for k, v in per_signal.items()}}
    return {"suspects": fused[:50], "targets": _search_targets(ctx, per_signal, fused),
            "events": [s.record() for s in sources] + [event], "messages": [{"role": "user", "content": message}]}


def _failure_output(state: AgentState, sources: list) -> str:
    """What failed, for the traceback signal: the last test run, else a failing reproduction, else traced tests."""
    failure = last_failure(state)
    reproduction = state.get("reproduction")
    if failure is not None:
        return failure.output
    if reproduction is not None and reproduction.fails:
        return reproduction.output
    return "\n".join(s.failure_output() for s in sources)


def _arm_reproduction(state: AgentState, sources: list) -> None:
    """A reproduction that fails becomes the failing test of the execution signals still waiting for one."""
    reproduction = state.get("reproduction")
    if reproduction is not None and reproduction.fails:
        for source in sources:
            if source.tests is None:
                source.tests = reproduction_tests(reproduce_path(source.runtime))


def execution_sources(localizers: list[Localizer]) -> list:
    """The traced failing tests behind the execution signals (`spectrum`, `ldb`), each once."""
    found = {id(src): src for loc in localizers if (src := getattr(loc, "execution", None)) is not None}
    return list(found.values())


def fused_suspects(localizers: list[Localizer], runtime: Runtime, config: Config, request: LocalizationRequest
                   ) -> tuple[list[Suspect], dict[str, list[Suspect]]]:
    """Every signal's suspects and their fusion (`agent.fusion`), as the localize node and the RL env's oracle
    suspects (rl/suspects.py) compute them. Signals that read code (the diagnostic model) and found nothing from
    the text alone get the source of the files the others point at, and the fusion is redone."""
    _, per_signal = fuse_localizers(localizers, request)
    fused = _fuse(config, localizers, per_signal)
    waiting = [loc for loc in localizers if not per_signal.get(loc.name)]
    paths = list(dict.fromkeys(s.path for s in fused if s.path.endswith(".py") and not is_test_path(s.path)))
    if waiting and paths:
        request.files = {p: runtime.read_text(p) for p in paths[: config.agent.localize_files]}
        for loc in waiting:
            per_signal[loc.name] = list(loc.localize(request))
        fused = _fuse(config, localizers, per_signal)
    return fused, per_signal


def _fuse(config: Config, localizers: list[Localizer], per_signal: dict[str, list[Suspect]]) -> list[Suspect]:
    """`agent.fusion`: reciprocal rank, or the learned ranker over the suspects and the traced tests' lines."""
    signals = {n: v for n, v in per_signal.items() if v}
    if config.agent.fusion != "learned":
        return fuse(signals)
    records = [r for src in execution_sources(localizers) for r in line_records(src.spectrum)]
    return LearnedFusion().fuse(signals, records)


def _search_targets(ctx: AgentContext, per_signal: dict[str, list[Suspect]], fused: list[Suspect]) -> list[Suspect]:
    """What search may rewrite: the fused spans some line- or function-level signal produced (not only whole-file
    rankings)."""
    file_level = {loc.name for loc in ctx.localizers if getattr(loc, "file_level", False)}
    own = {(s.path, s.start_line, s.end_line) for n, v in per_signal.items() if n not in file_level for s in v}
    return [s for s in fused if (s.path, s.start_line, s.end_line) in own][:50]


def _snippet(ctx: AgentContext, suspect: Suspect) -> str:
    try:
        text = ctx.runtime.read_text(suspect.path)
    except (FileNotFoundError, OSError):
        return ""
    first = max(1, suspect.start_line)
    end = min(suspect.end_line, first + SNIPPET_LINES - 1)
    more = suspect.end_line - end
    body = numbered(text.splitlines()[first - 1 : end], first)
    return body + (f"\n      … ({more} more lines)" if more > 0 else "")


# --- edit -----------------------------------------------------------------------------------------------------------


def edit(state: AgentState, ctx: AgentContext) -> dict:
    """One model turn: view/search/editor calls run at once; run_tests and submit calls wait for their nodes."""
    response = ctx.complete(state["messages"], "edit", tools=ctx.schemas())
    messages = [response.assistant_message()]
    steps = state.get("steps", 0) + 1
    if not response.tool_calls:
        if not response.content.strip() and response.finish_reason != "length":
            raise LLMError("the model returned an empty reply (no text, no tool call)")
        messages.append({"role": "user", "content": prompts.NO_TOOL_CALL})
        return {"messages": messages, "steps": steps, "pending_calls": []}
    pending, events = [], []
    for call in response.tool_calls:
        if call.name in DEFERRED and not call.parse_error:
            pending.append(call)
            continue
        result = _answer(call, ctx)
        messages.append(tool_message(call.id, result.output))
        events.append(tool_event(call.name, call.arguments, result.output, result.error))
    return {"messages": messages, "steps": steps, "pending_calls": pending, "events": events}


def _answer(call: ToolCall, ctx: AgentContext) -> ToolResult:
    if call.parse_error:
        return ToolResult(f"Error: your tool call could not be read: {call.parse_error}. Fix the call.", error=True)
    return ctx.call_tool(call.name, call.arguments)


# --- test -----------------------------------------------------------------------------------------------------------


def test(state: AgentState, ctx: AgentContext) -> dict:
    """Run the model's run_tests calls and, when the task has one, the oracle check (always before a submit); keep
    the best tested patch; a submit waiting on failing tests is refused, with the reason."""
    pending = state.get("pending_calls") or []
    runs, messages, events = _model_tests([p for p in pending if p.name == "run_tests"], ctx)
    command = task_of(state).test_command
    submits = [p for p in pending if p.name == "submit"]
    if command and (submits or not runs):
        run, message = _oracle_check(command, ctx)
        runs.append((run, "oracle"))
        messages.append(message)
    diff = ctx.runtime.diff()
    records = [run_record(run, source, diff) for run, source in runs]
    events += [test_event(r) for r in records if r.source == "oracle"]  # the model's own are tool events
    last = records[-1] if records else None
    if last is not None and not last.ok:
        messages += [tool_message(p.id, "Not submitted: the tests fail (see above).") for p in submits]
        submits = []
    return {"messages": messages, "events": events, "test_runs": records, "last_test": last,
            "pending_calls": submits, **best_update(state, last, diff)}


def _model_tests(calls: list[ToolCall], ctx: AgentContext) -> tuple[list[tuple[TestRun, str]], list[dict], list[dict]]:
    """The model's run_tests calls through the tool (its schema check included): the typed runs with their source,
    the answers and the events. A call the tool refused is answered but runs nothing."""
    runs, messages, events = [], [], []
    for call in calls:
        result = ctx.call_tool("run_tests", call.arguments)
        messages.append(tool_message(call.id, result.output))
        events.append(tool_event("run_tests", call.arguments, result.output, result.error))
        if isinstance(result.value, TestRun):
            runs.append((result.value, "model"))
    return runs, messages, events


def _oracle_check(command: str, ctx: AgentContext) -> tuple[TestRun, dict]:
    """The task's own test command on the working tree, and the message that tells the model how it went."""
    run = run_tests(ctx.runtime, command, ctx.config.agent.test_timeout_s)
    content = (f"Check `{command}` {'passed' if run.ok else 'failed'} (exit {run.exit_code}, {run.passed} passed, "
               f"{run.failed} failed):\n{prompts.test_feedback(run.output)}")
    return run, {"role": "user", "content": content}


# --- search ---------------------------------------------------------------------------------------------------------


def search(state: AgentState, ctx: AgentContext) -> dict:
    """The configured search policies from the current program; the best candidate is put in the working tree."""
    command = test_command_of(state)
    start = Node(ctx.runtime.diff(), last_failure(state) or TestRun(command, exit_code=1))
    best, candidates = _run_policies(state, ctx, start, command)
    try:
        apply_patch(ctx.runtime, best.patch)  # candidates ran on reset trees: restore the chosen one
    except PatchError as exc:
        raise RuntimeFailure(str(exc)) from exc
    update: dict[str, Any] = {"candidates": candidates, "searches": state.get("searches", 0) + 1,
                              "patch": best.patch}
    summary = (f"{len(candidates)} candidates; best: {best.outcome.passed} passed, {best.outcome.failed} failed, "
               f"{edited_lines(best.patch)['total']} edited lines")
    if best is start:
        text = f"Search found no better candidate ({summary}). Continue editing."
        return {**update, "messages": [{"role": "user", "content": text}]}
    record = run_record(best.outcome, "search", best.patch)
    text = prompts.candidate_message(ctx.config.search.policy, summary, best.patch)
    return {**update, "messages": [{"role": "user", "content": text}], "test_runs": [record],
            **best_update(state, record, best.patch)}


def _run_policies(state: AgentState, ctx: AgentContext, start: Node, command: str) -> tuple[Node, list[dict]]:
    """Each policy of `search.policy` ("flare+bester": FLARE, then BESTER from its best) until one passes; the best
    program found and every candidate tried."""
    # candidates never rewrite tests: a weakened assertion would pass the very check that judges them
    suspects = [s for s in state.get("targets") or [] if not is_test_path(s.path)]
    result: SearchResult | None = None
    candidates: list[dict] = []
    for policy in ctx.config.search.policy.split("+"):
        node = result.best if result else start
        found = _search_once(policy, ctx, task_of(state).problem_statement, node, suspects, command)
        candidates += found.candidates
        result = found if result is None or found.best.outcome.key() > node.outcome.key() else result
        if result.best.outcome.ok:
            break
    return (result.best if result else start), candidates


def _search_once(policy: str, ctx: AgentContext, problem: str, node: Node, suspects: list[Suspect],
                 command: str) -> SearchResult:
    cfg = ctx.config
    if policy == "candidates":
        return run_candidates(ctx.runtime, problem, node, suspects, command, cfg.search, cfg.agent.test_timeout_s)
    common = {"test_command": command, "timeout": cfg.agent.test_timeout_s, "context": cfg.search.context_lines}
    if policy == "flare":
        return flare_refine(ctx.ask, ctx.runtime, problem, node, suspects, k=cfg.search.k, rounds=cfg.search.rounds,
                            **common)
    return bester_search(ctx.ask, ctx.runtime, problem, node, suspects, reflections=cfg.search.reflections,
                         depth=cfg.search.depth, **common)


# --- submit and finalize --------------------------------------------------------------------------------------------


def submit(state: AgentState, ctx: AgentContext) -> dict:
    """Review on submit: an empty diff is refused; the first submit shows the diff for a final check (when
    configured); the next one is accepted."""
    pending = [p for p in state.get("pending_calls") or [] if p.name == "submit"]
    diff = ctx.runtime.diff()
    total = edited_lines(diff)["total"]
    if not diff.strip():
        text = "Nothing to submit: the working tree has no changes. Edit files first."
        return {"messages": _submit_replies(pending, text), "pending_calls": []}
    if ctx.config.agent.review_on_submit and not state.get("reviewed"):
        return {"messages": _submit_replies(pending, prompts.review_message(diff, total)), "reviewed": True,
                "pending_calls": []}
    return {"messages": _submit_replies(pending, f"Submitted ({total} edited lines)."), "pending_calls": [],
            "final_patch": diff, "status": "submitted", "detail": ""}


def _submit_replies(pending: list[ToolCall], text: str) -> list[dict]:
    """`text` as the answer to the first submit call (later ones are duplicates), or as a user message."""
    if not pending:
        return [{"role": "user", "content": text}]
    return [tool_message(pending[0].id, text)] + [tool_message(p.id, "(duplicate submit ignored)")
                                                    for p in pending[1:]]


def finalize(state: AgentState, ctx: AgentContext) -> dict:
    """Keep the submitted patch; else the better of the current patch and the best tested one."""
    if state.get("status") == "submitted":
        return {"final_patch": state.get("final_patch", "")}
    current = state.get("patch", "")
    best = state.get("best")
    tested = [r for r in state.get("test_runs") or [] if r.patch_sha == patch_sha(current)]
    better = best is not None and (run_key(best) > run_key(tested[-1]) if tested
                                   else best.record.ok or not current.strip())
    status = state.get("status")
    return {"final_patch": best.patch if better else current,
            "status": status if status not in (None, "running") else "stopped"}
