"""Failing-test evidence, one interface for its three sources, and the `spectrum` and `ldb` signals it feeds.

A `FailingTests` value says which tests to trace and where they came from:
- `command`: the user's test command (`pinpoint fix --test-cmd`, a local task's `test_command`); a pytest command's
  own selection is traced, and its tests that fail are the failing ones, those that pass the passing ones;
- `oracle`: an instance's FAIL_TO_PASS tests (its test patch applied), PASS_TO_PASS tests of the same files;
- `reproduce`: the agent's own reproduction script (the `reproduce` node), run whole as one traced test
  (`script::PATH`), plus as passing tests the repository's test files named after the modules the script ran.

`ExecutionSignals` traces them once (coverage per test, then block states of the top functions, in one interpreter) and serves two
localizers over the result; `record()` is what the trajectory keeps: the runs, and the traces the suspects came from.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from pinpoint.environments.runtime import Runtime
from pinpoint.localization import insertion as ins
from pinpoint.localization import predicates as ps
from pinpoint.localization.execution import (
    DEFAULT_PYTHON,
    ExecutionEvidence,
    OwnRun,
    Sources,
    SpectrumLocalizer,
    collect_spectrum,
    own_run,
    rank_lines,
)
from pinpoint.localization.ldb import LdbLocalizer, failing_trace, llm_block_verdicts, llm_ldb_suspects
from pinpoint.localization.mbfl import MbflConfig, MbflLocalizer, MutationEvidence, collect_mbfl, tie_break
from pinpoint.localization.mentions import NAME as MENTIONS
from pinpoint.localization.mentions import MentionsLocalizer
from pinpoint.localization.retrieval import is_test_path
from pinpoint.localization.suspects import LocalizationRequest, Suspect
from pinpoint.localization.test_names import TestNamesLocalizer, test_file_names

#: options that change which tests run, kept with their value; any other option is the runner's own business (and
#: `-x`/`--maxfail` would stop the passing tests the spectrum needs)
_SELECTING = {"-k", "-m", "-o", "-c", "--rootdir", "--deselect", "--ignore", "--confcutdir"}
_VALUED = _SELECTING | {"-p", "--maxfail", "--tb", "-W", "--basetemp", "--durations", "-n"}


@dataclass(frozen=True)
class FailingTests:
    source: str
    #: pytest node ids or paths expected to hold failing tests
    failing: list[str]
    #: node ids or paths of tests expected to pass (sampled to a bound when traced)
    passing: list[str] = field(default_factory=list)
    #: pytest options the selection needs (`-k expr`, ...)
    pytest_args: list[str] = field(default_factory=list)
    #: the interpreter whose pytest runs them (a command's own `X -m pytest`)
    python: str = DEFAULT_PYTHON


def pytest_selection(command: str) -> FailingTests | None:
    """The tests a pytest command selects, as `command` evidence; None for any other command (no spectrum then)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    python = DEFAULT_PYTHON
    for i, word in enumerate(words):
        if word.endswith("pytest") or word == "py.test":
            rest = words[i + 1 :]
            break
        if word == "-m" and i + 1 < len(words) and words[i + 1] == "pytest":
            rest, python = words[i + 2 :], words[i - 1] if i else DEFAULT_PYTHON
            break
    else:
        return None
    selection, options, taking = [], [], None
    for word in rest:
        if taking is not None:
            if taking in _SELECTING:
                options += [taking, word]
            taking = None
        elif word in ("&&", "||", ";", "|"):
            break
        elif word in _VALUED:
            taking = word
        elif word.startswith(tuple(f"{flag}=" for flag in _SELECTING)):
            options.append(word)
        elif not word.startswith("-"):
            selection.append(word)
    return FailingTests("command", selection or ["."], [], options, python)


def reproduction_tests(script_path: str, python: str = DEFAULT_PYTHON) -> FailingTests:
    """A reproduction script as failing-test evidence; its passing tests are found once it has run."""
    return FailingTests("reproduce", [f"{SCRIPT_PREFIX}{script_path}"], [], [], python)


#: how a test id names a script run whole (the trace runner's `SCRIPT_PREFIX`)
SCRIPT_PREFIX = "script::"
#: test files named after the modules a reproduction ran, traced as its passing tests
RELATED_TEST_FILES = 4


def related_test_files(runtime: Runtime, evidence: ExecutionEvidence, limit: int = RELATED_TEST_FILES) -> list[str]:
    """Test files named after the modules the failing runs ran (`test_<module>.py`, `<module>_test.py`), the
    module run most first: the repository's own tests of the code the reproduction went through."""
    counts: dict[str, int] = {}
    for test in evidence.failing:
        for path, lines in test.lines.items():
            if not is_test_path(path) and path.endswith(".py"):
                stem = path.rsplit("/", 1)[-1][:-3]
                counts[stem] = counts.get(stem, 0) + len(lines)
    listing = runtime.run("git ls-files '*.py'", timeout=120).output.splitlines()
    tests = [p for p in listing if is_test_path(p)]
    found: list[str] = []
    for stem in sorted(counts, key=lambda s: -counts[s]):
        names = test_file_names(stem)
        found += [p for p in tests if p.rsplit("/", 1)[-1] in names and p not in found]
    return found[:limit]


#: how the spectrum's passing tests are chosen (`collect_spectrum`'s `select`): `file` or `coverage`
PASSING_SELECTION = "file"
#: the sources whose failing tests are timed untraced first when no own run is given: the oracle's FAIL_TO_PASS
#: tests, a few and quick (median 0.75 s on the dev rows); a command's selection may be a whole suite, and a
#: reproduction's own run is the traced script itself, so those keep the fixed `budget_s`
FITTED_SOURCES = ("oracle",)


class ExecutionSignals:
    """The failing tests traced once, on first use, served as the `spectrum` and `ldb` localizers. Without tests
    yet (`tests=None`: the reproduction has not run) it waits, and its localizers find nothing."""

    def __init__(self, runtime: Runtime, tests: FailingTests | None, budget_s: float = 300.0,
                 top_functions: int = 3, mbfl: MbflConfig | None = None,
                 predicates: ps.PredicateConfig | None = None, insertion: bool = False, select: str | None = None,
                 own: OwnRun | None = None, fit: bool = True):
        """`mbfl`, `predicates`, `insertion`: also those targeted signals (run after the spectrum, on first use),
        each splitting the spectrum's ties in that order, or fused as a member where its config says
        (`fuse_member`), and recorded with its suspects; off by default. `select`: how the passing tests are
        chosen (`PASSING_SELECTION` unless given). `own`: the failing tests' own untraced run where the caller
        timed it; with `fit`, the spectrum + LDB run then fits 3x it + 30 s (`OwnRun.fit_s`), and oracle tests
        without one are timed first (`FITTED_SOURCES`); `budget_s` bounds every run."""
        self.runtime = runtime
        self.own = own
        self.fit = fit
        self.tests = tests
        self.budget_s = budget_s
        self.top_functions = top_functions
        self.select = select or PASSING_SELECTION
        self.spectrum: ExecutionEvidence | None = None
        self.traces: ExecutionEvidence | None = None
        self.mbfl = mbfl
        self.mutation: MutationEvidence | None = None
        self.predicates = predicates
        self.switches: ps.SwitchEvidence | None = None
        self.insertion = insertion
        self.ask: Callable[[str], str] | None = None

    def collect(self) -> None:
        """Coverage of every selected test, then block states of the top functions (at most once)."""
        if self.spectrum is not None or self.tests is None:
            return
        self.spectrum = self._spectrum(self.tests.passing)
        if self.tests.source == "reproduce" and self.spectrum.failing:
            related = related_test_files(self.runtime, self.spectrum)
            if related:
                self.spectrum = self._spectrum(related)
        self.traces = self.spectrum.block_traces

    def run_tests(self) -> None:
        """Everything that runs the tests, now (each at most once): the spectrum and LDB's block states, then the
        targeted signals that are on (MBFL's mutants, predicate switches). After it the signals read only what was
        recorded, so a caller may take the tests out of the tree (oracle mode)."""
        self.collect()
        if self.spectrum is not None and self.spectrum.failing:
            if self.mbfl:
                self._mbfl()
            if self.predicates:
                self._switched()

    def _spectrum(self, passing: list[str]) -> ExecutionEvidence:
        """One run: the spectrum's tests, then in the same interpreter the block states of its top functions."""
        return collect_spectrum(self.runtime, self.tests.failing, passing, budget_s=self.budget_s,
                                pytest_args=self.tests.pytest_args, python=self.tests.python,
                                ldb_top=self.top_functions, select=self.select, fit_s=self._fit_s())

    def _fit_s(self) -> float | None:
        """The fitted wall budget of the traced run: from the own run given, else (oracle tests) timed now."""
        if not self.fit:
            return None
        if self.own is None and self.tests.source in FITTED_SOURCES:
            self.own = own_run(self.runtime, self.tests.failing, python=self.tests.python,
                               pytest_args=self.tests.pytest_args, budget_s=self.budget_s)
        return self.own.fit_s() if self.own is not None else None

    def localizers(self, ask: Callable[[str], str] | None = None) -> list:
        """`spectrum`, `ldb`, `test_names` and `mentions` (the executed lines naming the issue's names); with `ask`
        (an LLM), also `ldb_llm`: LDB's own verdict per block of the top function's failing trace, one query for
        all its blocks."""
        self.ask = ask
        extra = [_Signal("ldb_llm", self)] if ask else []
        extra += [_Signal(name, self) for name, config in (("mbfl", self.mbfl), ("predicates", self.predicates))
                  if config is not None and config.fuse_member]
        return [_Signal("spectrum", self), _Signal("ldb", self), _Signal("test_names", self),
                _Signal(MENTIONS, self)] + extra

    def failure_output(self) -> str:
        """The failing tests' deepest frames and messages as traceback text, for the `traceback` signal."""
        self.collect()
        parts = []
        for test in self.spectrum.failing if self.spectrum is not None else []:
            parts.append(f"{test.nodeid} {test.outcome}\nTraceback (most recent call last):")
            parts.extend(f'  File "{f.path}", line {f.line}, in {f.function}' for f in test.frames)
            parts.append(test.message[-1500:])
        return "\n".join(parts)

    def suspects(self, name: str, request: LocalizationRequest) -> list[Suspect]:
        self.collect()
        if self.spectrum is None:
            return []
        if name == "spectrum":
            return self._split(SpectrumLocalizer(self.spectrum, self.runtime).localize(request))
        if name in ("mbfl", "predicates", "insertion"):
            return self._targeted(name, request) if self.spectrum.failing else []
        if name == "test_names":
            return self._named(request)
        if name == MENTIONS:
            lines = [(s.path, s.line) for s in rank_lines(self.spectrum)]  # every line a failing test ran
            return MentionsLocalizer(lines, Sources(self.runtime).text).localize(request)
        if self.traces is None:
            return []
        if name == "ldb_llm":
            return self._llm_verdicts(request)
        return LdbLocalizer(self.traces).localize(request)

    def _split(self, spectrum: list[Suspect]) -> list[Suspect]:
        """The spectrum's ties split by each targeted signal that is on: MBFL, predicate switching (unless it is a
        member), insertion points."""
        if not self.spectrum.failing:
            return spectrum
        if self.mbfl:
            spectrum = tie_break(spectrum, self._mbfl().scores())
        if self.predicates and not self.predicates.fuse_member:
            spectrum = ps.tie_break(spectrum, self._switched().scores())
        if self.insertion:
            spectrum = ins.tie_break(spectrum, ins.insertion_points(self.spectrum, Sources(self.runtime)))
        return spectrum

    def _named(self, request: LocalizationRequest) -> list[Suspect]:
        """The code files the failing tests are named after and ran (`test_names`)."""
        sources = Sources(self.runtime)
        failing = [(t.nodeid.split("::")[0], t.lines.keys()) for t in self.spectrum.failing]
        return TestNamesLocalizer(failing, lambda path: len((sources.text(path) or "").splitlines())).localize(request)

    def _targeted(self, name: str, request: LocalizationRequest) -> list[Suspect]:
        if name == "mbfl":
            return self._mbfl().localize(request) if self.mbfl else []
        if name == "predicates":
            return self._switched().localize(request) if self.predicates else []
        return ins.InsertionLocalizer(self.spectrum, Sources(self.runtime)).localize(request) if self.insertion else []

    def _switched(self) -> ps.PredicateLocalizer:
        """The predicates switched once, on first use."""
        if self.switches is None:
            self.switches = ps.collect_switches(self.runtime, self.spectrum, Sources(self.runtime), self.predicates,
                                                python=self.tests.python, pytest_args=self.tests.pytest_args)
        return ps.PredicateLocalizer(self.switches, self.spectrum)

    def _mbfl(self) -> MbflLocalizer:
        """The mutants run once, on first use."""
        if self.mutation is None:
            self.mutation = collect_mbfl(self.runtime, self.spectrum, Sources(self.runtime), self.mbfl,
                                         python=self.tests.python, pytest_args=self.tests.pytest_args)
        return MbflLocalizer(self.mutation, self.spectrum)

    def _llm_verdicts(self, request: LocalizationRequest) -> list[Suspect]:
        """The blocks the LLM judges wrong in the first traced function that a failing test ran."""
        for function in self.traces.functions.values():
            trace = failing_trace(self.traces, function.key)
            source = Sources(self.runtime).text(function.path)
            if trace is not None and source is not None:
                verdicts = llm_block_verdicts(self.ask, function, source, trace, task=request.problem_statement,
                                              failure=request.test_output[-1500:])
                return llm_ldb_suspects(verdicts, function)
        return []

    def record(self) -> dict:
        """The trajectory's `execution` event: where the tests came from, each run's outcome, the block traces."""
        if self.tests is None:
            return {"kind": "execution", "source": None, "note": "no failing tests (the reproduction did not fail)"}
        record = {"kind": "execution", "source": self.tests.source, "failing": self.tests.failing,
                  "passing_given": len(self.tests.passing)}
        if self.own is not None:
            record["own_run"] = {"seconds": self.own.seconds, "outside_s": self.own.outside_s,
                                 "fit_s": round(self.own.fit_s(), 2) if self.fit else None}
        for name, evidence in (("spectrum", self.spectrum), ("traces", self.traces)):
            if evidence is not None:
                record[name] = {"summary": evidence.summary(), "status": evidence.status, "error": evidence.error,
                                "tests": [{"nodeid": t.nodeid, "outcome": t.outcome, "message": t.message[-300:],
                                           "seconds": t.duration_s, "cpu_s": t.cpu_s} for t in evidence.tests[:60]]}
        targeted = {"mbfl": self.mutation, "predicates": self.switches}
        for name, runs in targeted.items():
            if runs is not None:
                record[name] = {"summary": runs.summary(), "status": runs.status, "suspects": [
                    s.to_dict() for s in self.suspects(name, LocalizationRequest())[:20]]}
        if self.spectrum is not None and self.spectrum.failing:  # cheap (no run): recorded even when not used
            points = ins.InsertionLocalizer(self.spectrum, Sources(self.runtime)).localize(LocalizationRequest())
            record["insertion"] = {"used": self.insertion, "suspects": [s.to_dict() for s in points[:20]]}
        if self.traces is not None:
            record["blocks"] = [s.to_dict() for s in self.suspects("ldb", LocalizationRequest())]
        return record


@dataclass
class _Signal:
    """One of the two localizers over shared evidence."""

    name: str
    execution: ExecutionSignals

    def localize(self, request: LocalizationRequest) -> list[Suspect]:
        return self.execution.suspects(self.name, request)
