"""`pinpoint batch`'s fan-out: every task through one executor (threads here, or Ray tasks), the driver the only
writer.

A task runs `solve_task` where the executor puts it and hands back its `Solved`; this process appends its
preds.jsonl line as results come in, so a task retried after its Ray worker died is still written once, and
killing the batch loses only the tasks in flight (their checkpoints resume them on the next run). On the Ray
backend the driver also writes each task's trajectory folder (and report folder): the task gets the folder's
checkpoint from the driver, runs in a scratch folder on its node and hands the folders back (`Carried`), so a
resume on the driver finds them whatever node ran the task.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from pinpoint.agent.config import Config
from pinpoint.agent.progress import ProgressFn
from pinpoint.agent.runner import RunInterrupted
from pinpoint.agent.solve import Solved, solve_instance, solve_local, write_prediction
from pinpoint.agent.status import BatchTable
from pinpoint.environments.errors import is_infrastructure
from pinpoint.environments.executor import Item, LocalExecutor, Needs, Outcome, RayExecutor, TaskLost
from pinpoint.swebench_eval.carried import FolderFiles, scratch_layout
from pinpoint.swebench_eval.datasets import Instance
from pinpoint.swebench_eval.layout import RunLayout
from pinpoint.swebench_eval.sources import RepoSources
from rich.console import Console


@dataclass
class BatchCounts:
    """What `batch` says at the end: how the tasks ended, infrastructure failures apart (a rerun retries them)."""

    submitted: int = 0
    other: int = 0
    failed: int = 0
    infrastructure: int = 0
    resolved: int = 0


@dataclass
class Carried:
    """A task run away from the driver: its `Solved` (or its own exception) and the folders it wrote, trajectory
    and report, for the driver to write into the run."""

    solved: Solved | None
    error: Exception | None
    trajectory: FolderFiles
    report: FolderFiles


def solve_task(item: Instance | dict, config: Config, layout: RunLayout, evaluate: bool,
               sources: RepoSources | None, fresh: bool, on_progress: ProgressFn | None = None,
               carry: FolderFiles | None = None) -> Solved | Carried:
    """One task wherever the executor runs it; writes its trajectory (and report), never preds.jsonl;
    `on_progress` (local threads only) feeds the batch table's steps column. With `carry` (the driver's trajectory
    folder, to resume from) it runs in a scratch folder here and hands its folders back."""
    if carry is None:
        return _solve(item, config, layout, evaluate, sources, fresh, on_progress)
    key = item["instance_id"] if isinstance(item, dict) else item.instance_id
    with scratch_layout(layout) as scratch:
        carry.write(scratch.trajectory_dir(key))
        solved, error = None, None
        try:
            solved = _solve(item, config, scratch, evaluate, sources, fresh, None)
            solved.result = replace(solved.result, trajectory=layout.trajectory_dir(key) / "trajectory.json")
        except RunInterrupted as exc:  # its message names the folder a rerun resumes from: the driver's
            error = RunInterrupted(str(exc).replace(str(scratch.run_root), str(layout.run_root)))
        except Exception as exc:
            error = exc
        return Carried(solved, error, FolderFiles.read(scratch.trajectory_dir(key)),
                       FolderFiles.read(scratch.eval_dir(key)))


def _solve(item: Instance | dict, config: Config, layout: RunLayout, evaluate: bool, sources: RepoSources | None,
           fresh: bool, on_progress: ProgressFn | None) -> Solved:
    if isinstance(item, dict):
        return solve_local(item, config, layout, fresh=fresh, write=False, on_progress=on_progress)
    return solve_instance(item, config, layout, evaluate=evaluate, sources=sources, fresh=fresh, write=False,
                          on_progress=on_progress)


def needs_of(item: Instance | dict, config: Config) -> Needs:
    """A local task holds one CPU and no box; an instance its spec's CPUs and one box (solved, then graded)."""
    if isinstance(item, dict):
        return Needs(cpus=1.0, docker=0)
    from pinpoint.swebench_eval.runtime import instance_cpus

    try:
        return Needs(cpus=instance_cpus(item, config.runtime), docker=1)
    except KeyError:  # no spec: the task's own preflight refuses it with the reason
        return Needs(cpus=1.0, docker=1)


def run_batch(todo: Iterable[tuple[str, Instance | dict]], executor: LocalExecutor | RayExecutor, config: Config,
              layout: RunLayout, *, evaluate: bool, sources: RepoSources | None, fresh: bool, console: Console,
              quiet: bool = False) -> BatchCounts:
    """Every task of `todo` through `executor`, each result written here as it comes back, under the per-instance
    status table (agent.status.BatchTable; `quiet`: none)."""
    todo = list(todo)
    counts = BatchCounts()
    local = executor.name == "local"  # a Ray worker's callback would update a copy of the table, far away
    if not local:  # the scratch folder's paths are swapped for the driver's: an absolute root, not a worker's cwd
        layout = RunLayout(layout.run_id, layout.model, layout.run_root.parent.absolute())
    with BatchTable(console, len(todo), enabled=not quiet) as table:
        items = [Item(key, (item, config, layout, evaluate, sources, fresh, table.reporter(key) if local else None,
                            None if local else _checkpoint(layout, key, fresh)),
                      needs_of(item, config)) for key, item in todo]
        for outcome in executor.run(solve_task, items, on_start=table.started):
            if outcome.attempts > 1:
                console.print(f"{outcome.key}: its worker was lost; ran again ({outcome.attempts} attempts)",
                              style="yellow", markup=False, highlight=False)
            outcome = _landed(outcome, layout)
            if outcome.error is not None:
                table.finished(outcome.key, _failed(outcome.key, outcome.error, counts, console))
                continue
            solved: Solved = outcome.value
            write_prediction(layout, solved, config.llm.model)
            counts.submitted += int(solved.result.submitted)
            counts.other += int(not solved.result.submitted)
            counts.resolved += int(bool(solved.graded.get("resolved")))
            graded = f" ({solved.graded['outcome']})" if solved.graded.get("outcome") else ""
            table.finished(outcome.key, solved.result.status + graded, solved.result.steps)
    return counts


def _checkpoint(layout: RunLayout, key: str, fresh: bool) -> FolderFiles:
    """The driver's trajectory folder of `key` for its task to resume from (nothing when starting fresh)."""
    return FolderFiles() if fresh else FolderFiles.read(layout.trajectory_dir(key))


def _landed(outcome: Outcome, layout: RunLayout) -> Outcome:
    """A carried task's folders written into the run here; the outcome as a local task's would be."""
    carried = outcome.value
    if not isinstance(carried, Carried):
        return outcome
    carried.trajectory.write(layout.trajectory_dir(outcome.key))
    if carried.report:
        carried.report.write(layout.eval_dir(outcome.key))
    return replace(outcome, value=carried.solved, error=carried.error)


def _failed(key: str, exc: BaseException, counts: BatchCounts, console: Console) -> str:
    """One task's failure is counted and said in one line; it must not stop the batch (a rerun retries it).
    Returns its status for the table."""
    infra = is_infrastructure(exc)
    counts.failed += 1
    counts.infrastructure += int(infra)
    text = " ".join(str(exc).split())
    if not isinstance(exc, (RunInterrupted, TaskLost)):  # their messages name the task and the failure already
        text = f"{key}: {'infrastructure failure' if infra else 'error'}: {type(exc).__name__}: {text}"
    console.print(text, style="red", markup=False, highlight=False, soft_wrap=True)
    return "infrastructure failure" if infra else "error"
