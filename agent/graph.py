"""The repair agent as a LangGraph state machine.

    view ─► localize ─► edit ⟲ (tool loop) ─┬─► test ─┬─► submit ─► finalize
                 ▲                          │         ├─► search (FLARE / BESTER) ─► submit | edit
                 └──────────────────────────┴─────────┴─► localize (new traceback) | edit

Every node returns a `route`; the conditional edges follow it. Each node first checks the budgets (steps, tokens,
cost, wall time) and, when one is spent, routes to `finalize`, which keeps the best patch seen so far. An endpoint
failure (timeout, 5xx after retries, empty reply) also ends in `finalize`, with status `llm_error`.
"""

from __future__ import annotations

import functools
import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from langgraph.graph import END, StateGraph

from agent import prompts
from agent.config import Config
from agent.llm import LLMClient, LLMError, LLMResponse
from agent.patches import PatchError, TestOutcome, apply_patch, edited_lines, outcome_from_output
from agent.search import Node, bester_search, flare_refine, numbered
from agent.state import AgentState, Task
from environments.runtime import Runtime, RuntimeFailure
from localization.fusion import fuse_localizers, reciprocal_rank_fusion
from localization.retrieval import is_test_path
from localization.suspects import LocalizationRequest, Localizer, Suspect
from tools.registry import call_tool, default_tools, openai_schemas

NODES = ("view", "localize", "edit", "test", "search", "submit", "finalize")
#: tools whose calls the edit node leaves to the test and submit nodes
DEFERRED = ("run_tests", "submit")
SNIPPET_LINES = 12


@dataclass
class AgentContext:
    """What the nodes act on: the runtime, the model, the tools and the localizers (not part of the state)."""

    runtime: Runtime
    llm: LLMClient
    config: Config
    localizers: list[Localizer]
    #: a sampling client for BESTER's diverse self-reflections (defaults to `llm`)
    diverse_llm: LLMClient | None = None
    tools: list = field(default_factory=default_tools)
    #: wall seconds spent before this process (a resumed run)
    elapsed_before: float = 0.0
    started: float = field(default_factory=time.monotonic)
    _usage: dict = field(default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0})
    _events: list = field(default_factory=list)

    def elapsed(self) -> float:
        return self.elapsed_before + time.monotonic() - self.started

    def complete(self, messages: list[dict], purpose: str, tools: list[dict] | None = None,
                 diverse: bool = False) -> LLMResponse:
        """One model call, counted and recorded as an event (with logprobs when the server gives them)."""
        client = self.diverse_llm if diverse and self.diverse_llm is not None else self.llm
        response = client.complete(messages, tools=tools)
        self._usage["prompt_tokens"] += response.prompt_tokens
        self._usage["completion_tokens"] += response.completion_tokens
        self._usage["cost_usd"] += response.cost_usd or 0.0
        self._events.append({
            "kind": "llm", "purpose": purpose, "latency_s": round(response.latency_s, 3),
            "prompt_tokens": response.prompt_tokens, "completion_tokens": response.completion_tokens,
            "cost_usd": response.cost_usd, "finish_reason": response.finish_reason,
            "content": response.content, "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments, "raw_arguments": c.raw_arguments,
                 "parse_error": c.parse_error} for c in response.tool_calls],
            "logprobs": [[t.token, t.logprob] for t in response.logprobs] if response.logprobs else None,
        })
        return response

    def ask(self, prompt: str, purpose: str, diverse: bool = False) -> str:
        return self.complete([{"role": "user", "content": prompt}], purpose, diverse=diverse).content

    def drain(self) -> dict:
        """Usage and events accumulated since the last drain."""
        usage, events = self._usage, self._events
        self._usage = {"prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}
        self._events = []
        return {"usage": usage, "events": events}


def over_budget(state: AgentState, ctx: AgentContext) -> str | None:
    """The name of the first spent budget, or None."""
    budget = ctx.config.budget
    tokens = state.get("prompt_tokens", 0) + state.get("completion_tokens", 0)
    checks = (
        ("steps", state.get("steps", 0) >= budget.max_steps),
        ("tokens", tokens >= budget.max_tokens),
        ("cost", state.get("cost_usd", 0.0) >= budget.max_cost_usd),
        ("wall_time", ctx.elapsed() >= budget.max_wall_s),
    )
    return next((name for name, spent in checks if spent), None)


def _node(ctx: AgentContext, name: str, fn: Callable[[AgentState], dict], budgeted: bool = True):
    """Wrap a node: budget check first, then usage/timing bookkeeping, an event, and the current patch."""

    @functools.wraps(fn)
    def run(state: AgentState) -> dict:
        started = time.monotonic()
        if budgeted and (spent := over_budget(state, ctx)):
            update: dict[str, Any] = {"route": "finalize", "status": f"budget:{spent}",
                                      "detail": f"the {spent} budget is spent"}
        else:
            try:
                update = fn(state)
            except LLMError as exc:
                update = {"route": "finalize", "status": "llm_error", "detail": f"{type(exc).__name__}: {exc}"}
            except RuntimeFailure as exc:
                update = {"route": "finalize", "status": "runtime_error", "detail": f"{type(exc).__name__}: {exc}"}
        drained = ctx.drain()
        usage = drained["usage"]
        update["prompt_tokens"] = state.get("prompt_tokens", 0) + usage["prompt_tokens"]
        update["completion_tokens"] = state.get("completion_tokens", 0) + usage["completion_tokens"]
        update["cost_usd"] = state.get("cost_usd", 0.0) + usage["cost_usd"]
        update["elapsed_s"] = ctx.elapsed()
        if name != "finalize" and update.get("status") != "runtime_error":
            try:
                update.setdefault("patch", ctx.runtime.diff())
            except RuntimeFailure as exc:
                update.update(route="finalize", status="runtime_error", detail=f"{type(exc).__name__}: {exc}")
        event = {"kind": "node", "node": name, "route": update.get("route"), "seconds": round(time.monotonic() - started, 3)}
        update["events"] = drained["events"] + [event] + update.get("events", [])
        return update

    return run


def _tool_message(call_id: str, content: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def _last_failure(state: AgentState) -> TestOutcome | None:
    runs = state.get("test_runs") or []
    if runs and not runs[-1]["ok"]:
        r = runs[-1]
        return TestOutcome(r["command"], r["exit_code"], r["passed"], r["failed"], r["timed_out"], r["output"],
                           r.get("patch_edited_lines", 0))
    return None


def _snippet(ctx: AgentContext, suspect: Suspect) -> str:
    try:
        text = ctx.runtime.read_text(suspect.path)
    except (FileNotFoundError, OSError):
        return ""
    end = min(suspect.end_line, suspect.start_line + SNIPPET_LINES - 1)
    more = suspect.end_line - end
    body = numbered(text, suspect.start_line, end)
    return body + (f"\n      … ({more} more lines)" if more > 0 else "")


def build_graph(ctx: AgentContext, checkpointer=None):
    """Compile the agent graph over `ctx`; `checkpointer` makes runs resumable by thread id."""
    cfg = ctx.config
    schemas = openai_schemas(ctx.tools)
    limit = cfg.agent.max_observation_chars

    def task_of(state: AgentState) -> Task:
        return Task.from_dict(state["task"])

    def test_command_of(state: AgentState) -> str | None:
        """The oracle command, else the last command the model ran tests with."""
        task = task_of(state)
        if task.test_command:
            return task.test_command
        commands = [r["command"] for r in state.get("test_runs") or [] if r.get("source") == "model"]
        return commands[-1] if commands else None

    def search_allowed(state: AgentState) -> bool:
        return (cfg.search.policy != "none" and state.get("searches", 0) < cfg.search.max_searches
                and test_command_of(state) is not None)

    def view(state: AgentState) -> dict:
        task = task_of(state)
        tree = call_tool(ctx.tools, "view", {"path": "."}, ctx.runtime, limit).output
        messages = [{"role": "system", "content": prompts.SYSTEM},
                    {"role": "user", "content": prompts.task_message(task.problem_statement, tree, task.hints,
                                                                     task.test_command)}]
        return {"messages": messages, "route": "test" if task.test_command else "localize", "status": "running"}

    def localize(state: AgentState) -> dict:
        task = task_of(state)
        failure = _last_failure(state)
        request = LocalizationRequest(problem_statement=task.problem_statement,
                                      test_output=failure.output if failure else "")
        fused, per_signal = fuse_localizers(ctx.localizers, request)
        # signals that read code (the diagnostic model) get the source of the files the others point at
        waiting = [loc for loc in ctx.localizers if not per_signal.get(loc.name)]
        paths = list(dict.fromkeys(s.path for s in fused if s.path.endswith(".py") and not is_test_path(s.path)))
        if waiting and paths:
            request.files = {p: ctx.runtime.read_text(p) for p in paths[: cfg.agent.localize_files]}
            for loc in waiting:
                per_signal[loc.name] = list(loc.localize(request))
            fused = reciprocal_rank_fusion({n: v for n, v in per_signal.items() if v})
        top = fused[: cfg.agent.show_suspects]
        snippets = {i: _snippet(ctx, s) for i, s in enumerate(top)}
        message = prompts.suspects_message(top, snippets, request.test_output)
        event = {"kind": "localize", "signals": {k: [s.to_dict() for s in v[:20]] for k, v in per_signal.items()}}
        route = "search" if failure is not None and search_allowed(state) else "edit"
        # search targets: spans some line- or function-level signal produced (not only whole-file rankings)
        file_level = {n for n in per_signal if any(getattr(loc, "file_level", False) and loc.name == n
                                                    for loc in ctx.localizers)}
        own = {(s.path, s.start_line, s.end_line) for n, v in per_signal.items() if n not in file_level for s in v}
        targets = [s.to_dict() for s in fused if (s.path, s.start_line, s.end_line) in own][:50]
        return {"suspects": [s.to_dict() for s in fused[:50]], "targets": targets, "route": route, "events": [event],
                "messages": [{"role": "user", "content": message}]}

    def edit(state: AgentState) -> dict:
        response = ctx.complete(state["messages"], "edit", tools=schemas)
        messages = [response.assistant_message()]
        steps = state.get("steps", 0) + 1
        if not response.tool_calls:
            if not response.content.strip() and response.finish_reason != "length":
                raise LLMError("the model returned an empty reply (no text, no tool call)")
            messages.append({"role": "user", "content": prompts.NO_TOOL_CALL})
            return {"messages": messages, "steps": steps, "route": "edit", "pending_calls": []}
        pending, events = [], []
        for call in response.tool_calls:
            if call.parse_error:
                out, error = f"Error: your tool call could not be read: {call.parse_error}. Fix the call.", True
            elif call.name in DEFERRED:
                pending.append({"id": call.id, "name": call.name, "arguments": call.arguments})
                continue
            else:
                result = call_tool(ctx.tools, call.name, call.arguments, ctx.runtime, limit)
                out, error = result.output, result.error
            messages.append(_tool_message(call.id, out))
            events.append({"kind": "tool", "name": call.name, "arguments": call.arguments, "error": error,
                           "observation": out})
        names = [p["name"] for p in pending]
        route = "test" if "run_tests" in names or ("submit" in names and task_of(state).test_command) else (
            "submit" if "submit" in names else "edit")
        return {"messages": messages, "steps": steps, "route": route, "pending_calls": pending, "events": events}

    def test(state: AgentState) -> dict:
        task = task_of(state)
        pending = state.get("pending_calls") or []
        messages, runs, events = [], [], []
        for call in [p for p in pending if p["name"] == "run_tests"]:
            result = call_tool(ctx.tools, "run_tests", call["arguments"], ctx.runtime, limit)
            messages.append(_tool_message(call["id"], result.output))
            command = call["arguments"].get("command", "")
            runs.append(_outcome_from_tool(command, result.output, "model"))
            events.append({"kind": "tool", "name": "run_tests", "arguments": call["arguments"],
                           "error": result.error, "observation": result.output})
        submitting = any(p["name"] == "submit" for p in pending)
        if task.test_command and (submitting or not runs):
            result = ctx.runtime.run(task.test_command, timeout=cfg.agent.test_timeout_s)
            outcome = outcome_from_output(task.test_command, result.exit_code, result.output, result.timed_out)
            runs.append({**outcome.to_dict(), "source": "oracle"})
            messages.append({"role": "user", "content": f"Check `{task.test_command}` "
                             f"{'passed' if outcome.ok else 'failed'} (exit {outcome.exit_code}, "
                             f"{outcome.passed} passed, {outcome.failed} failed):\n"
                             f"{prompts.test_feedback(outcome.output)}"})
        diff = ctx.runtime.diff()
        for run in runs:
            run.update(patch_sha=patch_sha(diff), patch_edited_lines=edited_lines(diff)["total"])
        last = runs[-1] if runs else None
        remaining = [p for p in pending if p["name"] == "submit"]
        update: dict[str, Any] = {"messages": messages, "test_runs": runs, "events": events}
        best = state.get("best")
        if last is not None and _score(last) > _score(best):
            update["best"] = {"patch": diff, **{k: last[k] for k in ("passed", "failed", "ok")},
                              "edited_lines": last.get("patch_edited_lines", 0)}
        if last is None or last["ok"]:
            update.update(pending_calls=remaining, route="submit" if remaining or (last and task.test_command) else "edit")
            return update
        # failing tests: a submit waits until they pass (the model is told why)
        for call in remaining:
            update["messages"].append(_tool_message(call["id"], "Not submitted: the tests fail (see above)."))
        update["pending_calls"] = []
        after = {**state, "test_runs": (state.get("test_runs") or []) + runs}
        localized = any(e.get("kind") == "localize" for e in state.get("events") or [])
        if not localized or (cfg.agent.relocalize_on_failure and _new_locations(state, last["output"])):
            update["route"] = "localize"  # localize with the traceback; it starts the search when allowed
        elif search_allowed(after):
            update["route"] = "search"
        else:
            update["route"] = "edit"
        return update

    def search(state: AgentState) -> dict:
        task = task_of(state)
        command = test_command_of(state)
        failure = _last_failure(state)
        # candidates never rewrite tests: a weakened assertion would pass the very check that judges them
        suspects = [Suspect(**s) for s in state.get("targets") or [] if not is_test_path(s["path"])]
        patch = ctx.runtime.diff()
        start = Node(patch, failure or outcome_from_output(command, 1, "", False))
        policies = cfg.search.policy.split("+")
        result, candidates = None, []
        for policy in policies:
            node = result.best if result else start
            if policy == "flare":
                res = flare_refine(ctx.ask, ctx.runtime, task.problem_statement, node, suspects,
                                   test_command=command, timeout=cfg.agent.test_timeout_s, k=cfg.search.k,
                                   rounds=cfg.search.rounds, context=cfg.search.context_lines)
            else:
                res = bester_search(ctx.ask, ctx.runtime, task.problem_statement, node, suspects,
                                    test_command=command, timeout=cfg.agent.test_timeout_s,
                                    reflections=cfg.search.reflections, depth=cfg.search.depth,
                                    context=cfg.search.context_lines)
            candidates += res.candidates
            result = res if res.best.outcome.key() > node.outcome.key() or result is None else result
            if result.best.outcome.ok:
                break
        best = result.best if result else start
        try:
            apply_patch(ctx.runtime, best.patch)  # candidates ran on reset trees: restore the chosen one
        except PatchError as exc:
            raise RuntimeFailure(str(exc)) from exc
        update: dict[str, Any] = {"candidates": candidates, "searches": state.get("searches", 0) + 1,
                                  "patch": best.patch}
        summary = (f"{len(candidates)} candidates; best: {best.outcome.passed} passed, {best.outcome.failed} failed, "
                   f"{edited_lines(best.patch)['total']} edited lines")
        if best is not start:
            update["messages"] = [{"role": "user", "content": prompts.candidate_message(cfg.search.policy, summary,
                                                                                        best.patch)}]
            entry = {**best.outcome.to_dict(), "source": "search", "patch_sha": patch_sha(best.patch)}
            update["test_runs"] = [entry]
            if _score(entry) > _score(state.get("best")):
                update["best"] = {"patch": best.patch, "passed": entry["passed"], "failed": entry["failed"],
                                  "ok": entry["ok"], "edited_lines": edited_lines(best.patch)["total"]}
        else:
            update["messages"] = [{"role": "user", "content": f"Search found no better candidate ({summary}). "
                                   "Continue editing."}]
        update["route"] = "submit" if best.outcome.ok else "edit"
        return update

    def submit(state: AgentState) -> dict:
        pending = [p for p in state.get("pending_calls") or [] if p["name"] == "submit"]
        diff = ctx.runtime.diff()
        counts = edited_lines(diff)

        def reply(text: str) -> list[dict]:
            if pending:
                return [_tool_message(pending[0]["id"], text)] + [
                    _tool_message(p["id"], "(duplicate submit ignored)") for p in pending[1:]]
            return [{"role": "user", "content": text}]

        if not diff.strip():
            return {"messages": reply("Nothing to submit: the working tree has no changes. Edit files first."),
                    "pending_calls": [], "route": "edit"}
        if cfg.agent.review_on_submit and not state.get("reviewed"):
            return {"messages": reply(prompts.review_message(diff, counts["total"])), "reviewed": True,
                    "pending_calls": [], "route": "edit"}
        return {"messages": reply(f"Submitted ({counts['total']} edited lines)."), "pending_calls": [],
                "final_patch": diff, "status": "submitted", "detail": "", "route": "finalize"}

    def finalize(state: AgentState) -> dict:
        """Keep the submitted patch; else the better of the current patch and the best tested one."""
        if state.get("status") == "submitted":
            return {"route": "end", "final_patch": state.get("final_patch", "")}
        current = state.get("patch", "")
        best = state.get("best")
        tested = [r for r in state.get("test_runs") or [] if r.get("patch_sha") == patch_sha(current)]
        better = bool(best) and (_score(best) > _score(tested[-1]) if tested else best["ok"] or not current.strip())
        chosen = best["patch"] if better else current
        status = state.get("status")
        return {"route": "end", "final_patch": chosen, "status": status if status not in (None, "running") else "stopped"}

    graph = StateGraph(AgentState)
    for name, fn, budgeted in (("view", view, False), ("localize", localize, True), ("edit", edit, True),
                               ("test", test, True), ("search", search, True), ("submit", submit, False),
                               ("finalize", finalize, False)):
        graph.add_node(name, _node(ctx, name, fn, budgeted))
    graph.set_entry_point("view")
    edges = {
        "view": ("test", "localize", "finalize"),
        "localize": ("edit", "search", "finalize"),
        "edit": ("edit", "test", "submit", "finalize"),
        "test": ("submit", "search", "localize", "edit", "finalize"),
        "search": ("submit", "edit", "finalize"),
        "submit": ("edit", "finalize"),
    }
    for source, targets in edges.items():
        graph.add_conditional_edges(source, _router(targets), {t: t for t in targets})
    graph.add_edge("finalize", END)
    return graph.compile(checkpointer=checkpointer)


def _router(targets: tuple[str, ...]) -> Callable[[AgentState], str]:
    def route(state: AgentState) -> str:
        target = state.get("route", "finalize")
        return target if target in targets else "finalize"

    return route


def _score(run: dict | None) -> tuple:
    if not run:
        return (False, -1, float("-inf"), float("-inf"))
    return (bool(run["ok"]), run["passed"], -run["failed"], -(run.get("patch_edited_lines") or run.get("edited_lines") or 0))


def _outcome_from_tool(command: str, observation: str, source: str) -> dict:
    """A run_tests observation as a test-run record (the tool prints the exit code and pytest counts)."""
    match = re.search(r"^Exit code: (-?\d+)", observation, re.MULTILINE)
    timed_out = "TIMED OUT" in observation
    exit_code = int(match.group(1)) if match else None
    counts = dict((w, int(n)) for n, w in re.findall(r"(\d+) (passed|failed|errors?)\b",
                                                     observation.split("Output (tail):")[0]))
    if counts:
        passed, failed = counts.get("passed", 0), counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0)
    else:
        passed, failed = int(exit_code == 0), int(exit_code != 0)
    outcome = TestOutcome(command, exit_code, passed, failed, timed_out, observation)
    return {**outcome.to_dict(), "source": source}


_FRAMES = (re.compile(r'File "([^"]+)", line (\d+)'), re.compile(r"^([\w/.-]+\.py):(\d+):", re.MULTILINE))


def _new_locations(state: AgentState, output: str) -> bool:
    """Whether failing-test output names a file:line the current suspects do not cover (worth re-localizing)."""
    suspects = state.get("suspects") or []
    for regex in _FRAMES:
        for path, line in regex.findall(output):
            if not any(path.endswith(s["path"]) and s["start_line"] <= int(line) <= s["end_line"] for s in suspects):
                return True
    return False


def patch_sha(patch: str) -> str:
    return hashlib.sha256(patch.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def initial_state(task: Task) -> AgentState:
    return {"task": task.to_dict(), "messages": [], "events": [], "test_runs": [], "candidates": [], "steps": 0,
            "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0, "elapsed_s": 0.0, "searches": 0,
            "reviewed": False, "status": "running", "pending_calls": [], "suspects": [], "targets": [], "patch": "",
            "detail": "", "final_patch": ""}
