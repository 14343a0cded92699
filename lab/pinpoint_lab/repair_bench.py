"""`pinpoint-lab bench repair`: how often the agent repairs HumanEvalFix bugs, with edit candidates and without.

Each bug becomes a small git repository (the buggy function as a module, its HumanEval check as a pytest test, an
issue written from the docstring and the failing check) and the agent runs on it as `fix --local --test-cmd` would:
the failing tests are given (the test-driven repair setting). Two arms from the same code: `candidates` (the
default search: edit candidates first, then the model's revisions) and `llm` (the model's revisions only). A row is
*plausible* when the repository's tests pass on the final patch and *correct* when the patched function equals the
reference fix after normalization (the same syntax tree); edit precision and recall compare the lines the patch
touches with the lines the reference changes. Rows are appended per bug, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import ast
import difflib
import json
import re
import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from pinpoint.agent.config import Config
from pinpoint.agent.nodes import fused_suspects
from pinpoint.agent.runner import default_localizers
from pinpoint.agent.search import Ask, CandidateBudget, Node, SearchResult, candidate_search, flare_refine
from pinpoint.agent.state import Task
from pinpoint.agent.test_runs import run_test_command
from pinpoint.environments import paths
from pinpoint.environments.files import jsonl_records, scratch_dir
from pinpoint.environments.local import LocalRuntime
from pinpoint.environments.runtime import Runtime
from pinpoint.localization.failing_tests import pytest_selection
from pinpoint.localization.fusion import top_lines
from pinpoint.localization.retrieval import is_test_path
from pinpoint.localization.scorer import LocalScorer
from pinpoint.localization.suspects import LocalizationRequest, Suspect
from pinpoint.swebench_eval.patches import apply_patch
from pinpoint.tools.run_tests import hang_bound

MODULE = "solution.py"
#: localization runs the bug's test through pytest (its spectrum is a signal); candidates run the same check as a
#: plain script, a tenth of pytest's start-up per run
PYTEST = f"{sys.executable} -m pytest -q -p no:cacheprovider tests"
ARMS = ("candidates", "llm")
#: both arms: a bounded first run (some bugs loop forever); FLARE as `pinpoint demo` runs it
SETTINGS = {"agent.test_timeout_s": 30.0, "search.k": 10, "search.rounds": 1, "llm.max_tokens": 128}
LLM_LINES = 3


@dataclass
class BugResult:
    """One bug under one arm: the verdicts, where the final patch came from, what it cost."""

    bug: str
    arm: str
    bug_type: str
    status: str
    plausible: bool
    correct: bool
    #: the search record of the final patch ("candidate", "flare", ...) and its edit, when a search made it
    source: str
    edit: str
    precision: float
    recall: float
    model_calls: int
    candidates_run: int
    seconds: float
    #: a reference line was among the top-k suspect lines (a miss with it was ranked too low or beyond one edit)
    localized: bool


def humanevalfix(limit: int | None = None) -> list[dict]:
    """The HumanEvalFix rows joined with their line labels, in task order."""
    root = paths.shared_data() / "humanevalfix"
    labels = {r["task_id"]: r for r in _jsonl(root / "humanevalpack_python.line_labels.jsonl")}
    rows = [{**r, "labels": labels[r["task_id"]]} for r in _jsonl(root / "humanevalpack_python.jsonl")]
    return rows[:limit] if limit else rows


def _jsonl(path: Path) -> list[dict]:
    """The cached rows; a line cut by a kill mid-write is skipped, so its bug runs again."""
    return [value for _, value, problem in jsonl_records(path.read_text()) if problem is None]


def bug_repo(dest: Path, row: dict) -> Task:
    """A git repository at `dest` holding the bug (declaration + buggy solution, the label's line numbering) and its
    check as a test; the task's issue says what the function should do and which check fails."""
    import subprocess

    (dest / "tests").mkdir(parents=True, exist_ok=True)
    (dest / MODULE).write_text(row["declaration"] + row["buggy_solution"])
    entry = row["entry_point"]
    test = "\n".join(line for line in row["test"].splitlines() if line.strip() != f"check({entry})").rstrip()
    (dest / "tests" / f"test_{entry}.py").write_text(
        f"import sys\n\nsys.path.insert(0, '.')\nfrom solution import *  # noqa: E402, F403\n\n{test}\n\n\n"
        f"def test_{entry}():\n    check({entry})\n\n\nif __name__ == '__main__':\n    test_{entry}()\n")
    git = ["git", "-c", "user.email=bench@pinpoint", "-c", "user.name=pinpoint-bench"]
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    subprocess.run(git + ["add", "-A"], cwd=dest, check=True)
    subprocess.run(git + ["commit", "-qm", "bug"], cwd=dest, check=True)
    doc = re.search(r'"""(.*?)"""', row["prompt"], re.DOTALL)
    summary = " ".join(doc.group(1).split()) if doc else ""
    check = next((line.strip() for line in row["test"].splitlines() if line.strip().startswith("assert")), "")
    problem = (f"`{entry}` in `{MODULE}` returns wrong results.\n\nWhat it should do: {summary}\n\n"
               f"This check fails: `{check}`")
    return Task(f"humanevalfix-{row['task_id'].replace('/', '-')}", problem, repo="humanevalfix",
                test_command=PYTEST)


def same_program(a: str, b: str) -> bool:
    """Equal after normalization: the same syntax tree (layout, comments and quotes aside)."""
    try:
        return ast.dump(ast.parse(a)) == ast.dump(ast.parse(b))
    except SyntaxError:
        return False


def touched_lines(before: str, after: str) -> set[int]:
    """Lines of `before` an edit changes or removes; an insertion counts as the line it goes before."""
    out: set[int] = set()
    matcher = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(), autojunk=False)
    for op, i1, i2, _, _ in matcher.get_opcodes():
        if op in {"replace", "delete"}:
            out.update(range(i1 + 1, i2 + 1))
        elif op == "insert":
            out.add(i1 + 1)
    return out


def script_command(entry: str) -> str:
    return f"{sys.executable} tests/test_{entry}.py"


def suspects_of(runtime: LocalRuntime, task: Task, config: Config, failure: str) -> list[Suspect]:
    """The fused suspects the agent's localize step would give the search (test files left out)."""
    localizers = default_localizers(runtime, config, pytest_selection(PYTEST))
    request = LocalizationRequest(problem_statement=task.problem_statement, test_output=failure)
    fused, _ = fused_suspects(localizers, runtime, config, request)
    return [s for s in fused if not is_test_path(s.path)]


def run_bug(row: dict, arm: str, config: Config, work: Path, ask: Ask | None = None,
            scorer: LocalScorer | None = None) -> BugResult:
    """One arm on one bug in a fresh repository; the final patch judged by the bug's tests and its reference.
    `ask` is the model for the llm arm (its calls are counted); `scorer` ranks the candidates' plausible patches."""
    started = time.monotonic()
    task = bug_repo(work / "repo", row)
    command = script_command(row["entry_point"])
    with LocalRuntime(work / "repo") as runtime:
        start = Node("", run_test_command(runtime, command, config.agent.test_timeout_s))
        failure = (run_test_command(runtime, PYTEST, config.agent.test_timeout_s).output if config.agent.execution
                   else start.outcome.output)
        suspects = suspects_of(runtime, task, config, failure)
        timeout = hang_bound(start.outcome, config.agent.test_timeout_s)
        found, calls = search_arm(arm, runtime, task.problem_statement, start, suspects, command, timeout, config,
                                  ask, scorer)
        apply_patch(runtime, found.best.patch)
        final = runtime.read_text(MODULE)
        plausible = run_test_command(runtime, command, config.agent.test_timeout_s).ok
    gold = set(row["labels"]["buggy_lines"]) | set(row["labels"]["insert_before_lines"])
    touched = touched_lines(row["declaration"] + row["buggy_solution"], final)
    hit = len(gold & touched)
    source, edit = final_source(found)
    return BugResult(row["task_id"], arm, row["bug_type"], "plausible" if plausible else "no plausible patch",
                     plausible, same_program(final, row["declaration"] + row["canonical_solution"]), source, edit,
                     hit / len(touched) if touched else 0.0, hit / len(gold) if gold else 0.0, calls,
                     candidates_run(found), round(time.monotonic() - started, 2),
                     suspect_hit(suspects, gold, config.search.k))


def search_arm(arm: str, runtime: Runtime, problem: str, start: Node, suspects: list[Suspect], command: str,
               timeout: float, config: Config, ask: Ask | None = None, scorer: LocalScorer | None = None
               ) -> tuple[SearchResult, int]:
    """One arm's search from `start` (edit candidates, or the model's FLARE revisions) and the model calls it made;
    every bench source runs its arms through here, so the arms mean the same on every bug set."""
    calls = [0]

    def counted(prompt: str, purpose: str, diverse: bool) -> str:
        calls[0] += 1
        return ask(prompt, purpose, diverse) if ask else ""

    if arm == "candidates":
        budget = CandidateBudget(config.search.candidate_runs, config.search.candidate_seconds,
                                 config.search.candidate_pairs, config.search.k, config.search.plausible,
                                 config.search.candidate_order)
        found = candidate_search(runtime, problem, start, suspects, test_command=command, timeout=timeout,
                                 budget=budget, scorer=scorer)
    else:
        found = flare_refine(counted, runtime, problem, start, suspects, test_command=command, timeout=timeout,
                             k=LLM_LINES, rounds=config.search.rounds, context=config.search.context_lines)
    return found, calls[0]


def final_source(found: SearchResult) -> tuple[str, str]:
    """Where the final patch came from ("candidate", "flare", ...) and its edit; ("none", "") when no search
    improved on the start."""
    chosen = next((r for r in found.candidates if found.improved and r.get("patch") == found.best.patch), {})
    return chosen.get("source") or chosen.get("origin", "none"), chosen.get("edit", chosen.get("replacement") or "")


def candidates_run(found: SearchResult) -> int:
    return sum(1 for r in found.candidates if "seconds" in r)


def suspect_hit(suspects: list[Suspect], gold: set[int], k: int) -> bool:
    """Whether a reference line is among the top-k suspect lines the search starts from."""
    return any(path == MODULE and line in gold for path, line, _ in top_lines(suspects, k))


#: one arm on one row in a scratch folder: `run_bug` (HumanEvalFix) or a SWE-bench row (repair_swebench.run_row)
RunRow = Callable[[dict, str, Config, Path, Ask | None, LocalScorer | None], BugResult]
#: a row whose box could not be had (its image did not build): left out of the rates, counted apart
NO_IMAGE = "image failed"


def bench_repair(rows: list[dict], arms: list[str], out: Path, config: Config, ask: Ask | None = None,
                 scorer: LocalScorer | None = None, progress: Callable[[str], None] = print, workers: int = 1,
                 run: RunRow = run_bug) -> dict[str, list[BugResult]]:
    """Each arm on each row (`row["task_id"]` names it; `run` runs it), one JSON line per (arm, bug) in
    `out/rows.jsonl`, appended as each bug ends; rows already there are kept. `workers` bugs run at once (their
    time is spent in test runs, outside Python)."""
    out.mkdir(parents=True, exist_ok=True)
    cache = out / "rows.jsonl"
    done = {(r["arm"], r["bug"]): BugResult(**r) for r in (_jsonl(cache) if cache.exists() else [])}
    lock = threading.Lock()
    shared = _Serialized(scorer) if scorer is not None else None

    def one(arm: str, row: dict) -> None:
        with scratch_dir("pinpoint-repair-bench-") as tmp:  # a killed run's folder goes at the next
            found = run(row, arm, config, tmp, ask, shared)  # type: ignore[arg-type]
        with lock:
            with cache.open("a") as fh:
                fh.write(json.dumps(asdict(found)) + "\n")
            done[(arm, found.bug)] = found
            progress(f"{arm} {found.bug}: {'plausible' if found.plausible else 'fail'}"
                     f"{' correct' if found.correct else ''} ({found.source} {found.edit}) {found.seconds:.0f}s")

    todo = [(arm, row) for arm in arms for row in rows if (arm, row["task_id"]) not in done]
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for future in [pool.submit(one, arm, row) for arm, row in todo]:
            future.result()
    wanted = {r["task_id"] for r in rows}
    return {arm: [r for (a, _), r in done.items() if a == arm and r.bug in wanted] for arm in arms}


class _Serialized:
    """The scorer behind a lock: bugs run in threads, the model scores one batch at a time."""

    def __init__(self, scorer: LocalScorer):
        self._scorer = scorer
        self._lock = threading.Lock()

    def score(self, *args, **kwargs):
        with self._lock:
            return self._scorer.score(*args, **kwargs)

    def score_mutants(self, *args, **kwargs):
        with self._lock:
            return self._scorer.score_mutants(*args, **kwargs)


def summary(results: list[BugResult]) -> dict:
    """Rates and medians over one arm's rows; rows without a box (the image did not build) only counted."""
    no_image = sum(r.status == NO_IMAGE for r in results)
    results = [r for r in results if r.status != NO_IMAGE]
    n = len(results)
    if not n:
        return {"bugs": 0, "no_image": no_image}
    f1 = [2 * r.precision * r.recall / (r.precision + r.recall) if r.precision + r.recall else 0.0 for r in results]
    return {"bugs": n, "plausible": sum(r.plausible for r in results) / n, "correct": sum(r.correct for r in results) / n,
            "localized": sum(r.localized for r in results) / n,
            "edit_precision": statistics.mean(r.precision for r in results),
            "edit_recall": statistics.mean(r.recall for r in results), "edit_f1": statistics.mean(f1),
            "median_seconds": statistics.median(r.seconds for r in results),
            "median_model_calls": statistics.median(r.model_calls for r in results),
            "median_candidates_run": statistics.median(r.candidates_run for r in results), "no_image": no_image}
