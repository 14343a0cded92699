"""`pinpoint rl synthesize`: RL tasks made from a working repository by breaking it, as SWE-smith makes them.

A source is a git checkout whose tests pass, and a test command that prints pytest's `-rA` summary or is sympy's
`bin/test` (a SWE-bench
row: its repository at the base commit with the reference fix and the test patch applied, its tests run by its
own image with the checkout's changes copied over /testbed; or a local repository with its own command). The tests
are run twice as they are, then once more by id with `rl/synth_trace.py`'s tracer: the tests that pass all three
times are the baseline (a flaky or unselectable test never becomes a FAIL_TO_PASS), and the trace says which
functions each one calls. Then `localization/mutations.py`'s operators edit one non-test file at a time; a mutant
runs only the baseline tests that reach its function (none: it is skipped as unreached, without a run), and is kept
when at least one of them no longer passes (the suite's outcome, normalized to pass / not pass, differs: an
equivalent mutant changes nothing and is dropped), and not when the run hangs.

A kept mutant is committed on a branch of the source's tasks repository (`pinpoint-synth/<task id>`). Its task's
gold patch is the inverse edit, FAIL_TO_PASS the broken tests, PASS_TO_PASS the rest of the baseline (a kept mutant
runs every baseline test once: see `rl/synth_trace.py`), and its problem statement names the failing tests and
their failures, never the edited file or line. A SWE-bench row's mutant becomes a row of that row's image, as
SWE-smith's tasks are: its setup patch (the reference fix and the mutant, over the non-test files) is applied in
the box before the agent starts and before a grader applies a patch, and it is graded as any row is (the official
eval script and log parser, the pooled grader). A local repository's mutant becomes a local task (`rl/tasks.py`):
its starting state that commit, its test command the source's command over both lists (exit 0 when every one
passes: the harness's PASS_AND_FAIL rule). Tasks are deduplicated by their mutant text; each has a difficulty
estimate: how many tests it breaks, and how far the edit is from what the failures print (0: its file and line
appear in a failing traceback, 1: its file does, 2: neither).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pinpoint.environments.errors import UsageError
from pinpoint.localization.mutations import mutants
from pinpoint.rl.synth_trace import EVERY, enclosing_function, parse_trace
from pinpoint.swebench_eval.datasets import Instance

#: what a test's status must be to count as passing (the official parsers' spelling)
PASSED = "PASSED"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SYMPY_VERDICT = re.compile(r"[ \t]+\[(OK|FAIL)\][ \t]*$", re.MULTILINE)
#: how many failing tests a problem statement lists, and how much of each failure it quotes
STATEMENT_TESTS, STATEMENT_CHARS = 8, 300


@dataclass(frozen=True)
class Source:
    """A repository to synthesize from: `repo` a git checkout at the commit to break (its HEAD), `test_command`
    run there with test ids or files appended, `tests` what the baseline runs, `parser` the official log parser's
    name for the repository (`parse_log_pytest` for any pytest suite), `files` the files to mutate (empty: every
    non-test Python file), `trace_command` the test command with `rl/synth_trace.py`'s plugin loaded (empty: every
    mutant runs every baseline test), `instance` the SWE-bench row it was made from."""

    name: str
    repo: str
    test_command: str
    tests: tuple[str, ...] = ()
    parser: str = "parse_log_pytest"
    files: tuple[str, ...] = ()
    trace_command: str = ""
    #: the SWE-bench row the repository is made from (its tasks are rows of its image); None: a local repository
    instance: Instance | None = None

    def selecting(self, ids: list[str]) -> list[str]:
        """The arguments that run just the tests `ids`: pytest takes ids; sympy's bin/test takes its files and
        `-k` names (a name also runs the tests it is part of: their outcome is ignored)."""
        if self.parser == "parse_log_sympy":
            return [*self.tests, "-k", *ids] if ids else list(self.tests)
        return ids


@dataclass(frozen=True)
class SynthSettings:
    """How many mutants to try, and the bound on each test run."""

    max_mutants: int = 100
    per_file: int = 30
    timeout_s: float = 300.0
    seed: int = 0
    #: stop trying new mutants of a source after this long, counted after its baseline (its tasks so far are kept)
    budget_s: float = 3600.0


@dataclass
class SynthStats:
    """What one source's synthesis did: mutants tried, kept, equivalent (no baseline test changed), unreached (no
    baseline test calls the edited function: no run), hung; whether the baseline was traced."""

    source: str
    baseline_tests: int = 0
    traced: bool = False
    tried: int = 0
    kept: int = 0
    equivalent: int = 0
    unreached: int = 0
    hung: int = 0
    duplicates: int = 0
    seconds: float = 0.0
    error: str = ""


@dataclass
class SynthResult:
    tasks: list[dict[str, Any]] = field(default_factory=list)
    stats: SynthStats | None = None


@dataclass(frozen=True)
class TestRun:
    """One run of the test command: each test's official status, and the output."""

    statuses: dict[str, str]
    output: str
    hung: bool = False
    #: passing tests the official parser does not see in the raw output (sympy's file-closing line): a whole-file
    #: run, as the official eval script's, never shows them, so they are never a row's label
    hidden: frozenset[str] = frozenset()

    def passing(self) -> set[str]:
        return {test for test, status in self.statuses.items() if status == PASSED}


def run_tests(source: Source, args: list[str], timeout_s: float, traced: bool = False) -> TestRun:
    """Run the source's test command (its trace command when `traced`) with `args` in its checkout; statuses by
    the official parser. A run over `timeout_s` is killed with its process group and reported as hung."""
    prefix = source.trace_command if traced else source.test_command
    command = " ".join([prefix, *(shlex.quote(a) for a in args)])
    env = {**os.environ, "COLUMNS": "400"}  # pytest cuts its summary lines to the terminal's width
    proc = subprocess.Popen(["bash", "-c", command], cwd=source.repo, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return TestRun({}, output, hung=True)
    output = _ANSI.sub("", output)  # sphinx's tox sets --color yes
    parse = _parser(source.parser)
    if source.parser != "parse_log_sympy":
        return TestRun(parse(output, None), output)
    # bin/test ends a file's last test line with its verdict ("test_x ok   [OK]"), which the parser skips: the
    # same test would pass or not by where it falls in a selection
    raw, output = parse(output, None), _SYMPY_VERDICT.sub("", output)
    statuses = parse(output, None)
    return TestRun(statuses, output, hidden=frozenset(t for t, v in statuses.items() if v == PASSED and t not in raw))


def _parser(name: str) -> Callable[[str, Any], dict[str, str]]:
    from swebench.harness.log_parsers import python as parsers

    parser = getattr(parsers, name, None)
    if parser is None:
        raise UsageError(f"no official log parser named {name!r}")
    return parser


@dataclass(frozen=True)
class Baseline:
    """The steady tests; the functions each calls ({"path:first line": test ids}, None when not traced); the last
    run's final output line (what to show when no test passes) and its seconds."""

    passing: list[str]
    calls: dict[str, set[str]] | None
    tail: str
    seconds: float = 0.0

    def mutant_timeout(self, timeout_s: float) -> float:
        """A mutant's run is bounded by twice the traced run of every baseline test (a mutant runs no more
        tests, untraced), at least 60 s and at most `timeout_s`: a mutant that loops costs little."""
        return min(timeout_s, max(60.0, 2 * self.seconds))


def baseline(source: Source, timeout_s: float) -> Baseline:
    """The tests that pass on every one of three runs: twice as configured, then selected by id (traced when the
    source can be)."""
    first, second = (run_tests(source, list(source.tests), timeout_s) for _ in range(2))
    # a parametrized id with a space is cut there by the log parsers: pytest cannot select what is left of it
    steady = sorted(t for t in first.passing() & second.passing() - first.hidden - second.hidden
                    if t.count("[") == t.count("]"))
    last, calls, started = second, None, time.monotonic()
    if steady:
        last = run_tests(source, source.selecting(steady), timeout_s, traced=bool(source.trace_command))
        steady = sorted(last.passing() & set(steady))
        calls = parse_trace(last.output) if source.trace_command else None
    tail = next((line.strip() for line in reversed(last.output.splitlines()) if line.strip()), "no output")
    return Baseline(steady, calls, tail[:200], time.monotonic() - started)


def reaching(base: Baseline, path: str, original: str, line: int) -> list[str]:
    """The baseline tests that can see an edit of `path` at `line`: those calling its function, or all of them
    when the baseline was not traced or the line runs at import."""
    key = enclosing_function(path, original, line)
    if base.calls is None or key is None:
        return base.passing
    callers = base.calls.get(key, set())
    if EVERY in callers:
        return base.passing
    return [test for test in base.passing if test in callers]


def candidate_files(source: Source) -> list[str]:
    """The files to mutate: the source's list, else the repository's tracked Python files outside its tests."""
    if source.files:
        return list(source.files)
    listed = _git(source.repo, "ls-files", "*.py").splitlines()
    return [path for path in listed if not is_test_path(path)]


def is_test_path(path: str) -> bool:
    parts = Path(path).parts
    name = parts[-1]
    return any(p in ("test", "tests", "testing") for p in parts[:-1]) or name.startswith("test_") or \
        name.endswith("_test.py") or name == "conftest.py"


def candidate_mutants(source: Source, settings: SynthSettings) -> Iterator[tuple[str, str, Any]]:
    """(path, original text, mutant) over the candidate files, one file after another in turn, so a small budget
    still spreads over the repository."""
    pools = []
    for index, path in enumerate(candidate_files(source)):
        text = (Path(source.repo) / path).read_text(errors="replace")
        found = mutants(text, settings.per_file, seed=settings.seed + index)
        if found:
            pools.append((path, text, found))
    while pools:
        for entry in list(pools):
            path, text, found = entry
            yield path, text, found.pop(0)
            if not found:
                pools.remove(entry)


def synthesize(source: Source, settings: SynthSettings) -> SynthResult:
    """Every kept mutant of `source` as a task row (module docstring), with what the synthesis did. Runs in the
    source's checkout, one mutant at a time, and leaves the checkout as it found it."""
    started = time.monotonic()
    stats = SynthStats(source.name)
    result = SynthResult(stats=stats)
    head = _git(source.repo, "rev-parse", "HEAD")
    base = baseline(source, settings.timeout_s)
    stats.baseline_tests, stats.traced = len(base.passing), base.calls is not None
    if not base.passing:
        stats.error = (f"no test passes steadily on the unbroken repository, selected by id (the command must print "
                       f"pytest's -rA summary; its last line: {base.tail})")
        stats.seconds = time.monotonic() - started
        return result
    seen: set[str] = set()
    trying = time.monotonic()  # the budget is for mutants: a slow suite's baseline does not use it up
    for path, original, mutant in candidate_mutants(source, settings):
        if stats.tried >= settings.max_mutants or time.monotonic() - trying > settings.budget_s:
            break
        digest = hashlib.sha256(f"{path}\0{mutant.code}".encode()).hexdigest()[:12]
        if digest in seen:
            stats.duplicates += 1
            continue
        seen.add(digest)
        stats.tried += 1
        task = _try_mutant(source, head, base, path, original, mutant, digest, settings, stats)
        if task is not None:
            result.tasks.append(task)
    stats.kept = len(result.tasks)
    stats.seconds = time.monotonic() - started
    return result


def _try_mutant(source: Source, head: str, base: Baseline, path: str, original: str, mutant: Any,
                digest: str, settings: SynthSettings, stats: SynthStats) -> dict[str, Any] | None:
    """Run the baseline tests that reach one mutant; its task row when it breaks one, else None (counted)."""
    tests = reaching(base, path, original, mutant.bug_line)
    if not tests:
        stats.unreached += 1
        return None
    file = Path(source.repo) / path
    file.write_text(mutant.code)
    try:
        run = run_tests(source, source.selecting(tests), base.mutant_timeout(settings.timeout_s))
        if run.hung:
            stats.hung += 1
            return None
        broken = [test for test in tests if run.statuses.get(test) != PASSED]
        if broken and len(tests) < len(base.passing):  # the labels come from every baseline test (synth_trace.py)
            run = run_tests(source, source.selecting(base.passing), base.mutant_timeout(settings.timeout_s))
            broken = [test for test in base.passing if run.statuses.get(test) != PASSED]
            if run.hung:
                stats.hung += 1
                return None
        if not broken:
            stats.equivalent += 1
            return None
        task_id = f"{source.name}.synth-{digest}"
        commit = _commit_branch(source.repo, head, path, f"pinpoint-synth/{task_id}")
    finally:
        file.write_text(original)
    kept = [test for test in base.passing if test not in broken]
    statement, gold = problem_statement(broken, run.output), inverse_patch(path, mutant.code, original)
    synthesis = {"source": source.name, "operator": mutant.operator, "file": path, "line": mutant.bug_line,
                 "tests_broken": len(broken), "tests_run": len(tests),
                 "distance": distance(path, mutant.bug_line, run.output)}
    if source.instance is not None:
        setup = setup_patch(source.repo, source.instance, commit)
        return synthesized_row(source.instance, task_id, setup, gold, statement, broken, kept, synthesis)
    args = source.selecting(broken + kept)
    return {"task_id": task_id, "repo_path": source.repo, "base_commit": commit,
            "test_command": " ".join([source.test_command, *(shlex.quote(a) for a in args)]),
            "problem_statement": statement, "gold_patch": gold, "FAIL_TO_PASS": broken, "PASS_TO_PASS": kept,
            "synthesis": synthesis}


def setup_patch(repo: str, instance: Instance, commit: str) -> str:
    """The diff from the row's base commit to `commit` over the files its test patch leaves alone (the reference
    fix and the mutant): the test files come from the test patch, as the official eval script applies it."""
    tests = sorted({path for pair in re.findall(r"^diff --git a/(\S+) b/(\S+)", instance.test_patch, re.MULTILINE)
                    for path in pair})
    args = ["diff", "--binary", "--no-renames", instance.base_commit, commit, "--", ".",
            *(f":(exclude,literal){path}" for path in tests)]
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if proc.returncode != 0:
        raise UsageError(f"git diff in {repo}: {proc.stderr.strip()[:300]}")
    return proc.stdout  # not stripped: a patch may end with a blank context line (one space)


def synthesized_row(instance: Instance, task_id: str, setup: str, gold: str, statement: str, broken: list[str],
                    kept: list[str], synthesis: dict[str, Any]) -> dict[str, Any]:
    """A SWE-bench row of the source row's repository, version, base commit and environment (so its image), whose
    setup patch makes the broken state and whose gold patch undoes the mutant: graded as any row is."""
    row = dataclasses.replace(instance, instance_id=task_id, patch=gold, FAIL_TO_PASS=tuple(broken),
                              PASS_TO_PASS=tuple(kept), problem_statement=statement, hints_text="",
                              setup_patch=setup, extra={"synthesis": synthesis})
    return row.to_row()


def inverse_patch(path: str, mutant: str, original: str) -> str:
    """The git-style diff that turns the mutant back into the original: the task's gold patch."""
    lines = difflib.unified_diff(mutant.splitlines(keepends=True), original.splitlines(keepends=True),
                                 f"a/{path}", f"b/{path}")
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


def problem_statement(broken: list[str], output: str) -> str:
    """What a user reporting the failures would write: the failing tests and how each fails (pytest's short
    summary line), nothing about where the fault is."""
    reasons = _traceback_errors(output)
    for line in output.splitlines():
        for prefix in ("FAILED ", "ERROR "):
            if line.startswith(prefix) and " - " in line:
                test, reason = line[len(prefix):].split(" - ", 1)
                if not reason.rstrip().endswith("..."):  # pytest cuts summary lines at the terminal's width
                    reasons[test.strip()] = reason.strip()[:STATEMENT_CHARS]
    shown = broken[:STATEMENT_TESTS]
    lines = [f"- {test}: {reasons.get(test) or reasons.get(_headline(test)) or 'fails (no message)'}"
             for test in shown]
    more = f"\n... and {len(broken) - len(shown)} more failing test(s)." if len(broken) > len(shown) else ""
    return ("These tests used to pass and now fail:\n" + "\n".join(lines) + more +
            "\n\nFix the code so that they pass again, without changing the tests.")


def _headline(test: str) -> str:
    """How pytest titles a test's traceback section: `Class.test_name` for `file.py::Class::test_name`."""
    return ".".join(test.split("::")[1:]) or test


def _traceback_errors(output: str) -> dict[str, str]:
    """Each traceback section's error, by the section's title (pytest's `Class.test`, sympy's `file.py:test`): its
    first `E   ...` line (pytest), else its last line (a plain Python traceback, as sympy's bin/test prints)."""
    errors: dict[str, str] = {}
    last: dict[str, str] = {}
    title = ""
    for line in output.splitlines():
        header = re.fullmatch(r"_{3,} (.+?) _{3,}", line.strip())
        if header:
            title = header.group(1)
        elif not line.strip("_ \t"):
            continue
        elif line.startswith("="):  # a summary: pytest's "==== ... ====", sympy's "= tests finished: ... ="
            title = ""
        elif title and line.startswith("E ") and title not in errors:
            errors[title] = line[1:].strip()[:STATEMENT_CHARS]
        elif title and line.strip():
            last[title] = line.strip()[:STATEMENT_CHARS]
    for title, line in last.items():
        errors.setdefault(title, line)
        errors.setdefault(title.rsplit(":", 1)[-1], errors[title])  # sympy's ids are the test's name
    return errors


def distance(path: str, line: int, output: str) -> int:
    """How far the edit is from what the failures print: 0 its file and line, 1 its file, 2 neither."""
    if f"{path}:{line}" in output:
        return 0
    return 1 if path in output else 2


def _commit_branch(repo: str, base: str, path: str, branch: str) -> str:
    """Commit the working copy of `path` on top of `base` as `branch`, without moving HEAD or the index."""
    env = {**os.environ, "GIT_INDEX_FILE": str(Path(repo) / ".git" / "pinpoint-synth-index"),
           "GIT_AUTHOR_NAME": "pinpoint", "GIT_AUTHOR_EMAIL": "pinpoint@localhost",
           "GIT_COMMITTER_NAME": "pinpoint", "GIT_COMMITTER_EMAIL": "pinpoint@localhost"}
    _git(repo, "read-tree", base, env=env)
    _git(repo, "add", "--", path, env=env)
    tree = _git(repo, "write-tree", env=env)
    commit = _git(repo, "commit-tree", tree, "-p", base, "-m", f"synthesized bug {branch}", env=env)
    _git(repo, "update-ref", f"refs/heads/{branch}", commit)
    return commit


def _git(repo: str, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise UsageError(f"git {' '.join(args[:2])} in {repo}: {proc.stderr.strip()[:300]}")
    return proc.stdout.strip()


def verify_task(task: dict[str, Any], work_dir: Path, timeout_s: float = 600.0) -> tuple[bool, bool]:
    """(the empty patch fails, the gold patch passes) for a synthesized task, each on a fresh checkout of its
    starting commit with its own test command: what grading it gives a model that does nothing or the right fix."""
    verdicts = []
    for patch in ("", task["gold_patch"]):
        tree = work_dir / f"{task['task_id']}-{'gold' if patch else 'empty'}"
        _git(str(work_dir), "clone", "-q", "--no-checkout", task["repo_path"], str(tree))
        _git(str(tree), "checkout", "-q", task["base_commit"])
        if patch:
            subprocess.run(["git", "apply", "-"], cwd=tree, input=patch, text=True, check=True, capture_output=True)
        proc = subprocess.run(["bash", "-c", task["test_command"]], cwd=tree, capture_output=True,
                              timeout=timeout_s)
        verdicts.append(proc.returncode == 0)
    return not verdicts[0], verdicts[1]
