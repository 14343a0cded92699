"""What an episode works on: a SWE-bench row (graded in the instance's image as the official harness grades it; a
row synthesized from another by `rl synthesize` runs in that row's image from its `setup_patch`) or a local task
(a git repository on the host with a test command: trusted code, no container).

A tasks file is JSONL. Each line is one of:

- `{"instance_id": "psf__requests-1142"}`: a row of the SWE-bench dataset (`--dataset`, default the dev rows);
- a full SWE-bench row (the dataset's fields);
- `{"task_id", "repo_path", "problem_statement", "test_command", ["base_commit"], ["gold_patch"]}`: a local task.
"""

from __future__ import annotations

import functools
import gzip
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pinpoint.environments.errors import UsageError
from pinpoint.environments.files import jsonl_records
from pinpoint.swebench_eval.datasets import DatasetError, Instance, load_instances, validate_row


@dataclass(frozen=True)
class RlTask:
    """One task. `gold_patch` (the reference fix) drives the precise and localization rewards when known."""

    task_id: str
    kind: Literal["swebench", "local"]
    problem_statement: str
    instance: Instance | None = None
    repo_path: str = ""
    base_commit: str | None = None
    test_command: str | None = None
    gold_patch: str = ""

    @classmethod
    def swebench(cls, instance: Instance) -> RlTask:
        return cls(instance.instance_id, "swebench", instance.problem_statement, instance=instance,
                   base_commit=instance.base_commit, gold_patch=instance.patch)

    @classmethod
    def local(cls, task_id: str, repo_path: str | Path, problem_statement: str, test_command: str,
              base_commit: str | None = None, gold_patch: str = "") -> RlTask:
        return cls(task_id, "local", problem_statement, repo_path=str(repo_path), base_commit=base_commit,
                   test_command=test_command, gold_patch=gold_patch)

    def to_row(self) -> dict[str, Any]:
        """A tasks-file line that loads back to this task (Ray ships tasks to workers as these rows)."""
        if self.instance is not None:
            return self.instance.to_row()
        return {"task_id": self.task_id, "repo_path": self.repo_path, "problem_statement": self.problem_statement,
                "test_command": self.test_command, "base_commit": self.base_commit, "gold_patch": self.gold_patch}


def task_from(value: RlTask | Instance | Mapping[str, Any], where: str = "task") -> RlTask:
    """An RlTask from what a caller passes to `reset(options={"task": ...})` or a trainer's row holds: an RlTask, an
    Instance, or a tasks-file row (`{"instance_id"}` looked up in the default dataset, or in `"dataset"` when the row
    names one; a full SWE-bench row; a local task's fields); UsageError when it is none of them."""
    if isinstance(value, RlTask):
        return value
    if isinstance(value, Instance):
        return RlTask.swebench(value)
    if not isinstance(value, Mapping):
        raise UsageError(f"{where}: a task is an RlTask, a SWE-bench Instance or a dict, not {type(value).__name__}")
    value = dict(value)  # a trainer's DictConfig, or any other mapping
    if "instance_id" in value and set(value) <= {"instance_id", "dataset"}:
        return RlTask.swebench(_instance(value.get("dataset"), value["instance_id"], where))
    if "repo_path" in value:
        missing = [k for k in ("task_id", "problem_statement", "test_command") if not isinstance(value.get(k), str)]
        if missing:
            raise UsageError(f"{where}: a local task needs string fields {', '.join(missing)}")
        return RlTask.local(value["task_id"], value["repo_path"], value["problem_statement"], value["test_command"],
                            value.get("base_commit"), value.get("gold_patch") or "")
    try:
        return RlTask.swebench(validate_row(value, where))
    except DatasetError as exc:
        raise UsageError(str(exc)) from None


@functools.lru_cache(maxsize=8)
def _dataset(dataset: str | None) -> dict[str, Instance]:
    """Every row of a dataset by id, loaded once per process (trainers resolve a task per trajectory)."""
    return {i.instance_id: i for i in load_instances(dataset)}


def _instance(dataset: Any, instance_id: Any, where: str) -> Instance:
    """The row `instance_id` of `dataset` (default: the dev rows); UsageError when it is not there."""
    if not isinstance(instance_id, str) or not instance_id or not isinstance(dataset, str | None):
        raise UsageError(f"{where}: instance_id (and dataset, when given) must be non-empty strings")
    try:
        rows = _dataset(dataset)
    except DatasetError as exc:
        raise UsageError(str(exc)) from None
    if instance_id not in rows:
        raise UsageError(f"{where}: instance id {instance_id!r} is not in {dataset or 'the default dataset'}")
    return rows[instance_id]


def load_tasks(path: Path, dataset: str | None = None) -> list[RlTask]:
    """The tasks of a JSONL file (gzipped when its name ends in .gz); rows naming only an instance id are looked up
    in `dataset` (one load)."""
    rows: list[tuple[str, dict]] = []
    try:
        text = gzip.decompress(path.read_bytes()).decode() if path.name.endswith(".gz") else path.read_text()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read tasks file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    for number, row, not_json in jsonl_records(text):
        if not_json:
            raise UsageError(f"{path}:{number}: not JSON ({not_json})")
        if not isinstance(row, dict):
            raise UsageError(f"{path}:{number}: expected a JSON object")
        rows.append((f"{path}:{number}", row))
    wanted = [row["instance_id"] for _, row in rows if set(row) == {"instance_id"}]
    try:
        by_id = {i.instance_id: i for i in load_instances(dataset, ids=wanted)} if wanted else {}
    except DatasetError as exc:
        raise UsageError(str(exc)) from None
    tasks = [RlTask.swebench(by_id[row["instance_id"]]) if set(row) == {"instance_id"} else task_from(row, where)
             for where, row in rows]
    if not tasks:
        raise UsageError(f"{path}: no tasks")
    return tasks
