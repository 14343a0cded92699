"""`pinpoint demo`: the whole pipeline offline on a real bug, with the embedded model.

The bug is a real one from HumanEvalFix (a human-inserted bug in a HumanEval solution, with its tests): it is placed
in a small repository of several HumanEval functions (the others correct), tests beside it, and the issue text is
written from the task's docstring and its failing check. The run shows localization (and where the known buggy
line ranks), the trajectory, how the patch was found, and the verdict of the tests on the final patch. SmolLM2-135M
rarely writes the right line itself; the search's edit candidates at the suspect lines (test runs, no model call)
repair the bug before the model's revisions are bought.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from pinpoint.agent.config import Config
from pinpoint.agent.runner import RunResult, run_task
from pinpoint.agent.state import Task
from pinpoint.agent.test_runs import run_test_command
from pinpoint.agent.trajectory import load_trajectory
from pinpoint.environments.errors import UsageError
from pinpoint.environments.local import LocalRuntime
from pinpoint.swebench_eval.layout import RunLayout
from pinpoint.swebench_eval.patches import apply_patch
from pinpoint.tools.run_tests import TestRun

DATA = Path(__file__).with_name("demo_tasks.json")
MODULE = "numeric/functions.py"
TEST_COMMAND = f"{sys.executable} -m pytest -q -p no:cacheprovider tests"


@dataclass
class DemoRepo:
    path: Path
    task: Task
    buggy_path: str
    buggy_lines: list[int]
    source: str


def demo_tasks() -> dict:
    return json.loads(DATA.read_text())


def _first_failing_assert(test: str) -> str:
    return next((line.strip() for line in test.splitlines() if line.strip().startswith("assert")), "")


def build_demo_repo(dest: Path, bug: str = "Python/2") -> DemoRepo:
    """A git repository at `dest`: one module of HumanEval functions (only `bug` is buggy) and their tests."""
    data = demo_tasks()
    tasks = {t["task_id"]: t for t in data["tasks"]}
    if bug not in tasks:
        raise UsageError(f"unknown demo bug {bug!r}; choose one of {', '.join(tasks)}")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "numeric").mkdir(exist_ok=True)
    (dest / "tests").mkdir(exist_ok=True)
    (dest / "numeric" / "__init__.py").write_text('"""HumanEval functions (HumanEvalFix, MIT)."""\n')
    module, lines_of_bug = [], []
    for task in data["tasks"]:
        body = task["buggy_solution"] if task["task_id"] == bug else task["canonical_solution"]
        chunk = task["prompt"].strip("\n") + "\n" + body.rstrip("\n") + "\n"
        offset = sum(len(c.splitlines()) for c in module) + 2 * len(module)
        if task["task_id"] == bug:
            buggy_text = (task["declaration"] + task["buggy_solution"]).splitlines()
            chunk_lines = chunk.splitlines()
            for n in task["buggy_lines"]:
                target = buggy_text[n - 1]
                lines_of_bug += [offset + i + 1 for i, line in enumerate(chunk_lines) if line == target][:1]
        module.append(chunk)
        test_lines = task["test"].strip("\n").splitlines()
        test_body = "\n".join(line for line in test_lines if line.strip() != f"check({task['entry_point']})").rstrip()
        (dest / "tests" / f"test_{task['entry_point']}.py").write_text(
            f"from numeric.functions import {task['entry_point']}\n\n{test_body}\n\n\n"
            f"def test_{task['entry_point']}():\n    check({task['entry_point']})\n")
    (dest / MODULE).write_text("\n\n".join(module))
    (dest / "README.md").write_text("Small numeric helpers with tests (`python -m pytest tests`).\n")
    git = ["git", "-c", "user.email=demo@pinpoint", "-c", "user.name=pinpoint-demo"]
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    subprocess.run(git + ["add", "-A"], cwd=dest, check=True)
    subprocess.run(git + ["commit", "-qm", "numeric helpers"], cwd=dest, check=True)
    task = tasks[bug]
    doc = re.search(r'"""(.*?)"""', task["prompt"], re.DOTALL)
    summary = " ".join(doc.group(1).split()) if doc else ""
    problem = (f"`{task['entry_point']}` in `{MODULE}` returns wrong results.\n\nWhat it should do: {summary}\n\n"
               f"This check fails: `{_first_failing_assert(task['test'])}`")
    return DemoRepo(dest, Task(f"demo-{bug.replace('/', '-')}", problem, repo="pinpoint-demo",
                               test_command=TEST_COMMAND), MODULE, lines_of_bug, data["source"])


def line_rank(suspects: list[dict], path: str, lines: list[int]) -> int | None:
    """1-based rank of the first suspect line that is a known buggy line (Hit@k style), over distinct lines."""
    seen: list[tuple[str, int]] = []
    for s in suspects:
        for line in range(s["start_line"], s["end_line"] + 1):
            if (s["path"], line) not in seen:
                seen.append((s["path"], line))
                if s["path"] == path and line in lines:
                    return len(seen)
    return None


@dataclass
class DemoOutcome:
    """What the demo shows: the run, the known bug's rank among the suspect lines, the tests on the final patch."""

    demo: DemoRepo
    result: RunResult
    trajectory: dict
    rank: int | None
    verdict: TestRun


def run_demo(demo: DemoRepo, config: Config, layout: RunLayout) -> DemoOutcome:
    """The agent on the demo repository's real HumanEvalFix bug, then the repository's original tests on its final
    patch (whatever the run did to the tests)."""
    with LocalRuntime(demo.path) as runtime:
        result = run_task(demo.task, runtime, config, run_dir=layout.trajectory_dir(demo.task.instance_id), fresh=True)
        apply_patch(runtime, result.patch)
        runtime.run("git checkout -- tests", timeout=60)
        verdict = run_test_command(runtime, demo.task.test_command, config.agent.test_timeout_s)
    trajectory = load_trajectory(result.trajectory)
    rank = line_rank(trajectory.get("suspects") or [], demo.buggy_path, demo.buggy_lines)
    return DemoOutcome(demo, result, trajectory, rank, verdict)


def repair_summary(trajectory: dict) -> str:
    """How the final patch was found, in one line: the search record that made it (source, edit, the tests it
    passed), or that no search candidate passed."""
    final = trajectory.get("final_patch") or trajectory.get("patch") or ""
    passing = [c for c in trajectory.get("candidates") or [] if c.get("ok")]
    kept = [c for c in passing if c.get("patch") == final and final]
    if not kept:
        return ("no search candidate passed the tests" if not passing else
                f"the {passing[0]['origin']} search passed the tests with {passing[0].get('edit') or 'a candidate'}, "
                "but the run ended on another patch")
    record = kept[0]
    how = record.get("edit") or f"{record.get('target')}: {(record.get('replacement') or '').strip()}"
    focused = f"the failing tests first (`{record['focused']}`), then " if record.get("focused") else ""
    return (f"{record.get('source') or record['origin']} from the {record['origin']} search, {how}; {focused}the "
            f"whole command: {record['passed']} passed, {record['failed']} failed")
