"""`pinpoint bench grading`: pooled grading (a warm grader box of the instance image, swebench_eval.pooled) beside
fresh-container grading (the official contract), gold and empty patch, per row, in one run.

Each row is graded four times, interleaved so the machine's load drifts over both ways alike: fresh gold, pooled
gold, fresh empty, pooled empty. The pooled box is started and primed first, as the warm pool does ahead of an
episode (its cost is reported apart, `box_start_s`, `prime_s`), and grades gold *before* empty, so whatever the gold
grading left behind would show as a disagreement on the empty one. Agreement is per test: the outcome, the official
FAIL_TO_PASS/PASS_TO_PASS statuses, and every test status the official log parser reads from the log.

Some rows' test runs are not deterministic even in fresh containers (sympy's runner draws a hash seed per run, and
a few of its tests then recurse past the limit on some seeds): where the pooled grading differs, the row is graded
fresh again, up to RECHECKS times, and a pooled status that a fresh grading also gave is the harness's own
nondeterminism, not the warm box's (`unexplained` lists the rest). A row agrees when no difference is left unexplained; `exact` says
whether the first fresh grading already matched.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pinpoint.environments.bench import load_average
from pinpoint.environments.docker_runtime import DockerRuntime
from pinpoint.environments.files import scratch_dir
from pinpoint.environments.runtime import RuntimeSettings
from pinpoint.swebench_eval.datasets import Instance
from pinpoint.swebench_eval.evaluate import InstanceReport, evaluate_patch
from pinpoint.swebench_eval.grading import make_test_spec
from pinpoint.swebench_eval.images import build_instance_image
from pinpoint.swebench_eval.pooled import prime, state_of
from pinpoint.swebench_eval.runtime import instance_runtime
from pinpoint.swebench_eval.sources import RepoSources


@dataclass
class Grading:
    """One grading of one patch one way: what it said and what it cost."""

    outcome: str
    seconds: float
    required: dict[str, Any] = field(default_factory=dict)  # the official tests_status (F2P/P2P success/failure)
    tests: dict[str, str] = field(default_factory=dict)  # every test status the official parser reads in the log
    #: pooled only: what the warm reset did, and whether the reinstall was skipped
    reset: str = ""
    install_skipped: bool = False
    #: pooled only: the eval script's part after the install, which no warm box skips (pooled.WarmState.tests_s)
    tests_s: float = 0.0


def verdicts(report: InstanceReport, instance: Instance, log_path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """(official FAIL_TO_PASS/PASS_TO_PASS statuses, every parsed test status) of one grading."""
    from swebench.harness.grading import get_logs_eval

    entry = report.report.get(instance.instance_id, {})
    required = entry.get("tests_status", {})
    tests: dict[str, str] = {}
    if log_path.exists():
        tests, _ = get_logs_eval(make_test_spec(instance), str(log_path))
    return required, dict(tests)


def _grade(instance: Instance, patch: str, **kwargs: Any) -> Grading:
    with scratch_dir("pinpoint-bench-grading-") as tmp:
        start = time.monotonic()
        report = evaluate_patch(instance, patch, out_dir=Path(tmp), model_name="bench", **kwargs)
        seconds = time.monotonic() - start
        required, tests = verdicts(report, instance, Path(tmp) / "test_output.txt")
    return Grading(report.outcome, seconds, required, tests)


def _grade_warm(instance: Instance, patch: str, box: DockerRuntime, timeout: float) -> Grading:
    """A pooled grading on `box`, with what its warm reset did and whether it skipped the reinstall."""
    skipped = state_of(box).skipped_installs
    grading = _grade(instance, patch, runtime=box, timeout=timeout, warm=True)
    state = state_of(box)
    grading.reset, grading.install_skipped = state.last_reset, state.skipped_installs > skipped
    grading.tests_s = state.tests_s
    return grading


def differences(fresh: Grading, pooled: Grading) -> list[str]:
    """What the pooled grading said differently from the fresh one (empty: they agree)."""
    diffs = []
    if fresh.outcome != pooled.outcome:
        diffs.append(f"outcome {fresh.outcome} vs {pooled.outcome}")
    if fresh.required != pooled.required:
        diffs.append("FAIL_TO_PASS/PASS_TO_PASS statuses differ")
    for test in sorted(set(fresh.tests) | set(pooled.tests)):
        a, b = fresh.tests.get(test, "absent"), pooled.tests.get(test, "absent")
        if a != b:
            diffs.append(f"{test}: {a} vs {b}")
    return diffs


#: fresh gradings added, at most, per patch whose pooled verdicts differ from the first fresh one
RECHECKS = 3


def unexplained(pooled: Grading, fresh: list[Grading]) -> list[str]:
    """The pooled grading's differences from the first fresh grading that no fresh grading of `fresh` shares: an
    outcome, or a test status, that no fresh container gave (the F2P/P2P statuses follow from the test statuses)."""
    left = []
    if pooled.outcome not in {f.outcome for f in fresh}:
        left.append(f"outcome {fresh[0].outcome} vs {pooled.outcome}")
    for test in sorted(set(pooled.tests).union(*(f.tests for f in fresh))):
        status = pooled.tests.get(test, "absent")
        if status not in {f.tests.get(test, "absent") for f in fresh}:
            left.append(f"{test}: {fresh[0].tests.get(test, 'absent')} vs {status}")
    return left


def rechecked(instance: Instance, patch: str, fresh: Grading, pooled: Grading, **fresh_kw: Any
              ) -> tuple[list[Grading], list[str]]:
    """Fresh gradings of `patch` until every difference of `pooled` is one a fresh container also gave, at most
    RECHECKS more: (every fresh grading, the differences still unexplained)."""
    runs = [fresh]
    left = unexplained(pooled, runs) if differences(fresh, pooled) else []
    while left and len(runs) <= RECHECKS:
        runs.append(_grade(instance, patch, **fresh_kw))
        left = unexplained(pooled, runs)
    return runs, left


def bench_row(instance: Instance, sources: RepoSources, settings: RuntimeSettings | None = None,
              timeout: float = 1800.0) -> dict[str, Any]:
    """Grade `instance` gold and empty, fresh and pooled; the row's verdicts, agreement and times."""
    image = build_instance_image(instance, sources).tag
    fresh_kw = {"image": image, "settings": settings, "timeout": timeout}
    load = load_average()
    start = time.monotonic()
    box = instance_runtime(instance, image, settings, grading=True)
    try:
        box.run("true", timeout=120)
        started_s = time.monotonic() - start
        start = time.monotonic()
        prime(box, instance, timeout)  # the pool starts and primes its boxes ahead of time: not a grading's cost
        prime_s = time.monotonic() - start
        runs = {"fresh_gold": _grade(instance, instance.patch, **fresh_kw),
                "pooled_gold": _grade_warm(instance, instance.patch, box, timeout),
                "fresh_empty": _grade(instance, "", **fresh_kw),
                "pooled_empty": _grade_warm(instance, "", box, timeout)}
    finally:
        box.close()
    row: dict[str, Any] = {"instance": instance.instance_id, "load_average": load, "box_start_s": round(started_s, 2),
                           "prime_s": round(prime_s, 2)}
    for kind, patch in (("gold", instance.patch), ("empty", "")):
        fresh, pooled = runs[f"fresh_{kind}"], runs[f"pooled_{kind}"]
        diffs = differences(fresh, pooled)
        fresh_runs, left = rechecked(instance, patch, fresh, pooled, **fresh_kw)
        row[kind] = {"fresh_outcome": fresh.outcome, "pooled_outcome": pooled.outcome, "tests": len(fresh.tests),
                     "agree": not left, "exact": not diffs, "differences": diffs[:20], "unexplained": left[:20],
                     "fresh_rechecks": len(fresh_runs) - 1,
                     "fresh_s": round(fresh.seconds, 2), "pooled_s": round(pooled.seconds, 2),
                     "speedup": round(fresh.seconds / pooled.seconds, 2) if pooled.seconds else None,
                     "install_skipped": pooled.install_skipped, "pooled_reset": pooled.reset,
                     "pooled_tests_s": round(pooled.tests_s, 2),
                     "ceiling": round(fresh.seconds / pooled.tests_s, 2) if pooled.tests_s else None}
    row["agree"] = row["gold"]["agree"] and row["empty"]["agree"]
    row["exact"] = row["gold"]["exact"] and row["empty"]["exact"]
    return row


def bench_grading(instances: list[Instance], sources: RepoSources, settings: RuntimeSettings | None = None,
                  timeout: float = 1800.0, on_row: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Every row of `instances` graded both ways, and the totals: rows that agree, time per graded patch."""
    rows = []
    for instance in instances:
        rows.append(bench_row(instance, sources, settings, timeout))
        if on_row is not None:
            on_row(rows[-1])
    fresh = [r[k]["fresh_s"] for r in rows for k in ("gold", "empty")]
    pooled = [r[k]["pooled_s"] for r in rows for k in ("gold", "empty")]
    tests = [r[k]["pooled_tests_s"] for r in rows for k in ("gold", "empty")]
    return {
        "rows": rows,
        "rows_agree": sum(r["agree"] for r in rows),
        "rows_exact": sum(r["exact"] for r in rows),
        "rows_total": len(rows),
        "fresh_s_mean": round(sum(fresh) / len(fresh), 2) if fresh else None,
        "pooled_s_mean": round(sum(pooled) / len(pooled), 2) if pooled else None,
        "speedup_total": round(sum(fresh) / sum(pooled), 2) if pooled and sum(pooled) else None,
        "pooled_tests_s_mean": round(sum(tests) / len(tests), 2) if tests else None,
        "ceiling_total": round(sum(fresh) / sum(tests), 2) if tests and sum(tests) else None,
        "installs_skipped": sum(r[k]["install_skipped"] for r in rows for k in ("gold", "empty")),
        "load_average_after": load_average(),
    }


def format_row(row: dict[str, Any]) -> str:
    """One line per row: agreement and the time of each way, gold and empty, with the load when it started."""
    rechecks = sum(row[k].get("fresh_rechecks", 0) for k in ("gold", "empty"))
    verdict = "agree" if row["exact"] else ("agree up to the harness's own flaky tests" if row["agree"] else "DISAGREE")
    parts = [f"{row['instance']:<28}", verdict + (f" ({rechecks} fresh rechecks)" if rechecks else "")]
    for kind in ("gold", "empty"):
        r = row[kind]
        parts.append(f"{kind} {r['fresh_outcome']}/{r['pooled_outcome']} {r['tests']} tests "
                     f"fresh {r['fresh_s']:.2f}s pooled {r['pooled_s']:.2f}s ({r['speedup']}x"
                     f"{', install skipped' if r.get('install_skipped') else ''}; its tests {r['pooled_tests_s']:.2f}s,"
                     f" at most {r['ceiling']}x)")
    parts.append(f"load {' '.join(f'{x:.2f}' for x in row['load_average'])}")
    left = [d for k in ("gold", "empty") for d in row[k].get("unexplained", [])]
    if left:
        parts.append(f"no fresh grading gave: {'; '.join(left[:3])}")
    return "  ".join(parts)


def format_totals(figures: dict[str, Any]) -> str:
    """The closing line: rows that agree, time per graded patch each way, the ratio, installs skipped, the load."""
    return (f"rows agree {figures['rows_agree']}/{figures['rows_total']} ({figures['rows_exact']} at the first fresh "
            f"grading); per graded patch fresh "
            f"{figures['fresh_s_mean']}s, pooled {figures['pooled_s_mean']}s, fresh/pooled {figures['speedup_total']}x"
            f" (its tests alone {figures['pooled_tests_s_mean']}s: at most {figures['ceiling_total']}x for a grader"
            " that runs them);"
            f" installs skipped {figures['installs_skipped']}/{2 * figures['rows_total']}; load after "
            f"{figures['load_average_after']}")
