"""The unit reward of a submitted patch: graded as `pinpoint eval` grades it, never in the episode's own container.

A SWE-bench task runs the official eval script (test files restored from the test patch, the official log parser)
in the grader's box: a pooled one of the instance image and settings when `EnvSettings.grader == "pooled"` (the
default): reset in place, what the last grading left outside the tree removed or the box recreated, a reinstall it
already did skipped (swebench_eval.pooled); or a fresh container per grading, as the harness does. A local task runs
its test command on a fresh checkout with the patch applied.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from pinpoint.environments.local import LocalRuntime
from pinpoint.environments.runtime import RuntimeFailure, RuntimeSettings
from pinpoint.rl.pool import RuntimeFactory, WarmPool
from pinpoint.rl.tasks import RlTask
from pinpoint.swebench_eval.evaluate import evaluate_patch
from pinpoint.swebench_eval.patches import PatchError, apply_patch


@dataclass
class Graded:
    """The unit outcome: 1.0 / 0.0, or None with `infra_failure` when grading itself failed."""

    unit: float | None
    outcome: str
    seconds: float = 0.0
    infra_failure: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def grade_unit(task: RlTask, patch: str, *, settings: RuntimeSettings, image: str | None, timeout: float,
               pool: WarmPool | None = None, key: Hashable = "", factory: RuntimeFactory | None = None) -> Graded:
    """Grade `patch` on `task`: pooled when `pool` (with the key and factory of the task's box) is given."""
    started = time.monotonic()
    if not patch.strip():
        return Graded(0.0, "empty_patch")
    if task.kind == "local":
        graded = _grade_local(task, patch, timeout)
    else:
        graded = _grade_swebench(task, patch, settings, image, timeout, pool, key, factory)
    graded.seconds = time.monotonic() - started
    return graded


def _grade_swebench(task: RlTask, patch: str, settings: RuntimeSettings, image: str | None, timeout: float,
                    pool: WarmPool | None, key: Hashable, factory: RuntimeFactory | None) -> Graded:
    runtime = pool.acquire(key, factory) if pool is not None and factory is not None else None
    verdict = None
    try:
        verdict = evaluate_patch(task.instance, patch, runtime=runtime, image=image, settings=settings,
                                 timeout=timeout, model_name="pinpoint-rl", warm=runtime is not None)
    finally:
        if runtime is not None:
            pool.release(runtime, broken=verdict is None or verdict.outcome == "container_failed")
    detail = {"test_exit_code": verdict.test_exit_code}
    if verdict.infra_failure:
        return Graded(None, verdict.outcome, infra_failure=f"grading: {verdict.outcome}: {verdict.detail[:300]}",
                      detail=detail)
    return Graded(1.0 if verdict.resolved else 0.0, verdict.outcome, detail=detail)


def _grade_local(task: RlTask, patch: str, timeout: float) -> Graded:
    try:
        with LocalRuntime(task.repo_path, task.base_commit) as runtime:
            try:
                apply_patch(runtime, patch, fallbacks=True)
            except PatchError as exc:
                return Graded(0.0, "patch_failed", detail={"error": str(exc)[:300]})
            result = runtime.run(task.test_command or "false", timeout=timeout)
    except (RuntimeFailure, OSError, ValueError) as exc:
        return Graded(None, "container_failed", infra_failure=f"grading: {exc}")
    if result.timed_out:
        return Graded(None, "timeout", infra_failure=f"grading: the test command ran past {timeout:g}s")
    outcome = "resolved" if result.exit_code == 0 else "unresolved"
    return Graded(1.0 if outcome == "resolved" else 0.0, outcome, detail={"test_exit_code": result.exit_code})
