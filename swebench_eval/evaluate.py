"""Evaluate one patch on one instance, the way the official harness does: apply the patch (with its fallbacks), run
the eval script in the instance container with a timeout, grade the log with the official parser and grader.

Every outcome lands in one of these labels, so infrastructure trouble never counts as a model failure:
model outcomes `resolved`, `unresolved`, `patch_failed` (no fallback could apply it); infrastructure outcomes
`build_failed`, `container_failed`, `timeout`; and `no_test_output` (the log held no parseable test result: the
official grader's "error", whose likely cause is recorded from swebench's infra classifier).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pinpoint.environments.files import write_atomic, write_json_atomic
from pinpoint.environments.runtime import Runtime, RuntimeFailure, RuntimeSettings
from pinpoint.swebench_eval import pooled
from pinpoint.swebench_eval.datasets import Instance
from pinpoint.swebench_eval.grading import grade_log, recorded_exit_code
from pinpoint.swebench_eval.patches import PatchError, apply_patch
from pinpoint.swebench_eval.scripts import eval_script
from pinpoint.swebench_eval.setup_patch import prepare
from pinpoint.swebench_eval.sources import RepoSources
from pinpoint.swebench_eval.specs import spec_for
from pinpoint.swebench_eval.tamper import conflicting_tests, guard_script, reverted_files

DEFAULT_TIMEOUT = 1800.0
MODEL_OUTCOMES = ("resolved", "unresolved", "patch_failed", "no_test_output")
INFRA_OUTCOMES = ("build_failed", "container_failed", "timeout")


@dataclass
class InstanceReport:
    """The verdict on one (instance, patch) pair, plus what it cost."""

    instance_id: str
    outcome: str
    report: dict[str, Any] = field(default_factory=dict)  # official shape: {instance_id: {...}}
    test_exit_code: int | None = None
    image: str = ""
    python: str = ""
    build_seconds: float = 0.0
    eval_seconds: float = 0.0
    detail: str = ""
    edit: dict[str, Any] = field(default_factory=dict)  # swebench_eval.metrics.edit_metrics against the gold patch
    #: what the grader undid or noticed (swebench_eval.tamper): test infrastructure the patch touched, put back
    #: before the tests ran, and FAIL_TO_PASS/PASS_TO_PASS tests the log reported both failed and passed
    tampering: dict[str, list[str]] = field(default_factory=dict)

    @property
    def resolved(self) -> bool:
        return self.outcome == "resolved"

    @property
    def infra_failure(self) -> bool:
        return self.outcome in INFRA_OUTCOMES

    def to_json(self) -> dict[str, Any]:
        """report.json: the official report, with pinpoint's labels beside it under `pinpoint`."""
        data = dict(self.report) or {self.instance_id: {"resolved": False}}
        meta = asdict(self)
        meta.pop("report")
        data[self.instance_id] = {**data[self.instance_id], "pinpoint": meta}
        return data


def _write(out_dir: Path | None, name: str, text: str) -> None:
    if out_dir is not None:
        write_atomic(out_dir / name, text)


def evaluate_patch(
    instance: Instance,
    patch: str | None,
    *,
    runtime: Runtime | None = None,
    image: str | None = None,
    out_dir: Path | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    model_name: str = "pinpoint",
    sources: RepoSources | None = None,
    settings: RuntimeSettings | None = None,
    warm: bool = False,
) -> InstanceReport:
    """Grade `patch` on `instance`. With `runtime` (e.g. the agent's container) it is reset and reused; otherwise a
    fresh container is started from the instance image (built first when `image` is not given). `warm` (a pooled
    grader box, a DockerRuntime): also what the last grading left outside the tree is undone or the box recreated,
    and a reinstall it already did is skipped (swebench_eval.pooled).

    An empty patch is not applied (git refuses empty input) and the tests run on the base commit: that is the
    `--empty` check that the harness does not resolve an unfixed instance.
    """
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    verdict = InstanceReport(instance.instance_id, outcome="container_failed", image=image or "")
    own_runtime = runtime is None
    try:
        if runtime is None:
            if image is None:
                from pinpoint.environments.images import BuildError
                from pinpoint.swebench_eval.images import build_instance_image

                try:
                    record = build_instance_image(instance, sources)
                except (BuildError, OSError, KeyError, RuntimeError) as exc:
                    verdict.outcome, verdict.detail = "build_failed", str(exc)[-4000:]
                    _write(out_dir, "build_error.txt", str(exc))
                    return verdict
                image = verdict.image = record.tag
                verdict.python = record.python_used
                verdict.build_seconds = record.env_seconds + record.instance_seconds
            from pinpoint.swebench_eval.runtime import instance_runtime

            runtime = instance_runtime(instance, image, settings, grading=True)  # the agent's box, fresh
        elif warm:
            pooled.warm_reset(runtime)
        else:
            runtime.reset()
        prepare(runtime, instance)  # a synthesized row's starting state, before the patch
        return _run_in(runtime, instance, patch, verdict, out_dir, timeout, model_name, warm and not own_runtime)
    except RuntimeFailure as exc:
        verdict.outcome, verdict.detail = "container_failed", f"{type(exc).__name__}: {exc}"
        return verdict
    finally:
        if own_runtime and runtime is not None:
            runtime.close()


def _run_in(runtime: Runtime, instance: Instance, patch: str | None, verdict: InstanceReport,
            out_dir: Path | None, timeout: float, model_name: str, warm: bool = False) -> InstanceReport:
    start = time.monotonic()
    script = eval_script(instance, spec_for(instance), guard=guard_script(runtime.base_commit, patch))
    _write(out_dir, "eval.sh", script)
    _write(out_dir, "patch.diff", patch or "")  # what was graded: a later grade of the same patch reuses the report
    if patch and patch.strip():
        try:
            _write(out_dir, "apply_patch.txt", apply_patch(runtime, patch, fallbacks=True))
        except PatchError as exc:
            _write(out_dir, "apply_patch.txt", str(exc))
            verdict.outcome, verdict.detail = "patch_failed", str(exc)[-2000:]
            verdict.report = {instance.instance_id: {"patch_is_None": False, "patch_exists": True,
                                                     "patch_successfully_applied": False, "resolved": False}}
            verdict.eval_seconds = time.monotonic() - start
            return verdict
    if warm:
        result = pooled.run_warm(runtime, script, timeout)
    else:
        runtime.write_file("/eval.sh", script)
        result = runtime.run("/bin/bash /eval.sh", timeout=timeout)
    log = result.output
    if result.timed_out:
        log += f"\n\nTimeout error: {timeout:g} seconds exceeded."
    verdict.eval_seconds = time.monotonic() - start
    verdict.test_exit_code = recorded_exit_code(log)
    with tempfile.TemporaryDirectory() as tmp:
        log_path = (out_dir or Path(tmp)) / "test_output.txt"
        write_atomic(log_path, log)
        verdict.report = grade_log(instance, log_path, patch or "", model_name)
    # recorded for audit only: the verdict is the official one, whose parser keeps a test name's last status
    verdict.tampering = {"reverted": reverted_files(log), "conflicting": conflicting_tests(instance, log)}
    verdict.outcome, verdict.detail = classify(verdict.report[instance.instance_id], result.timed_out, timeout)
    return verdict


def classify(entry: dict[str, Any], timed_out: bool, timeout: float = DEFAULT_TIMEOUT) -> tuple[str, str]:
    """(outcome, detail) from the official report entry of a test run."""
    if timed_out:
        return "timeout", f"eval script exceeded {timeout:g}s"
    if entry.get("resolved"):
        return "resolved", ""
    if entry.get("patch_successfully_applied"):
        return "unresolved", ""
    return "no_test_output", entry.get("infra_failure_reason", "") or "no test results between the markers"


def write_report(verdict: InstanceReport, out_dir: Path) -> None:
    write_json_atomic(out_dir / "report.json", verdict.to_json(), indent=2)
