"""The task the agent works on, the typed records the graph keeps, and the graph's state.

State holds JSON values (messages, events) and the typed records below; LangGraph's checkpointer stores both (its
serializer rebuilds dataclasses, and `CHECKPOINT_TYPES` lists the ones it may rebuild), so an interrupted run resumes
from it. The runtime and the LLM client live outside it, in `agent.context.AgentContext`. The trajectory file gets
the records as plain dicts (`state_json`). The readers at the end are what nodes and routers share.
"""

from __future__ import annotations

import operator
import sqlite3
from dataclasses import asdict, dataclass, is_dataclass
from typing import Annotated, Any, Literal, TypedDict

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from pinpoint.localization.suspects import Placement, Suspect, Vote
from pinpoint.tools.protocol import ToolCall
from pinpoint.tools.run_tests import Frame, TestRun

#: sorts below every real run: a first test run always becomes the best one
NO_RUN_KEY = (False, -1, float("-inf"), float("-inf"))


@dataclass
class Task:
    """One problem: an id, the issue text, and optionally a command whose exit code decides success."""

    instance_id: str
    problem_statement: str
    repo: str = ""
    test_command: str | None = None
    #: extra text shown to the model (e.g. SWE-bench hints); empty by default
    hints: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Task:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class TestRecord:
    """A test run as the graph keeps it: the run, who asked for it, and which patch it tested."""

    __test__ = False  # not a pytest test class, whatever its name

    run: TestRun
    source: Literal["model", "oracle", "search"]
    #: `nodes.patch_sha` of the working tree's diff the run tested
    patch_sha: str

    @property
    def ok(self) -> bool:
        return self.run.ok

    def key(self) -> tuple:
        return self.run.key()

    def to_dict(self) -> dict:
        """The run's JSON values with the source and the patch's hash, as trajectory readers see a test run."""
        return {**self.run.to_dict(), "source": self.source, "patch_sha": self.patch_sha}


@dataclass(frozen=True)
class BestPatch:
    """The best tested patch so far and the run that tested it (finalize falls back on it)."""

    record: TestRecord
    patch: str

    def to_dict(self) -> dict:
        return {**self.record.to_dict(), "patch": self.patch}


@dataclass(frozen=True)
class Reproduction:
    """The reproduce node's script and its run on the base commit; only a failing one feeds localization."""

    status: Literal["fails", "passes", "timed_out", "no_script"]
    exit_code: int | None
    output: str
    script: str

    @property
    def fails(self) -> bool:
        return self.status == "fails"

    def to_dict(self) -> dict:
        return asdict(self)


#: the dataclasses the checkpointer may rebuild from a checkpoint (LangGraph's msgpack allowlist)
CHECKPOINT_TYPES = tuple((cls.__module__, cls.__name__)
                         for cls in (TestRecord, BestPatch, Reproduction, TestRun, Frame, Suspect, Vote, Placement, ToolCall))


def checkpoint_saver(connection: sqlite3.Connection) -> SqliteSaver:
    """A checkpointer on `connection` that rebuilds the state's typed records, and no other class, on resume."""
    return SqliteSaver(connection, serde=JsonPlusSerializer(allowed_msgpack_modules=CHECKPOINT_TYPES))


class AgentState(TypedDict, total=False):
    task: dict
    #: OpenAI chat messages, appended by nodes
    messages: Annotated[list[dict], operator.add]
    #: trajectory events (one per node step: what happened, timings, tokens, logprobs)
    events: Annotated[list[dict], operator.add]
    #: fused suspects, best first
    suspects: list[Suspect]
    #: the fused suspects a line- or function-level signal produced: what search may rewrite
    targets: list[Suspect]
    #: tool calls from the last model turn that the test/submit nodes still have to answer
    pending_calls: list[ToolCall]
    test_runs: Annotated[list[TestRecord], operator.add]
    #: the last record of the latest test step, None when that step ran no test (the router after `test` reads it)
    last_test: TestRecord | None
    candidates: Annotated[list[dict], operator.add]
    #: the working tree's diff after the last node that may change it (re-applied on resume)
    patch: str
    reproduction: Reproduction | None
    best: BestPatch | None
    steps: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    #: wall seconds spent in earlier processes (a resumed run keeps counting from there)
    elapsed_s: float
    searches: int
    reviewed: bool
    #: "running", then "submitted", "budget:<limit>", "llm_error", "runtime_error" or "stopped"; anything but
    #: "running" sends the graph to finalize
    status: str
    detail: str
    final_patch: str


def initial_state(task: Task) -> AgentState:
    return {"task": task.to_dict(), "messages": [], "events": [], "test_runs": [], "last_test": None, "candidates": [],
            "steps": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0, "elapsed_s": 0.0, "searches": 0,
            "reviewed": False, "status": "running", "pending_calls": [], "suspects": [], "targets": [], "patch": "",
            "reproduction": None, "best": None, "detail": "", "final_patch": ""}


def state_json(value: Any) -> Any:
    """`value` (the state or any part of it) as JSON values: each typed record becomes its `to_dict()`."""
    if isinstance(value, dict):
        return {k: state_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [state_json(v) for v in value]
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return asdict(value) if is_dataclass(value) else value


def task_of(state: AgentState) -> Task:
    return Task.from_dict(state["task"])


def test_command_of(state: AgentState) -> str | None:
    """The oracle command, else the last command the model ran tests with."""
    task = task_of(state)
    if task.test_command:
        return task.test_command
    commands = [r.run.command for r in state.get("test_runs") or [] if r.source == "model"]
    return commands[-1] if commands else None


def last_failure(state: AgentState) -> TestRun | None:
    """The latest test run when it failed (what localization reads and search starts from), else None."""
    runs = state.get("test_runs") or []
    return runs[-1].run if runs and not runs[-1].ok else None


def run_key(record: TestRecord | BestPatch | None) -> tuple:
    """How good a tested patch is (`TestRun.key()`), with no run at all sorting below every run."""
    if isinstance(record, BestPatch):
        record = record.record
    return record.key() if record else NO_RUN_KEY
