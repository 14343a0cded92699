"""A resumable evaluation run: predictions in, one folder per instance and a summary out.

runs/eval/<run_id>/<instance_id>/{report.json, test_output.txt, eval.sh, ...} and runs/eval/<run_id>/summary.json.
A re-run skips every instance whose report.json holds a model outcome; infrastructure failures are retried, and
`rerun=True` redoes everything. The summary is rewritten after each instance, so an interrupted run loses nothing.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swebench_eval.datasets import DatasetError, Instance
from swebench_eval.evaluate import (
    INFRA_OUTCOMES,
    MODEL_OUTCOMES,
    InstanceReport,
    evaluate_patch,
    write_report,
)
from swebench_eval.metrics import edit_metrics
from swebench_eval.paths import RUNS_DIR
from swebench_eval.sources import RepoSources


@dataclass(frozen=True)
class Prediction:
    instance_id: str
    model_patch: str | None
    model_name_or_path: str


def load_predictions(path: Path) -> dict[str, Prediction]:
    """Read SWE-bench predictions (.jsonl, or .json as a list or an {id: prediction} map), naming any bad entry."""
    text = Path(path).read_text(encoding="utf-8")
    if str(path).endswith(".jsonl"):
        raw = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    raw.append((f"{path} line {number}", json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise DatasetError(f"{path} line {number}: not valid JSON ({exc.msg})") from None
    else:
        data = json.loads(text)
        items = data.values() if isinstance(data, dict) else data
        raw = [(f"{path} entry {i}", item) for i, item in enumerate(items, 1)]
    predictions: dict[str, Prediction] = {}
    for where, item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("instance_id"), str):
            raise DatasetError(f"{where}: a prediction needs a string 'instance_id'")
        patch = item.get("model_patch")
        if patch is not None and not isinstance(patch, str):
            raise DatasetError(f"{where} ({item['instance_id']}): 'model_patch' must be a string or null")
        predictions[item["instance_id"]] = Prediction(item["instance_id"], patch,
                                                      str(item.get("model_name_or_path") or "unknown"))
    return predictions


def gold_predictions(instances: Iterable[Instance]) -> dict[str, Prediction]:
    return {i.instance_id: Prediction(i.instance_id, i.patch, "gold") for i in instances}


def empty_predictions(instances: Iterable[Instance]) -> dict[str, Prediction]:
    return {i.instance_id: Prediction(i.instance_id, "", "empty") for i in instances}


def _finished(out_dir: Path) -> InstanceReport | None:
    """The stored verdict of an instance, when it holds a model outcome (infrastructure failures are retried)."""
    path = out_dir / "report.json"
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        meta = next(iter(data.values()))["pinpoint"]
    except (json.JSONDecodeError, StopIteration, KeyError, TypeError):
        return None
    if meta.get("outcome") not in MODEL_OUTCOMES:
        return None
    report = {k: {kk: vv for kk, vv in v.items() if kk != "pinpoint"} for k, v in data.items()}
    return InstanceReport(report=report, **meta)


def summarize(instances: list[Instance], verdicts: dict[str, InstanceReport], run_id: str,
              predictions: dict[str, Prediction]) -> dict[str, Any]:
    """Counts and id lists per outcome, in the spirit of the official run report."""
    by_outcome: dict[str, list[str]] = {o: [] for o in (*MODEL_OUTCOMES, *INFRA_OUTCOMES)}
    for iid in sorted(verdicts):
        by_outcome.setdefault(verdicts[iid].outcome, []).append(iid)
    done = list(verdicts.values())
    evals = [v.eval_seconds for v in done if v.eval_seconds]
    edits = [v.edit for v in done if "f1" in v.edit]
    return {
        "run_id": run_id,
        "total_instances": len(instances),
        "submitted_instances": sum(1 for i in instances if i.instance_id in predictions),
        "completed_instances": len(done),
        "resolved_instances": len(by_outcome["resolved"]),
        "unresolved_instances": len(by_outcome["unresolved"]),
        "error_instances": len(by_outcome["patch_failed"]) + len(by_outcome["no_test_output"]),
        "infra_failure_instances": sum(len(by_outcome[o]) for o in INFRA_OUTCOMES),
        "empty_patch_instances": sum(1 for p in predictions.values() if not (p.model_patch or "").strip()),
        "mean_eval_seconds": round(sum(evals) / len(evals), 2) if evals else None,
        "edit_metrics": {k: round(sum(e[k] for e in edits) / len(edits), 4) for k in ("precision", "recall", "f1")}
        if edits else None,
        "ids": by_outcome,
    }


def run_eval(
    instances: list[Instance],
    predictions: dict[str, Prediction],
    run_id: str,
    *,
    workers: int = 1,
    rerun: bool = False,
    timeout: float = 1800.0,
    runs_dir: Path | None = None,
    on_result: Callable[[InstanceReport, bool], None] | None = None,
    sources: RepoSources | None = None,
) -> dict[str, Any]:
    """Evaluate every instance that has a prediction; returns the summary (also written to summary.json)."""
    root = Path(runs_dir or RUNS_DIR) / "eval" / run_id
    root.mkdir(parents=True, exist_ok=True)
    todo = [i for i in instances if i.instance_id in predictions]
    verdicts: dict[str, InstanceReport] = {}
    lock = threading.Lock()
    summary_path = root / "summary.json"

    def record(verdict: InstanceReport, cached: bool) -> None:
        with lock:
            verdicts[verdict.instance_id] = verdict
            summary = summarize(instances, verdicts, run_id, predictions)
            tmp = summary_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(summary, indent=2))
            tmp.replace(summary_path)
        if on_result:
            on_result(verdict, cached)

    def one(instance: Instance) -> None:
        out_dir = root / instance.instance_id
        if not rerun and (previous := _finished(out_dir)) is not None:
            record(previous, True)
            return
        prediction = predictions[instance.instance_id]
        try:
            verdict = evaluate_patch(instance, prediction.model_patch, out_dir=out_dir, timeout=timeout,
                                     model_name=prediction.model_name_or_path, sources=sources)
        except Exception as exc:  # one broken instance must not stop the run; it is labelled, not hidden
            verdict = InstanceReport(instance.instance_id, "container_failed", detail=f"{type(exc).__name__}: {exc}")
        if (prediction.model_patch or "").strip():
            try:
                verdict.edit = edit_metrics(prediction.model_patch, instance.patch).to_json()
            except ValueError as exc:
                verdict.edit = {"error": str(exc)}
        write_report(verdict, out_dir)
        record(verdict, False)

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for future in as_completed([pool.submit(one, i) for i in todo]):
            future.result()
    summary = summarize(instances, verdicts, run_id, predictions)
    summary["wall_seconds"] = round(time.monotonic() - started, 1)
    summary["summary_path"] = str(summary_path)
    summary_path.write_text(json.dumps(summary, indent=2))
    return summary
