"""`pinpoint rl rollout --backend ray` through the shared executor (environments/executor.py): Ray actors, one per
worker, each with its own warm pool; a task's samples (its GRPO group) all on one actor; the driver the only
writer. The rows match those of the local backend on the same task (the scripted gold policy, a FAKE that replays
the reference patch, on the demo's real bug as a local task)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pinpoint.environments.executor import Item, LocalExecutor, assign_groups

pytestmark = [pytest.mark.slow, pytest.mark.serial]


def _rollout(tasks: Path, out: Path, *backend: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pinpoint.cli", "rl", "rollout", "--tasks", str(tasks), "--policy", "scripted-gold",
               "--samples-per-task", "2", "--workers", "2", "--reward", "precise", "--output", str(out), *backend]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS")}
    env["RAY_AUTH_MODE"] = "disabled"
    return subprocess.run(command, cwd=out.parent, env=env, capture_output=True, text=True, timeout=600)


def _stable(path: Path) -> list[tuple]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return sorted((r["task_id"], r["sample"], r["status"], r["reward"], r["patch"]) for r in rows)


def test_rollout_on_ray_gives_the_rows_of_the_local_backend(tmp_path: Path, demo_task) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(demo_task.to_row()) + "\n")
    local = _rollout(tasks, tmp_path / "local.jsonl")
    on_ray = _rollout(tasks, tmp_path / "ray.jsonl", "--backend", "ray")
    assert local.returncode == 0, local.stderr[-3000:]
    assert on_ray.returncode == 0, on_ray.stderr[-3000:]
    assert _stable(tmp_path / "ray.jsonl") == _stable(tmp_path / "local.jsonl")
    assert {row[2:4] for row in _stable(tmp_path / "ray.jsonl")} == {("terminated", 1.0)}


class _Recorder:
    """A worker that says which instance ran each call."""

    def __init__(self, name: str) -> None:
        self.name = name

    def run(self, key: str) -> tuple[str, int]:
        return key, id(self)


def test_a_group_goes_to_one_worker() -> None:
    items = [Item(f"{g}#{s}", (f"{g}#{s}",), group=g) for g in "abc" for s in range(3)]
    assert assign_groups(items, 2) == [0, 0, 0, 1, 1, 1, 0, 0, 0]
    seen = [o.value for o in LocalExecutor().run_on_workers(_Recorder, ("r",), items, workers=2, concurrency=2)]
    by_group: dict[str, set[int]] = {}
    for key, worker in seen:
        by_group.setdefault(key[0], set()).add(worker)
    assert len(seen) == 9 and all(len(workers) == 1 for workers in by_group.values())
    assert by_group["a"] == by_group["c"] != by_group["b"]
