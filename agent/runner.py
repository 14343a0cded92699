"""Run the agent graph on one task: model client, checkpointer, trajectory file, resume by thread id.

A run keeps two files in its folder: `trajectory.json` (rewritten after every step) and `checkpoint.sqlite`
(LangGraph's SqliteSaver). Starting the same task again with the same folder and thread id resumes an interrupted
run from its last finished step (the working tree is restored from the checkpointed patch) and returns a finished
run's result without redoing it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from langgraph.checkpoint.sqlite import SqliteSaver
from pinpoint.agent.config import Config
from pinpoint.agent.context import AgentContext
from pinpoint.agent.embedded_model import resolve_config
from pinpoint.agent.graph import build_graph, initial_state
from pinpoint.agent.llm import LLMClient, LLMConfig
from pinpoint.agent.progress import ProgressFn
from pinpoint.agent.state import Task, checkpoint_saver
from pinpoint.agent.trajectory import TrajectoryWriter
from pinpoint.environments.errors import PinpointError
from pinpoint.environments.runtime import Runtime
from pinpoint.localization.bm25 import Bm25Localizer
from pinpoint.localization.failing_tests import ExecutionSignals, FailingTests, pytest_selection
from pinpoint.localization.mbfl import MbflConfig
from pinpoint.localization.predicates import PredicateConfig
from pinpoint.localization.retrieval import LexicalLocalizer, RetrievalLocalizer
from pinpoint.localization.suspects import Localizer
from pinpoint.swebench_eval.layout import safe_name
from pinpoint.swebench_eval.metrics import edited_lines
from pinpoint.swebench_eval.patches import PatchError, apply_patch

RECURSION_LIMIT = 100_000  # budgets end runs; LangGraph's own step cap must never be what stops one
#: statuses of a run ended by its infrastructure (the endpoint, the container), not by the model: a rerun retries
#: the failing step instead of reporting the run as done, and no prediction is written for it
INFRA_STATUSES = ("llm_error", "runtime_error")
#: the lock file in a run folder held by the process running it (`hold_run_folder`)
RUN_LOCK = "run.lock"


class RunInterrupted(PinpointError, RuntimeError):
    """A run ended by an infrastructure failure; its trajectory and checkpoint are kept and a rerun resumes it."""


class RunFolderBusy(PinpointError, RuntimeError):
    """Another process holds the run folder: two writers would make every model call twice into one thread."""


@contextlib.contextmanager
def hold_run_folder(run_dir: Path) -> Iterator[None]:
    """Hold `run_dir` for this process (an OS lock on `run.lock` in it, gone with the process however it ends);
    RunFolderBusy at once when another process holds it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(run_dir / RUN_LOCK), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise RunFolderBusy(f"another pinpoint process is running this run in {run_dir}; wait for it to end (the "
                            "same command then returns or resumes its result)") from None
    try:
        yield
    finally:
        lock.release()


@dataclass
class RunResult:
    instance_id: str
    status: str
    detail: str
    patch: str
    trajectory: Path
    steps: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None  # None: the model's price is unknown
    elapsed_s: float
    edited_lines: dict
    resumed: bool = False

    @property
    def submitted(self) -> bool:
        return self.status == "submitted"

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["trajectory"] = str(self.trajectory)
        return data


def default_localizers(runtime: Runtime, config: Config, failing: FailingTests | None = None,
                       ask: Callable[[str], str] | None = None) -> list[Localizer]:
    """Retrieval from the issue text, lexical and BM25 file rankings (what `bench localize` fuses), failing-test
    tracebacks; the coverage spectrum and LDB
    block traces of `failing` tests (`agent.execution`); plus the FLARE diagnostic model (`agent.diagnostic`, its
    checkpoint fine-tuned on repository code) and repair likelihood over its top lines (`agent.repair`) when that
    checkpoint is installed; callers may pass any other list."""
    localizers: list[Localizer] = [RetrievalLocalizer(runtime, "issue"), LexicalLocalizer(runtime),
                                   Bm25Localizer(runtime), RetrievalLocalizer(runtime, "tests")]
    if config.agent.execution and (failing is not None or config.agent.reproduce):  # a reproduction arms it later
        execution = ExecutionSignals(runtime, failing, config.agent.execution_budget_s,
                                     mbfl=MbflConfig() if config.agent.mbfl else None,
                                     predicates=PredicateConfig() if config.agent.predicates else None,
                                     insertion=config.agent.insertion)
        localizers += execution.localizers(ask if config.agent.ldb_llm else None)
    if config.agent.diagnostic or config.agent.repair:
        from pinpoint.localization import diagnostic, repair

        if diagnostic.REPOSITORY_CHECKPOINT.exists():
            model = diagnostic.DiagnosticLocalizer(diagnostic.REPOSITORY_CHECKPOINT)
            if config.agent.diagnostic:
                localizers.append(model)
            if config.agent.repair:  # the model picks the lines whose repairs are scored
                localizers.append(repair.RepairLocalizer(model))
    return localizers


def make_clients(llm: LLMConfig) -> tuple[LLMClient, LLMClient]:
    """The main client (embedded model started when no endpoint is configured) and a sampling one for BESTER."""
    resolved = resolve_config(llm)
    diverse = dataclasses.replace(resolved, temperature=max(resolved.temperature, 0.8))
    return LLMClient(resolved), LLMClient(diverse)


def run_task(
    task: Task,
    runtime: Runtime,
    config: Config,
    *,
    run_dir: str | Path | None = None,
    clients: tuple[LLMClient, LLMClient] | None = None,
    localizers: list[Localizer] | None = None,
    thread_id: str | None = None,
    fresh: bool = False,
    meta: dict[str, Any] | None = None,
    on_state: Callable[[dict], None] | None = None,
    on_progress: ProgressFn | None = None,
) -> RunResult:
    """Run (or resume) the graph on `task` in `runtime`; the runtime is left holding the final patch; `on_progress`
    hears each node's start and end (agent.progress)."""
    run_dir = Path(run_dir or Path(config.runs.output_dir) / safe_name(task.instance_id))
    run_dir.mkdir(parents=True, exist_ok=True)
    db_path = run_dir / "checkpoint.sqlite"
    if fresh:
        db_path.unlink(missing_ok=True)
    client, diverse = clients or make_clients(config.llm)
    ctx = AgentContext(runtime=runtime, llm=client, diverse_llm=diverse, config=config, localizers=localizers or [],
                       on_progress=on_progress)
    if localizers is None:
        failing = pytest_selection(task.test_command) if task.test_command else None
        ctx.localizers = default_localizers(runtime, config, failing, ask=lambda prompt: ctx.ask(prompt, "ldb"))
    writer = TrajectoryWriter(run_dir / "trajectory.json", {
        "task": task.to_dict(), "model": client.config.model, "thread_id": thread_id or task.instance_id,
        "config": {**config.to_dict(), "llm": client.config.to_public_dict()},
        "runtime": type(runtime).__name__, **(meta or {})}, cost_known=client.config.cost_known)
    graph_config = {"configurable": {"thread_id": thread_id or task.instance_id}, "recursion_limit": RECURSION_LIMIT}
    connection = sqlite3.connect(str(db_path), check_same_thread=False)
    state: dict = {}
    resumed = False
    try:
        saver = checkpoint_saver(connection)
        graph = build_graph(ctx, saver)
        start_from, state = _starting_point(graph, saver, graph_config)
        if start_from == "finished":  # nothing to redo
            _restore(runtime, state.get("final_patch", ""))
            return _result(state, writer, resumed=True)
        if start_from is not None:
            _restore(runtime, state.get("patch", ""))
            ctx.elapsed_before = state.get("elapsed_s", 0.0)
            resumed = True
            stream_input, stream_config = None, {**start_from, "recursion_limit": RECURSION_LIMIT}
        else:
            stream_input, stream_config = initial_state(task), graph_config
        for state in graph.stream(stream_input, stream_config, stream_mode="values"):
            writer.write(state, edited_lines=edited_lines(state.get("patch", "")), resumed=resumed)
            if on_state is not None:
                on_state(state)
        state = dict(graph.get_state(graph_config).values)
        _restore(runtime, state.get("final_patch", ""))
        return _result(state, writer, resumed)
    except BaseException as exc:
        writer.write(state, status="crashed" if isinstance(exc, Exception) else "interrupted",
                     detail="".join(traceback.format_exception_only(type(exc), exc)).strip(),
                     traceback=traceback.format_exc())
        raise
    finally:
        connection.close()


def _starting_point(graph, saver: SqliteSaver, graph_config: dict) -> tuple[dict | str | None, dict]:
    """Where a run of this thread starts, with the state there: ("finished", state) for a run that ended on a
    model outcome; (checkpoint config, state) to resume, which for a run ended by an infrastructure failure
    (INFRA_STATUSES) is the last checkpoint before the failing step, so that step is tried again; (None, {}) to
    start over."""
    thread = graph_config["configurable"]["thread_id"]
    snapshot = graph.get_state(graph_config)
    status = snapshot.values.get("status") if snapshot.values else None
    if snapshot.values and not snapshot.next and status == "running":
        # killed while LangGraph was writing a step: the checkpoint names no next node, yet the run never
        # finished; start the task over rather than report it as done with an empty patch
        saver.delete_thread(thread)
        return None, {}
    if snapshot.values and not snapshot.next and status in INFRA_STATUSES:
        before = next((s for s in graph.get_state_history(graph_config)
                       if s.next and s.values.get("status") == "running"), None)
        if before is None:
            saver.delete_thread(thread)
            return None, {}
        return before.config, dict(before.values)
    if snapshot.values:
        return ("finished" if not snapshot.next else graph_config), dict(snapshot.values)
    return None, {}


def _restore(runtime: Runtime, patch: str) -> None:
    """Put `patch` in the working tree (a resumed run starts in a fresh runtime); skip when it is there already."""
    if runtime.diff() != patch:
        try:
            apply_patch(runtime, patch)
        except PatchError as exc:
            raise RuntimeError(f"cannot restore the checkpointed working tree: {exc}") from exc


def _result(state: dict, writer: TrajectoryWriter, resumed: bool) -> RunResult:
    patch = state.get("final_patch", "")
    counts = edited_lines(patch)
    writer.write(state, edited_lines=counts, resumed=resumed)
    task = state.get("task", {})
    return RunResult(
        instance_id=task.get("instance_id", ""), status=state.get("status", "?"), detail=state.get("detail", ""),
        patch=patch, trajectory=writer.path, steps=state.get("steps", 0),
        prompt_tokens=state.get("prompt_tokens", 0), completion_tokens=state.get("completion_tokens", 0),
        cost_usd=state.get("cost_usd", 0.0) if writer.cost_known else None, elapsed_s=state.get("elapsed_s", 0.0), edited_lines=counts,
        resumed=resumed)
