"""The task the agent works on and the graph's typed state.

State holds only plain JSON values (dicts, lists, strings, numbers) so a checkpointer can store it and an
interrupted run can resume from it; the runtime and the LLM client live outside it, in the node closures.
"""

from __future__ import annotations

import operator
from dataclasses import asdict, dataclass
from typing import Annotated, TypedDict


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


class AgentState(TypedDict, total=False):
    task: dict
    #: OpenAI chat messages, appended by nodes
    messages: Annotated[list[dict], operator.add]
    #: trajectory events (one per node step: what happened, timings, tokens, logprobs)
    events: Annotated[list[dict], operator.add]
    #: fused suspects, best first (Suspect.to_dict())
    suspects: list[dict]
    #: the fused suspects a line- or function-level signal produced: what search may rewrite
    targets: list[dict]
    #: tool calls from the last model turn that the test/submit nodes still have to answer
    pending_calls: list[dict]
    test_runs: Annotated[list[dict], operator.add]
    candidates: Annotated[list[dict], operator.add]
    #: the working tree's diff after the last node that may change it (re-applied on resume)
    patch: str
    #: the best tested patch so far: {"patch", "passed", "failed", "ok"}
    best: dict
    steps: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    #: wall seconds spent in earlier processes (a resumed run keeps counting from there)
    elapsed_s: float
    searches: int
    reviewed: bool
    #: set by each node: where the graph goes next (the edges read it after the budget check)
    route: str
    #: "running", "submitted", "budget:<limit>", "llm_error", "tool_error", ...
    status: str
    detail: str
    final_patch: str
