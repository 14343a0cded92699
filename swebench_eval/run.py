"""A resumable evaluation run: predictions in, one folder per instance and a summary out (see `layout`).

`grade` is the one way a patch is graded, by `pinpoint eval` and by `run`/`batch --evaluate` alike: it reuses an
instance's report.json when it holds a model outcome (infrastructure failures are retried; `rerun=True` redoes it),
so the second of the two never grades again. The summary is rewritten after each instance, so an interrupted run
loses nothing, and covers every row graded under the run id so far, not only this invocation's. `run_eval` is the only writer of the summary; on the Ray backend it also writes each report folder,
which the task grades into a scratch folder on its node and hands back (`carried`), so a resume on the driver
sees every verdict.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pinpoint.environments.executor import Item, LocalExecutor, Needs, RayExecutor, TaskLost
from pinpoint.environments.files import write_json_atomic
from pinpoint.environments.runtime import RuntimeSettings
from pinpoint.swebench_eval.carried import FolderFiles, scratch_layout
from pinpoint.swebench_eval.datasets import Instance
from pinpoint.swebench_eval.evaluate import (
    INFRA_OUTCOMES,
    MODEL_OUTCOMES,
    InstanceReport,
    evaluate_patch,
    write_report,
)
from pinpoint.swebench_eval.layout import RunLayout
from pinpoint.swebench_eval.metrics import edit_metrics
from pinpoint.swebench_eval.predictions import Prediction
from pinpoint.swebench_eval.sources import RepoSources


def stored_report(out_dir: Path) -> InstanceReport | None:
    """The verdict stored in `out_dir`, whatever its outcome; None when there is none (or it is unreadable)."""
    path = out_dir / "report.json"
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        meta = next(iter(data.values()))["pinpoint"]
        report = {k: {kk: vv for kk, vv in v.items() if kk != "pinpoint"} for k, v in data.items()}
        return InstanceReport(report=report, **meta)
    except (json.JSONDecodeError, StopIteration, KeyError, TypeError, AttributeError):
        return None


def finished_report(out_dir: Path) -> InstanceReport | None:
    """The stored verdict of an instance, when it holds a model outcome (infrastructure failures are retried)."""
    verdict = stored_report(out_dir)
    return verdict if verdict is not None and verdict.outcome in MODEL_OUTCOMES else None


def earlier_verdicts(layout: RunLayout) -> dict[str, InstanceReport]:
    """Every verdict already stored under the run id (any model, any earlier invocation): the summary covers the
    whole run, so grading a few more rows (or one again) never makes it forget the others."""
    found = {}
    for path in sorted(layout.run_root.glob("*/eval/*/report.json")):
        if (verdict := stored_report(path.parent)) is not None:
            found[verdict.instance_id] = verdict
    return found


def summarize(instances: list[Instance], verdicts: dict[str, InstanceReport], run_id: str,
              predictions: dict[str, Prediction], earlier: dict[str, InstanceReport] | None = None) -> dict[str, Any]:
    """Counts and id lists per outcome, in the spirit of the official run report, over this call's rows and the
    `earlier` verdicts of the run (this call's verdict wins for a row graded again)."""
    earlier = earlier or {}
    verdicts = {**earlier, **verdicts}
    by_outcome: dict[str, list[str]] = {o: [] for o in (*MODEL_OUTCOMES, *INFRA_OUTCOMES)}
    for iid in sorted(verdicts):
        by_outcome.setdefault(verdicts[iid].outcome, []).append(iid)
    done = list(verdicts.values())
    empty = {iid for iid, p in predictions.items() if not (p.model_patch or "").strip()}
    empty |= {iid for iid, v in earlier.items() if iid not in predictions
              and v.report.get(iid, {}).get("patch_exists") is False}
    evals = [v.eval_seconds for v in done if v.eval_seconds]
    edits = [v.edit for v in done if "f1" in v.edit]
    return {
        "run_id": run_id,
        "total_instances": len({i.instance_id for i in instances} | set(earlier)),
        "submitted_instances": len({i.instance_id for i in instances if i.instance_id in predictions} | set(earlier)),
        "completed_instances": len(done),
        "resolved_instances": len(by_outcome["resolved"]),
        "unresolved_instances": len(by_outcome["unresolved"]),
        "error_instances": len(by_outcome["patch_failed"]) + len(by_outcome["no_test_output"]),
        "infra_failure_instances": sum(len(by_outcome[o]) for o in INFRA_OUTCOMES),
        "empty_patch_instances": len(empty),
        "mean_eval_seconds": round(sum(evals) / len(evals), 2) if evals else None,
        "edit_metrics": {k: round(sum(e[k] for e in edits) / len(edits), 4) for k in ("precision", "recall", "f1")}
        if edits else None,
        "ids": by_outcome,
    }


def grade(instance: Instance, prediction: Prediction, layout: RunLayout, *, sources: RepoSources | None = None,
          settings: RuntimeSettings | None = None, image: str | None = None, rerun: bool = False,
          timeout: float = 1800.0) -> tuple[InstanceReport, bool]:
    """(verdict, reused): grade `prediction` into `layout`'s eval folder, or reuse the report already there."""
    out_dir = layout.with_model(prediction.model_name_or_path).eval_dir(instance.instance_id)
    if not rerun and (previous := reusable_report(out_dir, prediction)) is not None:
        return previous, True
    # an old verdict must not survive beside the new patch.diff if this grading is cut short (killed, disk full)
    (out_dir / "report.json").unlink(missing_ok=True)
    try:
        verdict = evaluate_patch(instance, prediction.model_patch, image=image, out_dir=out_dir, timeout=timeout,
                                 model_name=prediction.model_name_or_path, sources=sources, settings=settings)
    except Exception as exc:  # one broken instance must not stop the run; it is labelled, not hidden
        verdict = InstanceReport(instance.instance_id, "container_failed", detail=f"{type(exc).__name__}: {exc}")
    if (prediction.model_patch or "").strip():
        try:
            verdict.edit = edit_metrics(prediction.model_patch, instance.patch).to_json()
        except ValueError as exc:
            verdict.edit = {"error": str(exc)}
    write_report(verdict, out_dir)
    return verdict, False


def reusable_report(out_dir: Path, prediction: Prediction) -> InstanceReport | None:
    """The verdict in `out_dir` when it graded this very patch to a model outcome; None when it is to be graded."""
    return finished_report(out_dir) if _same_patch(out_dir, prediction) else None


def _same_patch(out_dir: Path, prediction: Prediction) -> bool:
    """Whether the report in `out_dir` graded this very patch (a re-solved instance must be graded again)."""
    stored = out_dir / "patch.diff"
    return stored.exists() and stored.read_text() == (prediction.model_patch or "")


@dataclass
class Graded:
    """What one grading task hands back: the verdict, whether an earlier report was reused, and, when it was
    graded away from the driver, the report folder's files for the driver to write."""

    verdict: InstanceReport
    reused: bool = False
    report: FolderFiles | None = None


def run_eval(
    instances: list[Instance],
    predictions: dict[str, Prediction],
    layout: RunLayout,
    *,
    workers: int = 1,
    rerun: bool = False,
    timeout: float = 1800.0,
    on_result: Callable[[InstanceReport, bool], None] | None = None,
    sources: RepoSources | None = None,
    executor: LocalExecutor | RayExecutor | None = None,
) -> dict[str, Any]:
    """Evaluate every instance that has a prediction through `executor` (default: `workers` threads); returns the
    summary, which this process alone writes (to `layout.summary`) as each verdict comes back, with each report
    folder graded on a Ray node."""
    executor = executor or LocalExecutor(workers)
    carry = executor.name != "local"  # a Ray node's disk is not the driver's: its task hands the folder back
    by_id = {i.instance_id: i for i in instances if i.instance_id in predictions}
    verdicts: dict[str, InstanceReport] = {}
    layout.run_root.mkdir(parents=True, exist_ok=True)
    earlier = earlier_verdicts(layout)
    started = time.monotonic()

    def record(verdict: InstanceReport, cached: bool) -> None:
        verdicts[verdict.instance_id] = verdict
        _write_summary(layout.summary, summarize(instances, verdicts, layout.run_id, predictions, earlier))
        if on_result:
            on_result(verdict, cached)

    items = []
    for iid, instance in by_id.items():
        out_dir = _eval_dir(layout, predictions[iid])
        if not rerun and (previous := reusable_report(out_dir, predictions[iid])) is not None:
            record(previous, True)  # finished earlier: nothing to submit
        else:
            items.append(Item(iid, (instance, predictions[iid], layout, sources, rerun, timeout, carry),
                              _needs(instance)))
    for outcome in executor.run(grade_task, items):
        out_dir = _eval_dir(layout, predictions[outcome.key])
        if isinstance(outcome.error, TaskLost):  # its worker or node was lost twice: an infrastructure label
            graded = Graded(InstanceReport(outcome.key, "container_failed", detail=str(outcome.error)))
            write_report(graded.verdict, out_dir)
        elif outcome.error is not None:  # a bug or a full disk: as before, it stops the run
            raise outcome.error
        else:
            graded = outcome.value
            if graded.report is not None:
                graded.report.write(out_dir)
        if outcome.attempts > 1:  # the machinery lost it once: said, as batch says it, so a user knows why
            print(f"{outcome.key}: its worker was lost; graded again ({outcome.attempts} attempts)", file=sys.stderr)
        record(graded.verdict, graded.reused)
    summary = summarize(instances, verdicts, layout.run_id, predictions, earlier)
    summary["wall_seconds"] = round(time.monotonic() - started, 1)
    summary["summary_path"] = str(layout.summary)
    _write_summary(layout.summary, summary)
    return summary


def _eval_dir(layout: RunLayout, prediction: Prediction) -> Path:
    return layout.with_model(prediction.model_name_or_path).eval_dir(prediction.instance_id)


def grade_task(instance: Instance, prediction: Prediction, layout: RunLayout, sources: RepoSources | None,
               rerun: bool, timeout: float, carry: bool = False) -> Graded:
    """One instance wherever the executor runs it: `grade` into the run's report folder (local threads), or,
    with `carry`, into a scratch folder on this node whose files go back to the driver (which already checked
    for a report to reuse)."""
    if not carry:
        return Graded(*grade(instance, prediction, layout, sources=sources, rerun=rerun, timeout=timeout))
    with scratch_layout(layout) as scratch:
        verdict, _ = grade(instance, prediction, scratch, sources=sources, rerun=True, timeout=timeout)
        return Graded(verdict, False, FolderFiles.read(_eval_dir(scratch, prediction)))


def _needs(instance: Instance) -> Needs:
    """The grader's box: the spec's CPUs and one box on the node's engine."""
    from pinpoint.swebench_eval.runtime import instance_cpus

    try:
        return Needs(cpus=instance_cpus(instance, RuntimeSettings()), docker=1)
    except KeyError:  # no spec: grading labels it itself
        return Needs(cpus=1.0, docker=1)


def _write_summary(path: Path, summary: dict[str, Any]) -> None:
    write_json_atomic(path, summary, indent=2)
