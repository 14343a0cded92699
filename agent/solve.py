"""Solve one task and (optionally) grade it: the one path `run`, `batch` and the RL environment take.

    solve_instance(instance) ─► swebench_eval.runtime.runtime_for (preflight, image, the grader's box)
                             ─► agent.runner.run_task (the graph, checkpointed, its trajectory written)
                             ─► swebench_eval.run.grade (official grading in a fresh box; reused when done)
                             ─► preds.jsonl row (locked append)

Every file lands in the run's `RunLayout`, so `pinpoint eval` on the same run id reuses the reports written here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pinpoint.agent.config import Config, answer_settings
from pinpoint.agent.progress import ProgressFn
from pinpoint.agent.runner import INFRA_STATUSES, RunInterrupted, RunResult, run_task
from pinpoint.agent.state import Task
from pinpoint.environments.errors import UsageError
from pinpoint.environments.files import jsonl_records, write_json_atomic
from pinpoint.swebench_eval.datasets import Instance
from pinpoint.swebench_eval.layout import RunLayout
from pinpoint.swebench_eval.predictions import Prediction, append_prediction
from pinpoint.swebench_eval.sources import RepoSources


@dataclass
class Solved:
    """What one task produced: the agent's result and, when graded, the verdict's headline fields."""

    result: RunResult
    graded: dict[str, Any] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        """The extra fields of this task's preds.jsonl line."""
        return {"status": self.result.status, "edited_lines": self.result.edited_lines["total"], **self.graded}


def layout_for(config: Config, default_run_id: str) -> RunLayout:
    """The run folder of `config`: `runs.run_id` (else the command's default) and the model."""
    return RunLayout(config.runs.run_id or default_run_id, config.llm.model, Path(config.runs.output_dir).expanduser())


def claim_run_folder(layout: RunLayout, config: Config, fresh: bool = False) -> None:
    """A run folder answers one configuration. Its first run records the settings that shape answers
    (`run.json`); a later run under the same run id and model with other settings is refused in one line, since
    it would resume, or skip as done, answers made under the old ones; `fresh` redoes the run and takes the folder
    over."""
    record = layout.folder / "run.json"
    settings = answer_settings(config)
    if record.exists() and not fresh:
        try:
            before = json.loads(record.read_text()).get("settings", {})
        except (OSError, ValueError, AttributeError):
            before = None  # unreadable: taken over below, as the first run would
        changed = _changed_fields(before, settings) if isinstance(before, dict) else []
        if changed:
            raise UsageError(f"run {layout.run_id!r} ({layout.folder}) was made with other settings "
                             f"({', '.join(changed[:4])}{' …' if len(changed) > 4 else ''}): give a new --run-id, "
                             "or --fresh to redo it with these")
        if isinstance(before, dict):
            return
    write_json_atomic(record, {"run_id": layout.run_id, "model": layout.model, "settings": settings})


def _changed_fields(before: dict, now: dict, prefix: str = "") -> list[str]:
    """Dotted names of the fields whose values differ (`budget.max_steps 30 -> 10`)."""
    changed = []
    for key in sorted(set(before) | set(now)):
        old, new = before.get(key), now.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            changed += _changed_fields(old, new, f"{prefix}{key}.")
        elif old != new:
            changed.append(f"{prefix}{key} {old!r} -> {new!r}")
    return changed


def solve(instance: Instance, config: Config, layout: RunLayout, sources: RepoSources | None = None,
          fresh: bool = False, on_progress: ProgressFn | None = None) -> RunResult:
    """Run the agent on `instance` in the box its grader uses; the image is built first when missing; `fresh`
    drops an earlier run's checkpoint instead of resuming it."""
    from pinpoint.swebench_eval.runtime import runtime_for
    from pinpoint.swebench_eval.setup_patch import prepare

    runtime, record = runtime_for(instance, config.runtime, sources)
    task = Task(instance.instance_id, instance.problem_statement, repo=instance.repo)
    with runtime:
        prepare(runtime, instance)  # a synthesized row's starting state
        localizers = oracle_localizers(instance, runtime, config) if config.agent.oracle_tests else None
        return run_task(task, runtime, config, run_dir=layout.trajectory_dir(instance.instance_id),
                        localizers=localizers, fresh=fresh, on_progress=on_progress,
                        meta={"image": record.tag, "oracle_tests": config.agent.oracle_tests})


def oracle_localizers(instance: Instance, runtime, config: Config) -> list:
    """Oracle mode: the instance's FAIL_TO_PASS tests traced with its test patch applied, then the tree reset, so
    the agent sees the execution signals but neither the tests nor the test patch enter its diff. Every signal
    that runs the tests (the spectrum, and the mutants and predicate switches it targets) runs before the reset:
    run later, the failing tests would be gone from the tree (and their results cached under the same key)."""
    from pinpoint.agent.nodes import execution_sources
    from pinpoint.agent.runner import default_localizers
    from pinpoint.localization.failing_tests import FailingTests
    from pinpoint.swebench_eval.oracle import apply_test_patch, oracle_tests

    apply_test_patch(runtime, instance)
    try:
        tests = oracle_tests(runtime, instance)
        localizers = default_localizers(runtime, config, FailingTests("oracle", tests.failing, tests.passing))
        for source in execution_sources(localizers):
            source.run_tests()
    finally:
        runtime.reset()
    return localizers


def solve_instance(instance: Instance, config: Config, layout: RunLayout, *, evaluate: bool = False,
                   sources: RepoSources | None = None, fresh: bool = False, write: bool = True,
                   on_progress: ProgressFn | None = None) -> Solved:
    """Solve, grade when asked, and append the prediction to the run's preds.jsonl (`write=False`: the caller
    does, as a batch's driver does for its workers); `on_progress` hears each node (agent.progress)."""
    from pinpoint.swebench_eval.run import grade

    solved = Solved(_finished(solve(instance, config, layout, sources, fresh, on_progress)))
    if evaluate:
        prediction = Prediction(instance.instance_id, solved.result.patch, config.llm.model)
        verdict, _ = grade(instance, prediction, layout, sources=sources, settings=config.runtime,
                           rerun=True)
        solved.graded = {"resolved": verdict.resolved, "outcome": verdict.outcome, "edit": verdict.edit}
    if write:
        write_prediction(layout, solved, config.llm.model)
    return solved


def write_prediction(layout: RunLayout, solved: Solved, model: str) -> None:
    """The task's preds.jsonl line (locked, fsynced append): the one place a solved task is recorded."""
    append_prediction(layout.predictions, solved.result.instance_id, solved.result.patch, model, **solved.row())


def _finished(result: RunResult) -> RunResult:
    """`result` when the model ended the run; RunInterrupted when its infrastructure did (the endpoint, the
    container): no prediction is written for it, so a rerun resumes it instead of skipping it as done."""
    if result.status in INFRA_STATUSES:
        raise RunInterrupted(f"{result.instance_id}: infrastructure failure ({result.status}): {result.detail}; "
                             f"no prediction written; the trajectory is kept in {result.trajectory} and a rerun "
                             "resumes from the step that failed")
    return result


def solve_local(row: dict, config: Config, layout: RunLayout, fresh: bool = False, write: bool = True,
                on_progress: ProgressFn | None = None) -> Solved:
    """A local task (`batch --tasks`): the agent on a temporary checkout of `repo_path`, no container."""
    from pinpoint.environments.local import LocalRuntime

    task = Task(row["instance_id"], row["problem_statement"], repo=row.get("repo", ""),
                test_command=row.get("test_command"))
    with LocalRuntime(row["repo_path"], row.get("base_commit")) as runtime:
        solved = Solved(_finished(run_task(task, runtime, config, run_dir=layout.trajectory_dir(task.instance_id),
                                           fresh=fresh, on_progress=on_progress)))
    if write:
        write_prediction(layout, solved, config.llm.model)
    return solved


def load_local_tasks(path: Path) -> list[dict]:
    """The rows of a `batch --tasks` JSONL file; UsageError naming the first bad line."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not a tasks file (not UTF-8 text: {exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise UsageError(f"cannot read tasks file {path}: {exc.strerror or exc}") from None
    rows = []
    for number, row, not_json in jsonl_records(text):
        problem = f"not JSON ({not_json})" if not_json else _task_problem(row)
        if problem:
            raise UsageError(f"{path}:{number}: expected a JSON object with instance_id, problem_statement and "
                             f"repo_path (optional base_commit, test_command); problem: {problem}")
        rows.append(row)
    return rows


def _task_problem(row: object) -> str:
    """What is wrong with one `batch --tasks` row ('' when nothing is)."""
    if not isinstance(row, dict):
        return f"a JSON {type(row).__name__}, not an object"
    for key in ("instance_id", "problem_statement", "repo_path"):
        if not isinstance(row.get(key), str) or not row[key].strip():
            return f"{key!r} must be a non-empty string"
    for key in ("base_commit", "test_command", "repo"):
        if row.get(key) is not None and not isinstance(row[key], str):
            return f"{key!r} must be a string"
    if not Path(row["repo_path"]).is_dir():
        return f"repo_path {row['repo_path']!r} is not a folder"
    return ""
