"""Execution evidence from a repository's own tests, collected inside its runtime: per-test line coverage, the
failures' deepest frames and, for chosen functions, LDB block states; and the coverage spectrum (Ochiai, DStar)
ranked to lines, functions and files.

The tests run under `trace_runner.py`, a standalone script copied outside the repository with the rules it shares
with the host (`spectrum_rules.py`; both run with the repository's Python, 3.9 or 3.11) that traces only each test's call phase with assertion
rewriting off: a tracer left on through setup and teardown ranks pytest's failure reporting and the repository's own
`__repr__` first, because only failing tests run them (`../shared/DESIGN.md`, "Spectra of SWE-bench tests have a
trap"). Its results come back as JSON lines written as each test ends, so a timeout or a crash keeps what finished.
"""

from __future__ import annotations

import json
import shlex
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pinpoint.environments.runtime import Runtime
from pinpoint.localization.blocks import (
    Block,
    FunctionBlocks,
    FunctionSpan,
    function_spans,
    innermost_function,
)
from pinpoint.localization.spectrum_rules import FAILING, covers, line_spectrum, spread_evenly
from pinpoint.localization.suspects import LocalizationRequest, Suspect

TRACE_RUNNER = Path(__file__).with_name("trace_runner.py")
#: the rules the runner shares with the host, copied beside it
SPECTRUM_RULES = Path(__file__).with_name("spectrum_rules.py")
#: the function spans and basic blocks, shipped beside the runner (standard library only) for its LDB phase
BLOCKS_MODULE = Path(__file__).with_name("blocks.py")
#: the interpreter of SWE-bench instance images (`swebench_eval.scripts.env_script` links `python` to the one the
#: spec's packages went into) and of most virtualenvs; a LocalRuntime on the host passes `sys.executable`
DEFAULT_PYTHON = "python"


def ship_runner(runtime: Runtime, folder: str) -> None:
    """Copy the trace runner and the rules it imports into `folder` (outside the tree), to run there as a script."""
    for path in (TRACE_RUNNER, SPECTRUM_RULES):
        runtime.write_file(f"{folder}/{path.name}", path.read_text())
#: as `swebench_eval.scripts.EVAL_ENV` pins for the graded run, so traced tests see what grading sees (a copy of its
#: interpreter settings, pinned to it by tests/test_localization_execution.py)
RUN_ENV = {"TZ": "UTC", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}


@dataclass(frozen=True)
class Frame:
    path: str
    line: int
    function: str


@dataclass(frozen=True)
class BlockStep:
    """The locals (reprs) after one executed block, the names it set or changed, and `returned` (or `raised`) when
    the call returned (or raised) from it."""

    block: int
    state: dict[str, str]
    returned: str | None = None
    changed: tuple[str, ...] = ()
    raised: str | None = None


@dataclass(frozen=True)
class CallTrace:
    """One call of a traced function: its first and last block steps (`omitted` in between), the last exception
    that passed through it."""

    call: int
    steps: tuple[BlockStep, ...]
    omitted: int = 0
    raised: str | None = None


@dataclass(frozen=True)
class FunctionTrace:
    """A traced function within one test: how often it ran, which blocks ran at all, the kept calls."""

    calls: int
    executed: frozenset[int]
    traces: tuple[CallTrace, ...]


@dataclass(frozen=True)
class TracedTest:
    nodeid: str
    outcome: str
    message: str = ""
    duration_s: float = 0.0
    #: CPU seconds of the runner's process while it ran (what the budget counts; wall time grows with the load)
    cpu_s: float = 0.0
    lines: dict[str, frozenset[int]] = field(default_factory=dict)
    frames: tuple[Frame, ...] = ()
    blocks: dict[str, FunctionTrace] = field(default_factory=dict)
    #: the last distinct repository lines the test ran, the most recent first (a failure's neighbourhood)
    recent: tuple[tuple[str, int], ...] = ()

    @property
    def failed(self) -> bool:
        return self.outcome in FAILING

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"


@dataclass
class ExecutionEvidence:
    """What one traced run of tests produced. `status`: finished, error (the runner or pytest stopped; `error` says
    why), or killed (the whole run passed its time limit; the tests that finished are kept).

    With `expected_failing` set, only those tests count as failing runs: a test sampled as passing that fails here
    (one that needs the network, say) fails for reasons of its own, not the bug's, and is left out of the spectrum
    (`unexpected_failures`)."""

    tests: list[TracedTest]
    status: str
    error: str = ""
    python: str = ""
    pytest: str = ""
    seconds: float = 0.0
    log_tail: str = ""
    requested: list[str] = field(default_factory=list)
    functions: dict[str, FunctionBlocks] = field(default_factory=dict)
    expected_failing: list[str] | None = None
    #: the LDB phase of the same run (`run_traced(ldb_top=)`): the targets' block states, None where it chose none
    block_traces: ExecutionEvidence | None = None
    #: passing candidates the coverage pre-pass ran (`select="coverage"`), and of those how many entered a function
    #: the failing tests ran
    screened: int = 0
    screened_entering: int = 0
    #: the run's wall seconds as pinpoint saw them (writing the runner's files, the box's exec, the interpreter's
    #: start, reading the results back), and the part of them outside the runner's own clock (`seconds`)
    wall_s: float = 0.0
    outside_s: float = 0.0

    def _expected(self, test: TracedTest) -> bool:
        wanted = self.expected_failing
        return wanted is None or any(covers(w, test.nodeid) for w in wanted)

    @property
    def failing(self) -> list[TracedTest]:
        return [t for t in self.tests if t.failed and self._expected(t)]

    @property
    def unexpected_failures(self) -> list[TracedTest]:
        return [t for t in self.tests if t.failed and not self._expected(t)]

    @property
    def passing(self) -> list[TracedTest]:
        return [t for t in self.tests if t.passed]

    def outcome(self, nodeid: str) -> str | None:
        return next((t.outcome for t in self.tests if t.nodeid == nodeid), None)

    def summary(self) -> str:
        """One line for logs and trajectories."""
        counts: dict[str, int] = {}
        for t in self.tests:
            counts[t.outcome] = counts.get(t.outcome, 0) + 1
        parts = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        cpu = sum(t.cpu_s for t in self.tests)
        cpu_part = f" ({cpu:.1f} CPU s in tests)" if cpu else ""
        tail = f"; {self.error.splitlines()[-1][:200]}" if self.error.strip() else ""
        screen = (f" ({self.screened} passing candidates screened, {self.screened_entering} entering the failing "
                  "tests' functions)" if self.screened else "")
        return (f"{len(self.tests)} tests traced ({parts or 'none'}){screen} in {self.seconds:.1f}s{cpu_part}, "
                f"{self.status}{tail}")


# -- running the tracer -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TraceLimits:
    """The runner's budget rules past `budget_s` and `per_test_timeout` (`trace_runner.Budget`): CPU seconds, so
    a loaded machine traces the same tests as a quiet one. The passing tests get `passing_share` of the failing
    phase's CPU seconds (at least `passing_floor_s`); one is not started once less than `start_share` of the median
    passing test is left; `per_test_wall_s`: a fixed wall cap per test (None: 10x its CPU limit, 10 s to twice
    `per_test_timeout`)."""

    passing_share: float = 1.0
    passing_floor_s: float = 10.0
    start_share: float = 0.5
    per_test_wall_s: float | None = None


#: the traced run's wall budget where the failing tests' own run is known: this many times it, plus FIT_SLACK_S
FIT_FACTOR = 3.0
FIT_SLACK_S = 30.0
#: of that budget, kept back for what follows the runner's last test: the teardown of a test stopped in flight, the
#: LDB targets' choice, the session's end and the caller's ranking of the evidence (on the five rows over budget,
#: load ~2: up to 0.9 s past the runner's budget, then 1.0-2.5 s of ranking)
FIT_RESERVE_S = 5.0


@dataclass(frozen=True)
class OwnRun:
    """The failing tests' own untraced run, as `own_run` measures it: `seconds` of wall as the caller saw them, of
    which `outside_s` lay outside the trace runner's clock (the files written, the box's exec, the interpreter's
    start, the results read back): what a traced run pays again outside the clock its budget runs on."""

    seconds: float
    outside_s: float

    def fit_s(self, factor: float = FIT_FACTOR, slack_s: float = FIT_SLACK_S,
              reserve_s: float = FIT_RESERVE_S) -> float:
        """The traced run's wall budget on the runner's clock: `factor` x the own run + `slack_s`, less what the
        traced run pays outside that clock and `reserve_s` for what follows its last test, so the whole run and
        its ranking fit `factor` x + `slack_s` as the caller sees them."""
        return max(factor * self.seconds + slack_s - self.outside_s - reserve_s, 0.0)


def own_run(runtime: Runtime, failing: Sequence[str], *, python: str = DEFAULT_PYTHON,
            pytest_args: Sequence[str] = (), budget_s: float = 300.0) -> OwnRun:
    """Time the failing tests alone, untraced, in `runtime` (interpreter start and collection included): the
    baseline a traced run's fitted budget follows."""
    began = time.monotonic()
    evidence = run_traced(runtime, failing, failing=failing, budget_s=budget_s, python=python,
                          pytest_args=pytest_args, trace=False)
    return OwnRun(round(time.monotonic() - began, 2), evidence.outside_s)


def run_traced(
    runtime: Runtime,
    tests: Sequence[str],
    *,
    targets: Sequence[FunctionBlocks] = (),
    failing: Sequence[str] | None = None,
    budget_s: float = 300.0,
    per_test_timeout: float = 60.0,
    python: str = DEFAULT_PYTHON,
    pytest_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    trace: bool = True,
    ldb_top: int = 0,
    ldb_passing: int = 10,
    select: int = 0,
    limits: TraceLimits = TraceLimits(),
    fit_s: float | None = None,
) -> ExecutionEvidence:
    """Run pytest ids in `runtime` under the trace runner; never writes into the repository (all of it goes to a
    fresh folder under /tmp, removed afterwards). `failing`: the tests expected to fail (see ExecutionEvidence;
    the other tests trace only the code those ran). `trace` false: outcomes only, nothing traced. `ldb_top`: the
    same interpreter then traces the block states of the spectrum's top functions in the failing tests and up to
    `ldb_passing` passing tests that ran one (`block_traces`; what `ldb.trace_targets` and `collect_block_traces`
    would choose, without a second interpreter's start, imports and collection). `select`: the tests after the
    failing ones are candidates, screened (a call-level pre-pass) and this many of them traced as the passing
    tests, chosen by the failing tests' functions they enter (the runner's `choose_by_coverage`). `limits`: the
    budget's rules (`TraceLimits`); `per_test_timeout` is each test's CPU limit. `fit_s`: the fitted wall budget on
    the runner's clock (`OwnRun.fit_s`) the passing tests and the LDB phase stop at (the runner's `Budget`)."""
    began = time.monotonic()
    folder = f"{runtime.scratch_dir}/trace-{uuid.uuid4().hex[:12]}"  # outside the tree, the runtime's own
    options = {"root": runtime.workdir, "tests": list(tests), "output": f"{folder}/results.jsonl",
               "budget_s": budget_s, "per_test_timeout": per_test_timeout, "pytest_args": list(pytest_args),
               "targets": [t.to_json() for t in targets], "failing": list(failing) if failing else None,
               "trace": trace, "fit_s": fit_s, **asdict(limits)}
    if select and trace and failing:
        options.update(select="coverage", max_passing=select)
    ship_runner(runtime, folder)
    if ldb_top and trace and failing:
        options["ldb"] = {"top": ldb_top, "max_passing": ldb_passing, "blocks": f"{folder}/pinpoint_blocks.py"}
        runtime.write_file(f"{folder}/pinpoint_blocks.py", BLOCKS_MODULE.read_text())
    runtime.write_file(f"{folder}/input.json", json.dumps(options))
    command = (f"{python} {folder}/trace_runner.py {folder}/input.json > {folder}/log.txt 2>&1; "
               f"echo \"pinpoint-trace-exit $?\"; tail -c 3000 {folder}/log.txt")
    # the runner stops itself at the budget between tests (the LDB phase has one of its own); this limit only
    # catches a test that ignores its timers
    limit = budget_s * (2 if "ldb" in options else 1) + per_test_timeout + 60.0
    result = runtime.run(command, timeout=limit, env={**RUN_ENV, **(env or {})})
    try:
        raw = runtime.read_text(f"{folder}/results.jsonl")
    except (FileNotFoundError, OSError):
        raw = ""
    runtime.run(f"rm -rf {shlex.quote(folder)}", timeout=60)
    evidence = parse_results(raw, requested=list(tests), log_tail=result.output[-3000:], failing=failing)
    evidence.wall_s = round(time.monotonic() - began, 3)
    inside = evidence.seconds + (evidence.block_traces.seconds if evidence.block_traces is not None else 0.0)
    evidence.outside_s = round(max(evidence.wall_s - inside, 0.0), 3)
    evidence.functions = {t.key: t for t in targets}
    evidence.expected_failing = list(failing) if failing is not None else None
    for part in (evidence, evidence.block_traces):
        if part is not None and result.timed_out:
            part.status, part.error = "killed", f"the traced run passed its limit of {limit:g}s"
        if part is not None:
            _mark_missing(part)
    return evidence


def parse_results(raw: str, requested: list[str], log_tail: str = "",
                  failing: Sequence[str] | None = None) -> ExecutionEvidence:
    """The runner's JSON lines as typed evidence, its LDB phase's as `block_traces`; a truncated last line (a
    killed run) is skipped. `failing`: the requested failing ids (with a coverage pre-pass, they and the chosen
    candidates are what was meant to run traced)."""
    evidence = ExecutionEvidence(tests=[], status="error", requested=requested, log_tail=log_tail,
                                 error="the trace runner wrote nothing (see log_tail)")
    ldb: ExecutionEvidence | None = None
    for line in raw.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        kind = record.get("kind")
        if kind == "start":
            evidence.python, evidence.error = record.get("python", ""), "the trace runner stopped early (see log_tail)"
        elif kind == "test":
            (ldb if record.get("phase") == "ldb" and ldb is not None else evidence).tests.append(_test_run(record))
        elif kind == "ldb" and record.get("targets") and record.get("failing"):
            ldb = _ldb_phase(record, evidence, log_tail)
        elif kind == "screen":
            evidence.screened += 1
            evidence.screened_entering += record.get("entered", 0) > 0
        elif kind == "chosen":  # the candidates not chosen were never meant to run traced
            chosen = set(record["tests"]) | set(failing or ())
            evidence.requested = [t for t in requested if t in chosen]
        elif kind == "end":
            for part in (evidence, ldb):
                if part is not None:
                    part.status, part.error = record.get("status", "error"), record.get("error", "")
                    part.pytest = record.get("pytest", "")
            evidence.seconds = float(record.get("seconds", 0.0))
            if ldb is not None:
                ldb.seconds, evidence.seconds = round(evidence.seconds - ldb.seconds, 3), ldb.seconds
    evidence.block_traces = ldb
    return evidence


def _ldb_phase(record: dict, spectrum: ExecutionEvidence, log_tail: str) -> ExecutionEvidence:
    """The LDB phase's evidence from its `ldb` record: the targets it chose, the tests it runs; `seconds` holds
    when it began until the run's end is read."""
    functions = [FunctionBlocks(t["path"], FunctionSpan(t["qualname"], t["first_line"], t["def_line"], t["end_line"]),
                                tuple(Block(*b) for b in t["blocks"])) for t in record["targets"]]
    failing = list(record["failing"])
    return ExecutionEvidence(tests=[], status="error", error="the trace runner stopped in its LDB phase",
                             python=spectrum.python, seconds=float(record.get("at", 0.0)), log_tail=log_tail,
                             requested=failing + list(record.get("passing", [])),
                             functions={f.key: f for f in functions}, expected_failing=failing)


def _test_run(record: dict) -> TracedTest:
    blocks = {}
    for key, raw in (record.get("blocks") or {}).items():
        traces = tuple(
            CallTrace(c["call"], tuple(BlockStep(s["block"], dict(s.get("state", {})), s.get("return"),
                                                 tuple(s.get("changed", ())), s.get("raised"))
                                       for s in c.get("steps", [])),
                      c.get("omitted", 0), c.get("raised"))
            for c in raw.get("traces", []))
        blocks[key] = FunctionTrace(raw.get("calls", 0), frozenset(raw.get("executed", [])), traces)
    return TracedTest(
        nodeid=record["nodeid"], outcome=record.get("outcome", "error"), message=record.get("message", ""),
        duration_s=float(record.get("duration_s", 0.0)), cpu_s=float(record.get("cpu_s", 0.0)),
        lines={path: frozenset(lines) for path, lines in (record.get("lines") or {}).items()},
        frames=tuple(Frame(p, int(n), f) for p, n, f in record.get("frames", [])), blocks=blocks,
        recent=tuple((p, int(n)) for p, n in record.get("recent", [])))


def _mark_missing(evidence: ExecutionEvidence) -> None:
    """Requested tests the runner never reported (it was killed, or crashed) are `not_run`, saying why."""
    seen = {t.nodeid for t in evidence.tests}
    why = evidence.error or "the trace runner stopped before it"
    for nodeid in evidence.requested:
        if not any(covers(nodeid, s) for s in seen):
            evidence.tests.append(TracedTest(nodeid, "not_run", message=why))


def sample_passing(failing: Sequence[str], passing: Iterable[str], limit: int = 40) -> list[str]:
    """At most `limit` passing tests, those in the failing tests' files first, spread evenly over each group
    (not the first N: one class of a file would say little about the rest of it)."""
    failing_set = set(failing)
    files = {t.split("::", 1)[0] for t in failing}
    candidates = sorted({t for t in passing if t not in failing_set})
    same = [t for t in candidates if t.split("::", 1)[0] in files]
    other = [t for t in candidates if t.split("::", 1)[0] not in files]
    chosen = spread_evenly(same, limit)
    return chosen + spread_evenly(other, limit - len(chosen))


def qualify_test_ids(names: Sequence[str], files: dict[str, str]) -> list[str]:
    """pytest ids for bare test names (sympy's FAIL_TO_PASS lists `test_issue_123`): `file::name` or
    `file::Class::name`, looked up in `files` (path -> text, e.g. the test patch's files); other ids pass as given."""
    where: dict[str, str] = {}
    for path, text in files.items():
        for span in _spans_or_none(text):
            where.setdefault(span.name, f"{path}::{span.qualname.replace('.', '::')}")
    return [name if "::" in name or "/" in name else where.get(name, name) for name in names]


def _spans_or_none(text: str) -> list[FunctionSpan]:
    try:
        return function_spans(text)
    except SyntaxError:
        return []


def collect_spectrum(
    runtime: Runtime,
    failing: Sequence[str],
    passing: Sequence[str],
    *,
    budget_s: float = 300.0,
    max_passing: int = 40,
    per_test_timeout: float = 60.0,
    python: str = DEFAULT_PYTHON,
    pytest_args: Sequence[str] = (),
    ldb_top: int = 0,
    select: str = "file",
    fit_s: float | None = None,
) -> ExecutionEvidence:
    """Run the failing tests and a bounded sample of the passing ones with per-test coverage (failing tests first,
    so a budget that runs out still leaves them); `ldb_top`: then, in the same interpreter, the block states of
    the spectrum's top functions (`block_traces`). `select`: how the `max_passing` passing tests are chosen:
    `file` (the failing tests' files first, spread evenly) or `coverage` (up to `SCREENED` candidates, sampled so,
    screened in the box by the failing tests' functions they enter). `fit_s`: the fitted wall budget (`run_traced`)."""
    if select not in ("file", "coverage"):
        raise ValueError(f"select must be 'file' or 'coverage', got {select!r}")
    pool = SCREENED if select == "coverage" else max_passing
    tests = list(dict.fromkeys(failing)) + sample_passing(failing, passing, pool)
    return run_traced(runtime, tests, failing=failing, budget_s=budget_s, per_test_timeout=per_test_timeout,
                      python=python, pytest_args=pytest_args, ldb_top=ldb_top,
                      select=max_passing if select == "coverage" else 0, fit_s=fit_s)


#: the most passing candidates the coverage pre-pass screens
SCREENED = 200


# -- the coverage spectrum -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LineScore:
    """A line's spectrum: run by `ef` of `failed` failing and `ep` of `passed` passing tests; `score` is the chosen
    formula's value, the other formula breaks its ties."""

    path: str
    line: int
    score: float
    ochiai: float
    dstar: float
    ef: int
    ep: int
    failed: int
    passed: int
    #: how close to its end a failing test last ran the line (0 = the last line it ran; None: not among the recent)
    recency: int | None = None

    def evidence(self) -> str:
        return (f"run by {self.ef}/{self.failed} failing, {self.ep}/{self.passed} passing tests "
                f"(ochiai {self.ochiai:.2f}, dstar {self.dstar:.2f})")


def rank_lines(evidence: ExecutionEvidence, formula: str = "ochiai", include_tests: bool = False) -> list[LineScore]:
    """Every line some failing test ran, best first. Test files are left out unless `include_tests`: the fix is in
    the code under test, and the failing test's own lines are run by it alone."""
    if formula not in ("ochiai", "dstar"):
        raise ValueError(f"formula must be 'ochiai' or 'dstar', got {formula!r}")
    failing, passing = evidence.failing, evidence.passing
    rows = line_spectrum([(t.lines, t.recent) for t in failing], [(t.lines, ()) for t in passing], formula,
                         include_tests)
    return [LineScore(path, line, score, o, d, ef, ep, len(failing), len(passing), recency)
            for path, line, score, o, d, ef, ep, recency in rows]


@dataclass(frozen=True)
class FunctionScore:
    """A function's (or, with `span` None, a module's top level) best line."""

    path: str
    span: FunctionSpan | None
    best: LineScore

    @property
    def score(self) -> float:
        return self.best.score

    @property
    def name(self) -> str:
        return self.span.qualname if self.span else "<module>"


class Sources:
    """Repository files read once through a runtime (or given), for the function spans lines lift to."""

    def __init__(self, runtime: Runtime | None = None, files: dict[str, str] | None = None) -> None:
        self.runtime = runtime
        self.texts = dict(files or {})
        self.spans: dict[str, list[FunctionSpan]] = {}
        self.holders: dict[tuple[str, int], FunctionSpan | None] = {}

    def text(self, path: str) -> str | None:
        if path not in self.texts and self.runtime is not None:
            try:
                self.texts[path] = self.runtime.read_text(path)
            except (FileNotFoundError, OSError):
                return None
        return self.texts.get(path)

    def functions(self, path: str) -> list[FunctionSpan]:
        if path not in self.spans:
            self.spans[path] = _spans_or_none(self.text(path) or "")
        return self.spans[path]

    def innermost(self, path: str, line: int) -> FunctionSpan | None:
        """The narrowest function holding `line`, looked up once per line (every ranking of a row asks again)."""
        if (path, line) not in self.holders:
            self.holders[(path, line)] = innermost_function(self.functions(path), line)
        return self.holders[(path, line)]


def rank_functions(lines: Sequence[LineScore], sources: Sources, limit: int | None = None) -> list[FunctionScore]:
    """Lines lifted to their innermost function: a function scores as its best line (`lines` is sorted); stops
    after `limit` functions, so only the files they are in are read."""
    best: dict[tuple[str, str], FunctionScore] = {}
    for score in lines:
        if limit is not None and len(best) >= limit:
            break
        span = sources.innermost(score.path, score.line)
        key = (score.path, span.qualname if span else "<module>")
        if key not in best:
            best[key] = FunctionScore(score.path, span, score)
    return list(best.values())


def rank_files(lines: Sequence[LineScore]) -> list[tuple[str, float]]:
    """Files by their best line, best first (`lines` is sorted)."""
    best: dict[str, float] = {}
    for s in lines:
        best.setdefault(s.path, s.score)
    return list(best.items())


def spectrum_suspects(evidence: ExecutionEvidence, sources: Sources, formula: str = "ochiai",
                      max_lines: int = 30, max_functions: int = 10) -> list[Suspect]:
    """Line suspects and their functions' spans in one list by score (a function right after its best line), so a
    line another signal finds inside a suspicious function inherits the function's rank in fusion."""
    lines = rank_lines(evidence, formula)
    deepest = {(f.path, f.line) for t in evidence.failing for f in t.frames[-3:]}
    ranked: list[tuple[float, int, Suspect]] = []
    for order, s in enumerate(lines[:max_lines]):
        note = "; in a failing test's deepest frames" if (s.path, s.line) in deepest else ""
        ranked.append((-s.score, 2 * order, Suspect(s.path, s.line, s.line, s.score, "spectrum", s.evidence() + note)))
    for function in rank_functions(lines, sources, max_functions):
        if function.span is None:
            continue
        order = 2 * lines.index(function.best) + 1
        ranked.append((-function.score, order, Suspect(
            function.path, function.span.def_line, function.span.end_line, function.score, "spectrum",
            f"{function.name}: best line {function.best.line}, {function.best.evidence()}")))
    ranked.sort(key=lambda r: (r[0], r[1]))
    return [r[2] for r in ranked]


class SpectrumLocalizer:
    """The `spectrum` signal over evidence collected beforehand (`collect_spectrum`)."""

    name = "spectrum"

    def __init__(self, evidence: ExecutionEvidence, runtime: Runtime | None = None, formula: str = "ochiai",
                 max_lines: int = 30, max_functions: int = 10) -> None:
        self.evidence = evidence
        self.runtime = runtime
        self.formula = formula
        self.max_lines = max_lines
        self.max_functions = max_functions

    def localize(self, request: LocalizationRequest) -> list[Suspect]:
        sources = Sources(self.runtime, request.files)
        return spectrum_suspects(self.evidence, sources, self.formula, self.max_lines, self.max_functions)
