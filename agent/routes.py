"""Where the graph goes after each node: pure functions of the state and the config (nodes set data, routers
decide). Every router sends a finished run (a spent budget, an endpoint or runtime failure, an accepted submit:
any status but "running") to finalize."""

from __future__ import annotations

import functools
from collections.abc import Callable

from pinpoint.agent.config import Config
from pinpoint.agent.state import AgentState, last_failure, task_of, test_command_of
from pinpoint.tools.run_tests import TestRun

FINALIZE = "finalize"
#: routers take the state and the config and name the next node
Router = Callable[[AgentState, Config], str]


def finished(state: AgentState) -> bool:
    return state.get("status", "running") != "running"


def _unless_finished(decide: Router) -> Router:
    @functools.wraps(decide)
    def route(state: AgentState, cfg: Config) -> str:
        return FINALIZE if finished(state) else decide(state, cfg)

    return route


def search_allowed(state: AgentState, cfg: Config) -> bool:
    """A search policy is on, its search count is not spent, and some test command can judge candidates."""
    return (cfg.search.policy != "none" and state.get("searches", 0) < cfg.search.max_searches
            and test_command_of(state) is not None)


def localized(state: AgentState) -> bool:
    return any(e.get("kind") == "localize" for e in state.get("events") or [])


def new_locations(state: AgentState, run: TestRun) -> bool:
    """Whether a failing run's traceback passes through a line the current suspects do not cover (worth
    re-localizing)."""
    suspects = state.get("suspects") or []
    return any(not any(frame.path.endswith(s.path) and s.start_line <= frame.line <= s.end_line for s in suspects)
               for frame in run.frames)


@_unless_finished
def after_view(state: AgentState, cfg: Config) -> str:
    """A known test command runs first (its failure feeds localization); else the model's reproduction, when asked;
    else localize from the issue alone."""
    if task_of(state).test_command:
        return "test"
    return "reproduce" if cfg.agent.reproduce else "localize"


@_unless_finished
def after_reproduce(state: AgentState, cfg: Config) -> str:
    return "localize"


@_unless_finished
def after_localize(state: AgentState, cfg: Config) -> str:
    return "search" if last_failure(state) is not None and search_allowed(state, cfg) else "edit"


@_unless_finished
def after_edit(state: AgentState, cfg: Config) -> str:
    """The model's run_tests calls go to test, and so does a submit when an oracle must check it first."""
    names = {call.name for call in state.get("pending_calls") or []}
    if "run_tests" in names or ("submit" in names and task_of(state).test_command):
        return "test"
    return "submit" if "submit" in names else "edit"


@_unless_finished
def after_test(state: AgentState, cfg: Config) -> str:
    """Passing tests go to submit when a submit waits or the oracle passed. Failing tests localize first (and again
    when their traceback points outside the suspects), then search when allowed, else the model edits again."""
    last = state.get("last_test")
    if last is None or last.ok:
        oracle_passed = last is not None and bool(task_of(state).test_command)
        return "submit" if state.get("pending_calls") or oracle_passed else "edit"
    if not localized(state) or (cfg.agent.relocalize_on_failure and new_locations(state, last.run)):
        return "localize"
    return "search" if search_allowed(state, cfg) else "edit"


@_unless_finished
def after_search(state: AgentState, cfg: Config) -> str:
    """A passing candidate is submitted; otherwise the model edits on (search left the best program in place)."""
    runs = state.get("test_runs") or []
    return "submit" if runs and runs[-1].ok else "edit"


@_unless_finished
def after_submit(state: AgentState, cfg: Config) -> str:
    """A refused or reviewed submit returns to the model (an accepted one has ended the run)."""
    return "edit"
