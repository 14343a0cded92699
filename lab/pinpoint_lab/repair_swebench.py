"""The repair bench's SWE-bench source: dev rows in their instance image, the FAIL_TO_PASS tests given.

This is the test-driven repair setting, not SWE-bench's own (a SWE-bench run never sees those tests by default). Per
row: the instance box, the oracle localization the agent's oracle mode uses (`agent.solve.oracle_localizers`), the
test patch put back so the arm's search can run the failing tests (FAIL_TO_PASS, then the PASS_TO_PASS tests of the
same files), then the final patch, its test files removed, graded in a fresh box as `pinpoint eval` grades it.
*plausible*: the search's final patch passes those tests; *correct*: the official grading resolves it. A row whose
image does not build is recorded as such and left out of the rates.
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

from pinpoint.agent.config import Config
from pinpoint.agent.nodes import fused_suspects
from pinpoint.agent.search import Ask, Node
from pinpoint.agent.solve import oracle_localizers
from pinpoint.agent.test_runs import run_test_command
from pinpoint.localization.execution import DEFAULT_PYTHON
from pinpoint.localization.fusion import top_lines
from pinpoint.localization.retrieval import is_test_path
from pinpoint.localization.scorer import LocalScorer
from pinpoint.localization.suspects import LocalizationRequest, Suspect
from pinpoint.swebench_eval.datasets import Instance, load_instances
from pinpoint.swebench_eval.layout import RunLayout
from pinpoint.swebench_eval.metrics import patch_gold_lines
from pinpoint.swebench_eval.oracle import apply_test_patch, oracle_tests
from pinpoint.swebench_eval.predictions import Prediction
from pinpoint.tools.run_tests import hang_bound

from pinpoint_lab.repair_bench import NO_IMAGE, BugResult, candidates_run, final_source, search_arm

#: a first run bounded (a hang is a failing test); the candidate search's seconds bound each row's search
SETTINGS = {"agent.test_timeout_s": 300.0, "search.k": 10, "search.rounds": 1, "llm.max_tokens": 256,
            "search.candidate_seconds": 300.0}
MODEL = "pinpoint-repair-bench"


def swebench_rows(ids: list[str] | None = None, limit: int | None = None) -> list[dict]:
    """The dev rows (all, or `ids`) as bench rows: `task_id` names the row, `instance` is the SWE-bench row."""
    rows = [{"task_id": i.instance_id, "instance": i} for i in load_instances(ids=ids or None)]
    return rows[:limit] if limit else rows


def oracle_command(failing: list[str], passing: list[str]) -> str:
    """The failing tests, then the passing tests of the same files, as one pytest run in the instance's env."""
    ids = " ".join(shlex.quote(i) for i in [*failing, *passing])
    return f"{DEFAULT_PYTHON} -m pytest -q -p no:cacheprovider -rA {ids}"


def without_test_files(patch: str, test_files: set[str]) -> str:
    """`patch` minus the diffs of `test_files` (the test patch the search ran against is not the answer)."""
    chunks = patch.split("diff --git ")
    kept = [c for c in chunks[1:] if c.split(" b/", 1)[-1].split("\n", 1)[0] not in test_files]
    return "".join(f"diff --git {c}" for c in kept)


def run_row(row: dict, arm: str, config: Config, work: Path, ask: Ask | None = None,
            scorer: LocalScorer | None = None) -> BugResult:
    """One arm on one dev row: search with the failing tests given, then official grading of the final patch."""
    from pinpoint.swebench_eval.runtime import runtime_for

    instance: Instance = row["instance"]
    started = time.monotonic()
    try:
        runtime, _ = runtime_for(instance, config.runtime)
    except Exception as exc:  # a row without a box is counted apart, never a repair failure
        print(f"{instance.instance_id}: no box ({type(exc).__name__}: {str(exc)[:200]})", file=sys.stderr)
        return BugResult(instance.instance_id, arm, instance.repo, NO_IMAGE, False, False, "none", "", 0.0, 0.0, 0, 0,
                         round(time.monotonic() - started, 2), False)
    with runtime:
        localizers = oracle_localizers(instance, runtime, config)
        apply_test_patch(runtime, instance)
        tests = oracle_tests(runtime, instance)
        command = oracle_command(tests.failing, tests.passing)
        start = Node(runtime.diff(), run_test_command(runtime, command, config.agent.test_timeout_s))
        request = LocalizationRequest(problem_statement=instance.problem_statement, test_output=start.outcome.output)
        fused, _ = fused_suspects(localizers, runtime, config, request)
        suspects = [s for s in fused if not is_test_path(s.path)]
        found, calls = search_arm(arm, runtime, instance.problem_statement, start, suspects, command,
                                  hang_bound(start.outcome, config.agent.test_timeout_s), config, ask, scorer)
    patch = without_test_files(found.best.patch, set(patch_gold_lines(instance.test_patch)))
    verdict = _grade(instance, patch, config, work)
    source, edit = final_source(found)
    metrics = verdict.edit if "precision" in verdict.edit else {"precision": 0.0, "recall": 0.0}
    return BugResult(instance.instance_id, arm, instance.repo, verdict.outcome, found.improved and found.best.outcome.ok,
                     verdict.resolved, source, edit, metrics["precision"], metrics["recall"], calls,
                     candidates_run(found), round(time.monotonic() - started, 2), gold_reached(suspects, instance,
                                                                                              config.search.k))


def _grade(instance: Instance, patch: str, config: Config, work: Path):
    """The official-style verdict on `patch` in a fresh box (its report folder is the row's scratch folder)."""
    from pinpoint.swebench_eval.run import grade

    verdict, _ = grade(instance, Prediction(instance.instance_id, patch, MODEL), RunLayout("repair", MODEL, work),
                       settings=config.runtime, rerun=True)
    return verdict


def gold_reached(suspects: list[Suspect], instance: Instance, k: int) -> bool:
    """Whether a line the reference fix changes is among the top-k suspect lines the search starts from."""
    gold = patch_gold_lines(instance.patch)
    return any(line in gold.get(path, set()) for path, line, _ in top_lines(suspects, k))
