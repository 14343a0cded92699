"""`pinpoint bench published`: grade a published agent run (its predictions and the official harness's per-instance
report.json files) with pinpoint, and say where pinpoint's verdict or any FAIL_TO_PASS/PASS_TO_PASS status differs
from the official one.

A run folder holds `preds.jsonl` (or `all_preds.jsonl`, `preds.json`) and `logs/<instance>/report.json`, as the
SWE-bench experiments repository publishes them. Every row is graded through `run.grade` into the run layout
(`<runs>/<run>/<model>/eval/<instance>/`), so a graded row is reused on the next invocation (resume) and only a
changed patch or an infrastructure failure is graded again.

Tests that need the internet cannot pass in pinpoint's offline eval boxes: a test whose statuses differ and whose
failure in pinpoint's log is a network error (name resolution, refused or unreachable connections) is named as
network-bound, apart from the disagreements.

The official harness never applies a spec's CPU quota (`nano_cpus`, pylint's 2.14+ rows): its box gets Docker's
defaults, which on a cgroup-v1 engine (cpu.shares 1024, no quota) pylint counts as one CPU, so its tests marked
`needs_two_cores` are skipped and, absent from the log, graded as failures. pinpoint applies the quota (the gold
patches pass those tests only with it). A row that disagrees on such an instance is graded again in a one-CPU box; when
that grading gives every official status, the differing tests are named cpu-bound, apart from the disagreements.

Without conda, a package the env spec asks conda for that PyPI does not publish (cdms2) is missing from pinpoint's env
image: a test that passed officially and that pinpoint's log says was skipped for want of it (swebench_eval.conda_only)
is named conda-only, apart from the disagreements.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pinpoint.environments.errors import UsageError
from pinpoint.environments.runtime import RuntimeSettings
from pinpoint.swebench_eval.conda_only import conda_only_tests
from pinpoint.swebench_eval.datasets import Instance
from pinpoint.swebench_eval.layout import RunLayout
from pinpoint.swebench_eval.predictions import Prediction, read_predictions
from pinpoint.swebench_eval.run import grade
from pinpoint.swebench_eval.sources import RepoSources
from pinpoint.swebench_eval.specs import spec_for

PREDICTION_FILES = ("preds.jsonl", "all_preds.jsonl", "preds.json", "all_preds.json")
#: what a test failing for want of the internet prints (requests/urllib3/socket errors)
NETWORK_ERROR = re.compile(r"Temporary failure in name resolution|Name or service not known|gaierror|"
                           r"NewConnectionError|Failed to establish a new connection|Network is unreachable|"
                           r"nodename nor servname")
_HEADER = re.compile(r"^_{3,} (.+?) _{3,}$")


@dataclass(frozen=True)
class PublishedRun:
    """A published run: its name (the folder's), predictions and official report entries by instance id."""

    name: str
    predictions: dict[str, Prediction]
    official: dict[str, dict[str, Any]]


def load_published(folder: Path) -> PublishedRun:
    """The run in `folder`; a report.json may hold `{instance_id: entry}` (the harness's) or the entry alone."""
    folder = Path(folder)
    found = [folder / name for name in PREDICTION_FILES if (folder / name).is_file()]
    if not found:
        raise UsageError(f"{folder}: no predictions file (one of {', '.join(PREDICTION_FILES)})")
    predictions = read_predictions(found[0])
    official = {}
    for path in sorted(folder.glob("logs/*/report.json")):
        instance_id = path.parent.name
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        official[instance_id] = data.get(instance_id, data) if isinstance(data, dict) else {}
    if not official:
        raise UsageError(f"{folder}: no official report (logs/<instance>/report.json)")
    return PublishedRun(folder.name, predictions, official)


def required_statuses(entry: dict[str, Any], instance: Instance) -> dict[str, str]:
    """`success`, `failure` or `not run` (the patch did not apply, or the test is in neither list) per FAIL_TO_PASS
    and PASS_TO_PASS test of `instance`, from one report entry (official or pinpoint's: the same shape)."""
    status = entry.get("tests_status") or {}
    out = {}
    for group, tests in (("FAIL_TO_PASS", instance.FAIL_TO_PASS), ("PASS_TO_PASS", instance.PASS_TO_PASS)):
        lists = status.get(group) or {}
        for test in tests:
            out[test] = ("success" if test in lists.get("success", []) else
                         "failure" if test in lists.get("failure", []) else "not run")
    return out


def network_bound(test: str, log_text: str) -> bool:
    """Whether pinpoint's log shows `test` failing on a network error: its failure section (pytest's `___ name ___`
    block) names one."""
    name = test.rsplit("::", 1)[-1]
    block: list[str] | None = None
    for line in log_text.splitlines():
        header = _HEADER.match(line)
        if header or line.startswith("====="):
            if block is not None and NETWORK_ERROR.search("\n".join(block)):
                return True
            block = [] if header and header.group(1).split(".")[-1] == name else None
        elif block is not None:
            block.append(line)
    return block is not None and bool(NETWORK_ERROR.search("\n".join(block)))


@dataclass
class RowAgreement:
    """One row: the official verdict beside pinpoint's, and each test whose status differs."""

    instance_id: str
    official_resolved: bool
    pinpoint_outcome: str
    tests: int
    differ: dict[str, str] = field(default_factory=dict)  # test -> "official X, pinpoint Y"
    network: dict[str, str] = field(default_factory=dict)  # the same, for network-bound tests
    cpu: dict[str, str] = field(default_factory=dict)  # the same, for tests the one-CPU grading gives as officially
    conda: dict[str, str] = field(default_factory=dict)  # the same, for tests skipped for want of a conda-only package
    cached: bool = False

    @property
    def verdict_agrees(self) -> bool:
        return self.official_resolved == (self.pinpoint_outcome == "resolved")

    @property
    def agrees(self) -> bool:
        """The verdict and every test status agree, network-bound, cpu-bound and conda-only tests aside."""
        return self.verdict_agrees and not self.differ

    @property
    def network_bound(self) -> bool:
        """The verdicts differ, and only network-bound tests do: the row needs the internet, not a fix."""
        return not self.verdict_agrees and not self.differ and bool(self.network)

    @property
    def cpu_bound(self) -> bool:
        """The verdicts differ, and only cpu-bound tests (no network-bound one) do: the official box counted one
        CPU."""
        return not self.verdict_agrees and not self.differ and not self.network and bool(self.cpu)

    @property
    def conda_only(self) -> bool:
        """The verdicts differ, and only conda-only tests (no network- or cpu-bound one) do: the official env had
        a package no PyPI distribution provides."""
        return not self.verdict_agrees and not self.differ and not self.network and not self.cpu and bool(self.conda)

    @property
    def label(self) -> str:
        if self.agrees:
            return "agree"
        return ("network-bound" if self.network_bound else "cpu-bound" if self.cpu_bound else
                "conda-only" if self.conda_only else "DISAGREE")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "verdict_agrees": self.verdict_agrees, "agrees": self.agrees,
                "network_bound": self.network_bound, "cpu_bound": self.cpu_bound, "conda_only": self.conda_only}


def compare(instance: Instance, official: dict[str, Any], pinpoint: dict[str, Any], log_text: str,
            outcome: str, cached: bool = False, conda_skipped: frozenset[str] = frozenset()) -> RowAgreement:
    """The agreement of pinpoint's report entry (and its eval log) with the official one on `instance`;
    `conda_skipped`: the tests (parameters aside) the log says were skipped for want of a conda-only package."""
    theirs, ours = required_statuses(official, instance), required_statuses(pinpoint, instance)
    row = RowAgreement(instance.instance_id, bool(official.get("resolved")), outcome, len(theirs), cached=cached)
    for test, status in theirs.items():
        if ours[test] != status:
            conda = status == "success" and test.split("[", 1)[0] in conda_skipped
            where = row.network if network_bound(test, log_text) else row.conda if conda else row.differ
            where[test] = f"official {status}, pinpoint {ours[test]}"
    return row


def _graded_row(instance: Instance, prediction: Prediction, official: dict[str, Any], layout: RunLayout,
                sources: RepoSources | None, timeout: float, settings: RuntimeSettings | None = None) -> RowAgreement:
    """Grade `prediction` (or reuse its grading in `layout`) and compare it with the official entry."""
    verdict, reused = grade(instance, prediction, layout, sources=sources, settings=settings, timeout=timeout)
    log = layout.with_model(prediction.model_name_or_path).eval_dir(instance.instance_id) / "test_output.txt"
    log_text = log.read_text(errors="replace") if log.exists() else ""
    entry = verdict.report.get(instance.instance_id, {})
    skipped = frozenset(conda_only_tests(instance, log_text, sources or RepoSources()))
    return compare(instance, official, entry, log_text, verdict.outcome, cached=reused, conda_skipped=skipped)


def declares_cpus(instance: Instance) -> bool:
    """Whether the instance's spec asks for more than one CPU, which the official harness does not give."""
    try:
        return spec_for(instance).get("nano_cpus", 0) > 1_000_000_000
    except KeyError:
        return False


def bench_row(instance: Instance, prediction: Prediction, official: dict[str, Any], layout: RunLayout,
              sources: RepoSources | None = None, timeout: float = 1800.0) -> RowAgreement:
    """The row graded as pinpoint grades; if it disagrees on an instance whose spec declares CPUs, graded again
    in a one-CPU box (into `<run>-one-cpu`): the tests that grading gives as officially are cpu-bound."""
    row = _graded_row(instance, prediction, official, layout, sources, timeout)
    if not row.differ or not declares_cpus(instance):
        return row
    one_cpu = RunLayout(f"{layout.run_id}-one-cpu", layout.model, layout.root)
    again = _graded_row(instance, prediction, official, one_cpu, sources, timeout, RuntimeSettings(cpus=1.0))
    row.cpu = {test: status for test, status in row.differ.items() if test not in again.differ}
    row.differ = {test: status for test, status in row.differ.items() if test not in row.cpu}
    return row


def bench_published(run: PublishedRun, instances: list[Instance], layout_root: Path | None = None,
                    sources: RepoSources | None = None, timeout: float = 1800.0,
                    on_row: Callable[[RowAgreement], None] | None = None) -> dict[str, Any]:
    """Every row of `instances` that the run has a prediction and an official report for, graded and compared;
    the rows and the totals."""
    layout = RunLayout(f"published-{run.name}", "", layout_root)
    rows = []
    for instance in instances:
        iid = instance.instance_id
        if iid not in run.predictions or iid not in run.official:
            continue
        rows.append(bench_row(instance, run.predictions[iid], run.official[iid], layout, sources, timeout))
        if on_row is not None:
            on_row(rows[-1])
    return {
        "run": run.name,
        "rows_total": len(rows),
        "rows_agree": sum(r.agrees for r in rows),
        "rows_network_bound": [r.instance_id for r in rows if r.network_bound],
        "verdicts_agree": sum(r.verdict_agrees for r in rows),
        "tests_total": sum(r.tests for r in rows),
        "tests_differ": sum(len(r.differ) for r in rows),
        "tests_network_bound": sum(len(r.network) for r in rows),
        "rows_cpu_bound": [r.instance_id for r in rows if r.cpu_bound],
        "rows_disagree": [r.instance_id for r in rows if r.label == "DISAGREE"],
        "tests_cpu_bound": sum(len(r.cpu) for r in rows),
        "rows_conda_only": [r.instance_id for r in rows if r.conda_only],
        "tests_conda_only": sum(len(r.conda) for r in rows),
        "infra_failures": [r.instance_id for r in rows if r.pinpoint_outcome not in
                           ("resolved", "unresolved", "patch_failed", "no_test_output")],
        "rows": [r.to_json() for r in rows],
    }


def format_row(row: RowAgreement) -> str:
    """One line: the verdicts, whether they and the tests agree, and the first differing tests by name."""
    official = "resolved" if row.official_resolved else "unresolved"
    parts = [f"{row.instance_id:<28}", f"{row.label:<13}", f"official {official:<10}", f"pinpoint {row.pinpoint_outcome:<14}",
             f"tests {row.tests - len(row.differ) - len(row.network) - len(row.cpu) - len(row.conda)}/{row.tests} equal"]
    if row.network:
        parts.append(f"network-bound {len(row.network)}: " + "; ".join(f"{t} ({s})" for t, s in
                                                                      list(row.network.items())[:3]))
    if row.cpu:
        parts.append(f"cpu-bound {len(row.cpu)}: " + "; ".join(f"{t} ({s})" for t, s in list(row.cpu.items())[:3]))
    if row.conda:
        parts.append(f"conda-only {len(row.conda)}: " + "; ".join(f"{t} ({s})" for t, s in list(row.conda.items())[:3]))
    if row.differ:
        parts.append(f"differ {len(row.differ)}: " + "; ".join(f"{t} ({s})" for t, s in list(row.differ.items())[:3]))
    if row.cached:
        parts.append("(graded earlier)")
    return "  ".join(parts)


def format_totals(figures: dict[str, Any]) -> str:
    """The run's line: rows and tests that agree, and those set apart by cause."""
    apart = figures["tests_network_bound"] + figures["tests_cpu_bound"] + figures["tests_conda_only"]
    equal = figures["tests_total"] - figures["tests_differ"] - apart
    return (f"{figures['run']}: rows agree {figures['rows_agree']}/{figures['rows_total']}, network-bound "
            f"{len(figures['rows_network_bound'])}, cpu-bound {len(figures['rows_cpu_bound'])}, conda-only "
            f"{len(figures['rows_conda_only'])} (verdicts agree {figures['verdicts_agree']}/{figures['rows_total']});"
            f" tests equal {equal}/{figures['tests_total']}, {figures['tests_network_bound']} network-bound, "
            f"{figures['tests_cpu_bound']} cpu-bound, {figures['tests_conda_only']} conda-only, "
            f"{figures['tests_differ']} differ; infrastructure failures {len(figures['infra_failures'])}")
