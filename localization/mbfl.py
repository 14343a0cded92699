"""Targeted mutation-based localization (Metallaxis and MUSE) at the spectrum's top lines.

Mutants come from `localization/mutations.py`'s operators, only at the top N lines of the coverage spectrum. Each runs,
in the instance's box, against the failing tests and the passing tests that cover its line, under the trace runner's
mutation mode (`trace_runner.py`, `"mode": "mutants"`: tests loaded once, one forked child per mutant with one
function's code object swapped, early stop after a passing test is killed, a per-mutant timeout). Outcomes compare
as (passed, exception type, normalized message), never raw text, so an address in a message kills nothing.

Scores per line: Metallaxis (Papadakis & Le Traon), the best of its mutants' Ochiai over kills, and MUSE (Moon et
al.), failing tests a mutant makes pass minus passing tests it makes fail, each normalized over all mutants. Results
are cached by (file hash, line, operator, edit, tests), so a second run of the same row runs nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import shlex
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pinpoint.environments import paths
from pinpoint.environments.runtime import Runtime
from pinpoint.localization.execution import (
    DEFAULT_PYTHON,
    RUN_ENV,
    ExecutionEvidence,
    LineScore,
    Sources,
    rank_lines,
    ship_runner,
)
from pinpoint.localization.fusion import split_ties
from pinpoint.localization.mutations import OPERATORS, Source
from pinpoint.localization.spectrum_rules import FAILING, covers, normalize_message, spread_evenly
from pinpoint.localization.suspects import LocalizationRequest, Suspect

__all__ = ["normalize_message", "MbflConfig", "PlannedMutant", "TestOutcome", "MutantResult", "LineMbfl",
           "plan_mutants", "run_mutants", "failing_ids", "outcome_changes", "line_scores", "mbfl_suspects",
           "tie_break", "MbflLocalizer"]


@dataclass(frozen=True)
class MbflConfig:
    """The budget: mutants at the spectrum's top `top_lines` lines, `per_line` each, their cost bounded by
    `3 x the failing tests' own run + slack_s` unless `budget_s` is given."""

    top_lines: int = 60
    per_line: int = 2
    max_passing: int = 8
    stop_after_kills: int = 1
    slack_s: float = 45.0
    budget_s: float | None = None
    seed: int = 0
    #: where results are cached (None: not cached); `$PINPOINT_CACHE/mbfl` by default, resolved when made
    cache_dir: Path | None = field(default_factory=lambda: paths.cache_dir() / "mbfl")
    #: also fuse `mbfl` as a member (at half weight: `fusion.FusionRule()`), besides splitting the spectrum's ties:
    #: the fusion chosen leave one repository out on 32 dev rows (docs/localization.md, "Choosing the fusion")
    fuse_member: bool = True


@dataclass(frozen=True)
class PlannedMutant:
    """One edit `[start, end) -> replacement` of `path` at `line`; `file_hash` is the unmutated file's sha256."""

    path: str
    line: int
    operator: str
    start: int
    end: int
    replacement: str
    file_hash: str

    @property
    def id(self) -> str:
        raw = json.dumps([self.file_hash, self.path, self.line, self.operator, self.start, self.end, self.replacement])
        return hashlib.sha256(raw.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class TestOutcome:
    """A test's result as compared: passed or not, the exception's type, the normalized message."""

    __test__ = False  # not a pytest test class

    nodeid: str
    outcome: str
    exc: str = ""
    message: str = ""

    @property
    def key(self) -> tuple[bool, str, str]:
        return self.outcome == "passed", self.exc, normalize_message(self.message)

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"


@dataclass
class MutantResult:
    """What one mutant did: `status` ok, timeout, crash, unswappable or not_run; its tests' outcomes by id."""

    mutant: PlannedMutant
    status: str
    tests: dict[str, TestOutcome] = field(default_factory=dict)
    seconds: float = 0.0
    note: str = ""
    cached: bool = False

    @property
    def ran(self) -> bool:
        return self.status in ("ok", "timeout", "crash")

    @property
    def informative(self) -> bool:
        """Whether its outcomes say something about the code: a crash is the harness breaking (a mutant of
        `_pytest/` stops the in-process pytest that runs the tests), so its tests are unknown, neither changed nor
        unchanged; a hang still counts as changing what it did not finish."""
        return self.status in ("ok", "timeout")


@dataclass(frozen=True)
class LineMbfl:
    """A line's scores over its mutants that ran."""

    path: str
    line: int
    metallaxis: float
    muse: float
    mutants: int
    killing: int

    def evidence(self) -> str:
        return (f"{self.killing}/{self.mutants} mutants change a failing test (metallaxis {self.metallaxis:.2f}, "
                f"muse {self.muse:+.3f})")


# -- planning ----------------------------------------------------------------------------------------------------------
def file_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def plan_mutants(lines: Sequence[LineScore], sources: Sources, config: MbflConfig = MbflConfig()) -> list[PlannedMutant]:
    """Up to `per_line` parsable mutants (distinct operators first) at each of the top lines, breadth first by
    the lines' rank, so a budget that runs out has covered the best lines once."""
    top = [(s.path, s.line) for s in lines[: config.top_lines]]
    per_line: dict[tuple[str, int], list[PlannedMutant]] = {}
    for path in dict.fromkeys(p for p, _ in top):
        text = sources.text(path)
        if text is None:
            continue
        wanted = {n for p, n in top if p == path}
        for mutant in _mutants_at(path, text, wanted, config):
            per_line.setdefault((mutant.path, mutant.line), []).append(mutant)
    out: list[PlannedMutant] = []
    for round_ in range(config.per_line):
        out += [per_line[k][round_] for k in top if len(per_line.get(k, ())) > round_]
    return out


def _mutants_at(path: str, text: str, wanted: set[int], config: MbflConfig) -> list[PlannedMutant]:
    """Each wanted line's mutants, one per operator in a seeded order, then the rest, kept only if they parse."""
    rng = random.Random(f"{config.seed}:{path}")
    src = Source(text)
    digest = file_hash(text)
    by_line: dict[int, list] = {}
    for operator in OPERATORS.values():
        for edit in operator(src, rng):
            line = text.count("\n", 0, edit.start) + 1
            if line in wanted and "\n" not in text[edit.start:edit.end]:
                by_line.setdefault(line, []).append(edit)
    out = []
    for line, edits in by_line.items():
        rng.shuffle(edits)
        firsts = list({e.operator: e for e in reversed(edits)}.values())
        ordered = firsts + [e for e in edits if e not in firsts]
        kept = 0
        for edit in ordered:
            new = text[: edit.start] + edit.replacement + text[edit.end:]
            if kept >= config.per_line or new == text or Source(new).tree.root_node.has_error:
                continue
            out.append(PlannedMutant(path, line, edit.operator, edit.start, edit.end, edit.replacement, digest))
            kept += 1
    return out


# -- running ---------------------------------------------------------------------------------------------------------
@dataclass
class MutationEvidence:
    """Every planned mutant's result, the unmutated program's outcomes in the same harness, and the cost."""

    results: list[MutantResult]
    baseline: dict[str, TestOutcome]
    failing: list[str]
    seconds: float = 0.0
    ran: int = 0
    status: str = "finished"
    error: str = ""

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for r in self.results:
            counts[r.status] = counts.get(r.status, 0) + 1
        parts = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        cached = sum(r.cached for r in self.results)
        return f"{len(self.results)} mutants ({parts}; {cached} cached) in {self.seconds:.1f}s, {self.status}"


def _passing_for(evidence: ExecutionEvidence, path: str, line: int, limit: int) -> list[str]:
    return spread_evenly(sorted(t.nodeid for t in evidence.passing if line in t.lines.get(path, ())), limit)


#: bumped when cached results may be wrong: 2 drops those of runs made after the test patch was removed
CACHE_VERSION = 2


def _cache_key(mutant: PlannedMutant, failing: Sequence[str], passing: Sequence[str]) -> str:
    raw = json.dumps([CACHE_VERSION, mutant.id, sorted(failing), sorted(passing)])
    return hashlib.sha256(raw.encode()).hexdigest()[:24]


def run_mutants(runtime: Runtime, evidence: ExecutionEvidence, planned: Sequence[PlannedMutant],
                config: MbflConfig = MbflConfig(), *, python: str = DEFAULT_PYTHON,
                pytest_args: Sequence[str] = ()) -> MutationEvidence:
    """The planned mutants against the failing tests and each one's covering passing tests (cached ones are read
    back; the rest run in one runner process, one fork per mutant)."""
    started = time.monotonic()
    failing = [t.nodeid for t in evidence.failing]
    plan = {m.id: (m, _passing_for(evidence, m.path, m.line, config.max_passing)) for m in planned}
    keys = {mid: _cache_key(m, failing, p) for mid, (m, p) in plan.items()}
    cached = {mid: r for mid in plan if (r := _read_cache(config.cache_dir, keys[mid], plan[mid][0])) is not None}
    todo = [mid for mid in plan if mid not in cached]
    baseline = _read_baseline(config.cache_dir, keys, failing)
    out = MutationEvidence([], baseline or {}, failing)
    if todo or baseline is None:
        own = sum(t.duration_s for t in evidence.failing)
        budget = config.budget_s if config.budget_s is not None else 3 * own + config.slack_s
        per_mutant = 3 * (own + sum(t.duration_s for t in evidence.passing) / max(1, len(evidence.passing))
                          * config.max_passing) + 10
        options = {"mode": "mutants", "root": runtime.workdir, "failing": failing, "budget_s": budget,
                   "passing": sorted({t for mid in todo for t in plan[mid][1]}), "per_mutant_timeout": per_mutant,
                   "stop_after_kills": config.stop_after_kills, "pytest_args": list(pytest_args),
                   "mutants": [{"id": mid, "path": plan[mid][0].path, "line": plan[mid][0].line,
                                "start": plan[mid][0].start, "end": plan[mid][0].end,
                                "replacement": plan[mid][0].replacement, "passing": plan[mid][1]} for mid in todo]}
        records, out.status, out.error = _run_runner(runtime, options, python, budget + per_mutant + 120)
        out.baseline = _outcomes(records.get("original", {}).get("tests", []))
        keep = baseline_fails(out.baseline, failing)
        for mid in todo:
            result = _result(plan[mid][0], records.get(mid))
            out.results.append(result)
            out.ran += result.ran
            if keep and result.status != "not_run":
                _write_cache(config.cache_dir, keys[mid], result)
        if keep:
            _write_baseline(config.cache_dir, keys, failing, out.baseline)
    out.results += list(cached.values())
    order = list(plan)
    out.results.sort(key=lambda r: order.index(r.mutant.id))
    out.seconds = round(time.monotonic() - started, 1)
    return out


def _run_runner(runtime: Runtime, options: dict, python: str, limit: float) -> tuple[dict[str, dict], str, str]:
    """The trace runner in mutation mode; its `mutant` records by id, the run's status and error."""
    folder = f"{runtime.scratch_dir}/mbfl-{uuid.uuid4().hex[:12]}"  # outside the tree, the runtime's own
    options["output"] = f"{folder}/results.jsonl"
    ship_runner(runtime, folder)
    runtime.write_file(f"{folder}/input.json", json.dumps(options))
    command = (f"{python} {folder}/trace_runner.py {folder}/input.json > {folder}/log.txt 2>&1; "
               f"echo \"pinpoint-trace-exit $?\"; tail -c 2000 {folder}/log.txt")
    result = runtime.run(command, timeout=limit, env=dict(RUN_ENV))
    try:
        raw = runtime.read_text(f"{folder}/results.jsonl")
    except (FileNotFoundError, OSError):
        raw = ""
    runtime.run(f"rm -rf {shlex.quote(folder)}", timeout=60)
    records, status, error = {}, "error", "the runner wrote nothing: " + result.output[-500:]
    for line in raw.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("kind") == "mutant":
            records[record["id"]] = record
        elif record.get("kind") == "end":
            status, error = record.get("status", "error"), record.get("error", "")
    if result.timed_out:
        status, error = "killed", f"the mutation run passed its limit of {limit:g}s"
    return records, status, error


def _outcomes(tests: list[dict]) -> dict[str, TestOutcome]:
    return {t["nodeid"]: TestOutcome(t["nodeid"], t.get("outcome", "error"), t.get("exc", ""), t.get("message", ""))
            for t in tests}


def _result(mutant: PlannedMutant, record: dict | None) -> MutantResult:
    if record is None:
        return MutantResult(mutant, "not_run", note="the runner stopped before it")
    return MutantResult(mutant, record.get("status", "crash"), _outcomes(record.get("tests", [])),
                        float(record.get("seconds", 0.0)), record.get("note", ""))


# -- the cache ---------------------------------------------------------------------------------------------------------
def _read_cache(folder: Path | None, key: str, mutant: PlannedMutant) -> MutantResult | None:
    path = folder / f"{key}.json" if folder else None
    if path is None or not path.exists():
        return None
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return MutantResult(mutant, raw["status"], {k: TestOutcome(**v) for k, v in raw["tests"].items()},
                        raw.get("seconds", 0.0), raw.get("note", ""), cached=True)


def _write_cache(folder: Path | None, key: str, result: MutantResult) -> None:
    if folder is None:
        return
    folder.mkdir(parents=True, exist_ok=True)
    raw = {"status": result.status, "note": result.note, "seconds": result.seconds,
           "mutant": asdict(result.mutant), "tests": {k: asdict(v) for k, v in result.tests.items()}}
    tmp = folder / f"{key}.json.tmp"
    tmp.write_text(json.dumps(raw))
    tmp.replace(folder / f"{key}.json")


def baseline_fails(baseline: dict[str, TestOutcome], failing: Sequence[str]) -> bool:
    """Whether a failing test failed on the unmutated code. If none did (the test patch is gone, the ids match
    nothing), the run says nothing about the fault, and its results are not cached under the fault's key."""
    return any(baseline[b].outcome in FAILING for b in failing_ids(baseline, failing))


def _baseline_key(keys: dict[str, str], failing: Sequence[str]) -> str:
    return "base-" + hashlib.sha256(json.dumps([sorted(keys.values()), sorted(failing)]).encode()).hexdigest()[:24]


def _read_baseline(folder: Path | None, keys: dict[str, str], failing: Sequence[str]) -> dict | None:
    path = folder / f"{_baseline_key(keys, failing)}.json" if folder else None
    if path is None or not path.exists():
        return None
    try:
        return {k: TestOutcome(**v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, json.JSONDecodeError, TypeError):
        return None


def _write_baseline(folder: Path | None, keys: dict[str, str], failing: Sequence[str],
                    baseline: dict[str, TestOutcome]) -> None:
    if folder is None or not baseline:
        return
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{_baseline_key(keys, failing)}.json").write_text(json.dumps({k: asdict(v) for k, v in baseline.items()}))


# -- scores ------------------------------------------------------------------------------------------------------------
def failing_ids(baseline: dict[str, TestOutcome], failing: Sequence[str]) -> list[str]:
    """The baseline's tests that the failing ids name (a class id names its tests)."""
    return [b for b in baseline if any(covers(f, b) for f in failing)]


def outcome_changes(result: MutantResult, baseline: dict[str, TestOutcome],
                    failing: Sequence[str]) -> tuple[int, int, int, int]:
    """(failing tests changed, passing tests changed, failing made to pass, passing made to fail) for one run with
    an edit (a mutant, a switched predicate). A failing test the run never reported because it hung counts as
    changed; a crashed run's are unknown (`MutantResult.informative`)."""
    fk = pk = f2p = p2f = 0
    failing_now = failing_ids(baseline, failing)
    for nodeid in failing_now:
        base, now = baseline[nodeid], result.tests.get(nodeid)
        if now is None:
            fk += result.status == "timeout"
            continue
        fk += now.key != base.key
        f2p += (not base.passed) and now.passed
    for nodeid, now in result.tests.items():
        base = baseline.get(nodeid)
        if nodeid in failing_now or base is None or not base.passed:
            continue
        pk += now.key != base.key
        p2f += not now.passed
    return fk, pk, f2p, p2f


def line_scores(results: Sequence[MutantResult], baseline: dict[str, TestOutcome],
                failing: Sequence[str]) -> dict[tuple[str, int], LineMbfl]:
    """Metallaxis (per line, its best mutant's fk / sqrt(F (fk + pk))) and MUSE (per line, the mean over its
    mutants, plus one, of f2p / all f2p - p2f / all p2f) over the mutants that ran and did not crash the harness."""
    ran = [r for r in results if r.informative]
    changes = {r.mutant.id: outcome_changes(r, baseline, failing) for r in ran}
    total_f = len(failing_ids(baseline, failing)) or 1
    all_f2p = sum(c[2] for c in changes.values())
    all_p2f = sum(c[3] for c in changes.values())
    by_line: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
    for r in ran:
        by_line.setdefault((r.mutant.path, r.mutant.line), []).append(changes[r.mutant.id])
    out = {}
    for (path, line), cs in by_line.items():
        metallaxis = max((fk / math.sqrt(total_f * (fk + pk)) if fk else 0.0) for fk, pk, _, _ in cs)
        muse = sum((f2p / all_f2p if all_f2p else 0.0) - (p2f / all_p2f if all_p2f else 0.0)
                   for _, _, f2p, p2f in cs) / (len(cs) + 1)
        out[(path, line)] = LineMbfl(path, line, metallaxis, muse, len(cs), sum(fk > 0 for fk, _, _, _ in cs))
    return out


#: MUSE's weight inside the `mbfl` score: it orders lines of equal Metallaxis and cannot reorder unequal ones
MUSE_WEIGHT = 1e-4
def mbfl_suspects(scores: dict[tuple[str, int], LineMbfl], order: Sequence[tuple[str, int]] = ()) -> list[Suspect]:
    """The mutated lines by Metallaxis, then MUSE, then `order` (the spectrum's rank)."""
    rank = {k: i for i, k in enumerate(order)}
    ranked = sorted(scores.values(), key=lambda s: (-s.metallaxis, -s.muse, rank.get((s.path, s.line), 10**9),
                                                    s.path, s.line))
    return [Suspect(s.path, s.line, s.line, s.metallaxis + MUSE_WEIGHT * s.muse, "mbfl", s.evidence())
            for s in ranked]


def tie_break(spectrum: Sequence[Suspect], scores: dict[tuple[str, int], LineMbfl]) -> list[Suspect]:
    """The spectrum's suspects with its tied lines split by MBFL (`fusion.split_ties`): equal-Ochiai lines are
    ordered by their Metallaxis, then MUSE; lines never mutated keep their place."""
    values = {k: m.metallaxis + 1e-3 * m.muse for k, m in scores.items()}
    return split_ties(spectrum, values, "mbfl", {k: m.evidence() for k, m in scores.items()})


def collect_mbfl(runtime: Runtime, evidence: ExecutionEvidence, sources: Sources, config: MbflConfig = MbflConfig(),
                 *, python: str = DEFAULT_PYTHON, pytest_args: Sequence[str] = ()) -> MutationEvidence:
    """Plan mutants at the spectrum's top lines and run them (the whole signal's cost)."""
    planned = plan_mutants(rank_lines(evidence), sources, config)
    return run_mutants(runtime, evidence, planned, config, python=python, pytest_args=pytest_args)


class MbflLocalizer:
    """The `mbfl` signal over mutation evidence collected beforehand (`collect_mbfl`)."""

    name = "mbfl"

    def __init__(self, mutation: MutationEvidence, evidence: ExecutionEvidence) -> None:
        self.mutation = mutation
        self.order = [(s.path, s.line) for s in rank_lines(evidence)]

    def scores(self) -> dict[tuple[str, int], LineMbfl]:
        return line_scores(self.mutation.results, self.mutation.baseline, self.mutation.failing)

    def localize(self, request: LocalizationRequest) -> list[Suspect]:
        return mbfl_suspects(self.scores(), self.order)
