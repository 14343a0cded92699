"""Standalone trace runner: copied into a repository's environment and run there with its own Python.

It imports only the standard library, the environment's pytest and spectrum_rules.py (the rules it shares with the
host, copied beside it), and runs on
Python 3.9 and 3.11. Usage: `python trace_runner.py INPUT.json`. It runs the requested pytest ids in-process with a
plugin that turns a `sys.settrace` line tracer on only during each test's *call* phase (setup, teardown and pytest's
failure reporting stay out of the spectrum; assertion rewriting is off), and records per test its outcome, the
repository lines it ran, the deepest repository frames of its failure and, for the target functions the input names
by their basic blocks, the local variables after each executed block (LDB). Results go to the JSON-lines file the
input names (outside the repository), one line per event as it happens, so a crash or a kill leaves every finished
test on disk. Per-test limits (CPU seconds by SIGPROF, with a wall cap) and budgets in CPU seconds of this process
bound the run, under an overall wall budget (a busy machine traces the same tests) and, where the caller knows the
failing tests' own run, a fitted wall budget (`fit_s`) that the passing tests and the LDB phase stop at; tests past a
budget are reported `not_run`, saying why. Where the environment has no pytest (sympy's), plain `file::function` ids are imported and called instead.
"""

from __future__ import annotations

import collections
import heapq
import importlib
import itertools
import json
import os
import re
import reprlib
import resource
import signal
import statistics
import sys
import threading
import time
import traceback

try:  # in the box: spectrum_rules.py is copied beside this script
    from spectrum_rules import FAILING, covers, excluded_path, line_spectrum, normalize_message, spread_evenly
except ImportError:  # imported on the host
    from pinpoint.localization.spectrum_rules import (
        FAILING,
        covers,
        excluded_path,
        line_spectrum,
        normalize_message,
        spread_evenly,
    )

ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
#: distinct lines kept per test in the order they last ran (the ones nearest a failure come first)
RECENT_LINES = 200
SKIP_PARTS = ("site-packages", "dist-packages", os.sep + ".git" + os.sep, os.sep + ".tox" + os.sep)


class TestTimeout(BaseException):
    """Raised by the per-test alarm; a BaseException so a test's `except Exception` does not swallow it."""


class Sink:
    """The JSON-lines output, flushed and fsynced per line so a killed run keeps what it wrote."""

    def __init__(self, path):
        self.path = path
        self.tests = []  # the spectrum phase's test records, for the LDB phase's choice of targets

    def write(self, record):
        if record.get("kind") == "test" and "phase" not in record:
            self.tests.append(record)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, default=str) + "\n")
            handle.flush()
            os.fsync(handle.fileno())


class Recorder:
    """Per-call block states of one target function: the first and last `keep` blocks of each kept call."""

    def __init__(self, target, options):
        self.target = target
        self.keep = options.get("keep_blocks", 5)
        self.keep_calls = options.get("keep_calls", 3)
        self.max_snapshots = options.get("max_snapshots", 4000)
        self.line_block = {}
        for index, (start, end, _kind) in enumerate(target["blocks"]):
            for line in range(start, end + 1):
                self.line_block.setdefault(line, index)
        self.repr = reprlib.Repr()
        self.repr.maxstring = self.repr.maxother = options.get("max_repr", 100)
        self.max_repr = options.get("max_repr", 100)
        self.reset()

    def reset(self):
        self.calls = 0
        self.snapshots = 0
        self.executed = set()
        self.first = []
        self.last = collections.deque(maxlen=self.keep_calls)

    def value(self, obj):
        try:
            text = self.repr.repr(obj)
        except Exception as exc:  # a broken __repr__ is a fact about the state, not a crash
            text = f"<repr failed: {type(exc).__name__}>"
        text = ADDRESS.sub("", text)
        return text if len(text) <= self.max_repr else text[: self.max_repr - 3] + "..."

    def state(self, frame):
        local = frame.f_locals
        names = [n for n in local if not n.startswith("__")][:30]
        return {n: self.value(local[n]) for n in names if not _boring(local[n])}

    def tracer(self, lines, clock):
        """A fresh local trace function for one call (a generator's resumption counts as one call)."""
        call = {"call": self.calls, "steps": [], "tail": collections.deque(maxlen=self.keep), "omitted": 0}
        self.calls += 1
        current = [None]
        before = [{}]
        raised = [None]  # an exception passing through, until a later line shows it was caught

        def step(frame, extra):
            if self.snapshots >= self.max_snapshots:
                call["omitted"] += 1
                return
            self.snapshots += 1
            state = self.state(frame)
            # what this block changed, against the step before it (kept or not: truncation must not invent changes)
            changed = [name for name, value in state.items() if before[0].get(name) != value]
            before[0] = state
            record = {"block": current[0], "state": state, "changed": changed}
            record.update(extra)
            if len(call["steps"]) < self.keep:
                call["steps"].append(record)
            else:
                if len(call["tail"]) == self.keep:
                    call["omitted"] += 1
                call["tail"].append(record)

        def local(frame, event, arg):
            if event == "line":
                raised[0] = None
                lines[frame.f_lineno] = next(clock)
                block = self.line_block.get(frame.f_lineno)
                if block is not None and block != current[0]:
                    if current[0] is not None:
                        step(frame, {})
                    current[0] = block
                    self.executed.add(block)
            elif event == "exception":
                raised[0] = call["raised"] = self.value(arg[1])
            elif event == "return":
                if current[0] is not None:
                    step(frame, {"raised": raised[0]} if raised[0] is not None else {"return": self.value(arg)})
                self.finish(call)
            return local

        return local

    def finish(self, call):
        call["steps"] = call["steps"] + list(call.pop("tail"))
        if len(self.first) < self.keep_calls:
            self.first.append(call)
        else:
            self.last.append(call)

    def result(self):
        return {"calls": self.calls, "executed": sorted(self.executed), "traces": self.first + list(self.last)}


def _boring(obj):
    """Modules, functions and classes in scope say nothing about the state and cost long reprs."""
    return isinstance(obj, type) or type(obj).__name__ in ("module", "function", "builtin_function_or_method")


class Tracer:
    """Line coverage of repository files, switched on and off around each test's call phase.

    What it traces line by line, to keep the overhead where the evidence is:
    - with `failing` ids in the options, a test they name traces every repository code object, and the others
      (the passing sample) only the code objects a failing test ran: a line no failing test runs never scores, so
      tracing the rest would cost without changing the spectrum;
    - with `targets` (the LDB run), only the target functions, for their block states;
    - with `trace` false, nothing (the failing tests' own untraced run, the baseline of tracing's cost)."""

    def __init__(self, root, options):
        self.root = os.path.realpath(root)
        self.own = os.path.realpath(__file__)
        self.files = {}
        self.lines = {}  # path -> {line: the tick of its last execution} (a failing test) or {line} (the others)
        self.clock = itertools.count()
        self.options = options
        self.set_targets(options.get("targets", []))
        self.failing = options.get("failing")
        self.reached = set()  # the code objects the failing tests ran
        self.full = True  # whether the current test traces every repository code object
        self.screening = False  # the coverage pre-pass: calls into reached code noted, no line traced
        self.left = {}  # this test's code objects -> their lines it has not run yet (a passing test's)
        self.complete = set()  # this test's code objects it has run every line of
        self.own_lines = {}  # code object -> the lines it can give events for
        self.entered = set()
        self.enabled = options.get("trace", True)
        self.active = False

    def set_targets(self, targets):
        """Trace only these functions from now on, for their block states (the LDB run, or the LDB phase)."""
        self.recorders = {}
        for target in targets:
            path = os.path.realpath(os.path.join(self.root, target["path"]))
            self.recorders.setdefault(path, []).append(Recorder(target, self.options))
        self.by_code = {}  # code object -> its Recorder, or None

    def begin(self, nodeid, screen=False):
        """Before a test: a failing one (or any, without `failing`) traces in full, the others only reached code;
        `screen`: only which reached functions it enters (the coverage pre-pass)."""
        self.full = self.failing is None or any(covers(w, nodeid) for w in self.failing)
        self.screening = screen

    def take_entered(self):
        """The functions of code under test (not test files) that the failing tests ran and this screened test
        entered; clears them."""
        entered, self.entered = self.entered, set()
        return {code for code in entered if not excluded_path(self.files[code.co_filename])}

    def relative(self, filename):
        """The repository-relative path of a code object's file, or None for anything outside the repository."""
        if filename in self.files:
            return self.files[filename]
        rel = None
        if not filename.startswith("<"):
            path = os.path.realpath(os.path.join(self.root, filename))
            if path.startswith(self.root + os.sep) and path != self.own and not any(p in path for p in SKIP_PARTS):
                rel = os.path.relpath(path, self.root)
        self.files[filename] = rel
        return rel

    def recorder(self, code):
        """The target Recorder of a code object, looked up once per code object (a realpath costs system calls)."""
        if code in self.by_code:
            return self.by_code[code]
        found = None
        for rec in self.recorders.get(os.path.realpath(code.co_filename), ()):
            target = rec.target
            if code.co_name == target["name"] and target["first_line"] <= code.co_firstlineno <= target["def_line"]:
                found = rec
                break
        self.by_code[code] = found
        return found

    def global_trace(self, frame, event, arg):
        if event != "call" or not self.active:
            return None
        code = frame.f_code
        if self.recorders:
            rec = self.recorder(code)
            if rec is None:
                return None
            return rec.tracer(self.lines.setdefault(self.relative(code.co_filename), {}), self.clock)
        if self.screening:
            if code in self.reached:
                self.entered.add(code)
            return None
        if not self.full:
            if code not in self.reached or code in self.complete:
                return None
            return self.reached_tracer(code)
        rel = self.relative(code.co_filename)
        if rel is None:
            return None
        self.reached.add(code)
        lines = self.lines.setdefault(rel, {})
        clock = self.clock

        def local(frame, event, arg):
            if event == "line":
                lines[frame.f_lineno] = next(clock)
            return local

        return local

    def reached_tracer(self, code):
        """A passing test's local tracer for code a failing test ran: its lines as a set; once this test has run
        every line the code object has, its later calls are not traced (they can add no line)."""
        seen = self.lines.setdefault(self.files[code.co_filename], set())
        add = seen.add
        left = self.left.get(code)
        if left is None:
            if code not in self.own_lines:
                self.own_lines[code] = _own_lines(code)
            left = self.left[code] = set(self.own_lines[code])
        discard, complete = left.discard, self.complete

        def reached(frame, event, arg):
            if event == "line":
                add(frame.f_lineno)
                discard(frame.f_lineno)
                if not left:
                    complete.add(code)
                    return None  # this frame, too, can add no line
            return reached

        return reached

    def start(self):
        if not self.enabled:
            return
        self.active = True
        threading.settrace(self.global_trace)
        sys.settrace(self.global_trace)

    def stop(self):
        sys.settrace(None)
        threading.settrace(None)
        self.active = False

    def take(self):
        """This test's covered lines, the most recently run of them (closest to a failure first), and block traces;
        clears them for the next test."""
        lines = {path: sorted(found) for path, found in self.lines.items() if found}
        ticks = [(tick, path, line) for path, found in self.lines.items() if isinstance(found, dict)
                 for line, tick in found.items()]
        recent = [[path, line] for _, path, line in heapq.nlargest(RECENT_LINES, ticks)]
        blocks = {}
        for recs in self.recorders.values():
            for rec in recs:
                if rec.calls:
                    blocks[rec.target["key"]] = rec.result()
                rec.reset()
        self.lines, self.left, self.complete = {}, {}, set()
        return lines, recent, blocks


#: a passing test starts only while at least this share of the median CPU seconds of the passing tests run so far
#: in its window is left: a test that would mostly fit is started and may finish (its own limit, not what is left,
#: bounds it), so the window overruns by about half a test at most and never ends in a cut, half-traced record
START_SHARE = 0.5
#: a test's wall cap: this many times its CPU limit, at least WALL_FLOOR_S and at most twice `per_test_timeout`; a
#: test that sleeps or blocks on I/O uses no CPU and must still end, and under load a CPU second takes several
WALL_FACTOR = 10.0
WALL_FLOOR_S = 10.0

#: what one test may use: CPU seconds of the runner's process (SIGPROF) and wall seconds (SIGALRM); `cut`: the
#: budget that shortened the wall seconds, where one did (its timeout then says so)
Limit = collections.namedtuple("Limit", "cpu_s wall_s cut", defaults=("",))


def cpu_now():
    """CPU seconds (user + system) of this process and its finished children: what running the tests has cost,
    whatever else the machine runs (wall time grows with the load; this does not)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


#: where the armed CPU limit ends on `time.process_time()`: ITIMER_PROF is charged by scheduler ticks and fires early
#: on a busy machine, so its signal is checked against this precise clock (`fired_early`)
CPU_END = [0.0]


def arm(limit):
    """A test's two timers on: SIGPROF after `limit.cpu_s` of this process's CPU, SIGALRM after `limit.wall_s`."""
    cpu_s = max(limit.cpu_s, 0.001)
    CPU_END[0] = time.process_time() + cpu_s
    signal.setitimer(signal.ITIMER_PROF, cpu_s)
    signal.setitimer(signal.ITIMER_REAL, max(limit.wall_s, 0.001))


def disarm():
    """Both timers off; what was left of them, as a Limit (the CPU part by the precise clock)."""
    signal.setitimer(signal.ITIMER_PROF, 0)
    wall = signal.setitimer(signal.ITIMER_REAL, 0)[0]
    return Limit(max(CPU_END[0] - time.process_time(), 0.0), wall)


def fired_early(signum):
    """Whether this SIGPROF came before the armed CPU seconds were really used; it is then re-armed for the rest
    (under load the tick accounting fired at 1.15-1.26 CPU s of a 1.29 s limit, and the count of tests a window
    held moved with the load)."""
    if signum != signal.SIGPROF:
        return False
    left = CPU_END[0] - time.process_time()
    if left <= 0.001:
        return False
    signal.setitimer(signal.ITIMER_PROF, left)
    return True


def on_timeout(handler):
    """`handler(signum, frame)` for both timers; it names which fired by `timer_of(signum)`."""
    signal.signal(signal.SIGPROF, handler)
    signal.signal(signal.SIGALRM, handler)


def timer_of(signum):
    return "cpu" if signum == signal.SIGPROF else "wall"


def timeout_message(timer, limit, cpu_s):
    """What a timed-out test's record says: which limit it ran past."""
    if timer == "cpu":
        return f"timed out after {limit.cpu_s:.3g} CPU s"
    if limit.cut:
        return f"stopped at the {limit.cut} after {limit.wall_s:.3g}s ({cpu_s:.3g} CPU s used); its partial result dropped"
    return f"timed out at its wall cap of {limit.wall_s:.3g}s ({cpu_s:.3g} CPU s used: sleeping, blocked or starved)"


class Budget:
    """How much each test may use, counted in CPU seconds so that a busy machine traces the same tests as a quiet
    one. The overall `budget_s` (wall) is the hard bound. With `failing` ids named (they run first), the failing
    phase's CPU seconds (the run until they had run: start, imports, collection, their traced calls) say how slow
    this suite is: the passing tests after it get a window of `passing_share` of them (at least `passing_floor_s`,
    CPU) in all, and each one at most that phase's CPU (at least 1 s), so a slow suite stops sampling early and one
    slow passing test does not take the whole share. A passing test is not started once less than `start_share`
    of the median passing test so far is left of the window (`START_SHARE`); one started may use its own limit.

    With a fitted budget (`deadline`, `fit_s` after the runner's start: the caller's 3x the failing tests' own run +
    30 s, less what it pays outside this clock) the passing tests and the LDB phase also stop at a wall clock: none
    starts past it, one in flight is stopped there (`timeout`, dropped from the spectrum). The spectrum's failing
    tests are exempt (they are the evidence; the overall budget bounds them), and with an LDB phase to come its
    passing tests stop early by the failing tests' wall seconds, kept for the LDB phase to run them again in
    (`ldb_phase`: this is that phase's budget, which binds its failing tests too and keeps nothing back)."""

    def __init__(self, options, started, phase_floor=0.0, cpu_started=0.0, ldb_phase=False):
        self.cpu_started = cpu_started  # the CPU clock when this budget began (0.0: the process's own start)
        self.phase_floor = phase_floor  # the LDB phase: its limits are at least the spectrum phase's
        budget_s = options.get("budget_s", 600.0)
        self.overall = started + budget_s
        self.overall_name = f"overall budget of {budget_s:g}s (wall)"
        self.why = self.overall_name + " spent"
        self.deadline = options.get("deadline")  # the fitted budget's wall clock; None: none
        self.fit_why = f"fitted budget of {options.get('fit_s') or 0.0:.1f}s (wall)"
        self.ldb_phase = ldb_phase
        self.reserve = options.get("ldb") is not None and not ldb_phase  # the LDB phase's failing tests to come
        self.failing_wall_s = 0.0  # the failing tests' wall seconds so far
        self.per_test = options.get("per_test_timeout", 60.0)
        self.max_wall = 2 * self.per_test
        self.wall_cap = options.get("per_test_wall_s")  # a fixed wall cap instead of WALL_FACTOR's
        self.failing = options.get("failing")
        self.share = options.get("passing_share", 1.0)
        #: with the coverage pre-pass on, it runs first in a window of its own
        self.screen_share = options.get("screen_share", 0.5) if options.get("select") == "coverage" else None
        self.floor = options.get("passing_floor_s", 10.0)
        self.start_share = options.get("start_share", START_SHARE)
        self.passing_phase = False
        self.failing_phase_s = None  # the failing phase's CPU seconds, once the passing tests began
        self.window_end = None  # the CPU clock at which the open window (passing tests, or the pre-pass) ends
        self.window_why = ""
        self.costs = []  # the CPU seconds of each test run in the open window

    def limit(self, nodeid):
        """This test's `Limit`, or None: it is not started (`why` says why)."""
        now, cpu = time.time(), cpu_now()
        if self.failing is not None and not self.passing_phase and not any(covers(w, nodeid) for w in self.failing):
            self.passing_phase = True
            phase = self.failing_phase_s = max(cpu - self.cpu_started, self.phase_floor)
            self.per_test = min(self.per_test, max(1.0, phase))
            if self.screen_share is None:
                self.window(self.share, "passing-test")
            else:
                self.window(self.screen_share, "coverage pre-pass")
        bound, bound_why = self.bound()
        if now >= bound:
            self.why = bound_why + " spent"
            return None
        if self.window_end is not None:
            left = self.window_end - cpu
            if left <= 0:
                self.why = self.window_why
                return None
            typical = statistics.median(self.costs) if self.costs else 0.0
            if left < self.start_share * typical:
                self.why = (f"{self.window_why}: {left:.2f} CPU s left, under {self.start_share:g}x the median "
                            f"{typical:.2f} CPU s of the {len(self.costs)} tests run in it")
                return None
        wall = self.wall_cap if self.wall_cap is not None else min(
            max(WALL_FLOOR_S, WALL_FACTOR * self.per_test), max(self.max_wall, WALL_FLOOR_S))
        if bound - now < wall:
            return Limit(self.per_test, bound - now, bound_why)
        return Limit(self.per_test, wall)

    def bound(self):
        """The wall clock the next test must end by, and the budget's name: the overall one or, where it applies
        and is nearer, the fitted one (less the LDB phase's reserve while the spectrum's passing tests run)."""
        fitted = self.deadline is not None and (self.passing_phase or self.ldb_phase or self.failing is None)
        if not fitted:
            return self.overall, self.overall_name
        deadline = self.deadline - (self.failing_wall_s if self.reserve else 0.0)
        if deadline >= self.overall:
            return self.overall, self.overall_name
        reserve = f", less {self.failing_wall_s:.1f}s kept for the LDB phase" if self.reserve else ""
        return deadline, self.fit_why + reserve

    def ran(self, cpu_s, wall_s=0.0):
        """A started test's CPU seconds: the open window's typical test, for the start rule; a failing test's wall
        seconds: what the LDB phase's reserve holds."""
        if self.window_end is not None:
            self.costs.append(cpu_s)
        if not self.passing_phase:
            self.failing_wall_s += wall_s

    def window(self, share, what):
        """From now, `share` of the failing phase's CPU seconds (at least the floor); the overall wall budget still
        bounds it."""
        allowed = max(self.floor, share * self.failing_phase_s)
        self.window_end, self.costs = cpu_now() + allowed, []
        self.window_why = (f"{what} budget of {allowed:.1f} CPU s spent ({share:g}x the {self.failing_phase_s:.1f} "
                           f"CPU s until the failing tests had run, at least {self.floor:g})")


def _cut(text, limit=2000):
    text = str(text)
    return text if len(text) <= limit else "..." + text[-limit:]


class Plugin:
    """The pytest plugin: selects the requested ids, bounds time, traces call phases, writes one line per test."""

    def __init__(self, options, sink, tracer, started, ldb=None, screen=None):
        self.options = options
        self.sink = sink
        self.tracer = tracer
        self.budget = Budget(options, started)
        self.wanted = list(options["tests"])
        self.seen = set()
        self.collect_errors = {}
        self.collected = False
        self.current = None
        self.remaining = None  # the Limit left of the current test's timers
        self.ldb = ldb  # the LDB phase, run after the spectrum's tests in this session
        self.screen = screen  # the coverage pre-pass, where on
        self.phase = None  # "ldb" while it runs: its records say so
        self.screening = screen is not None  # until the pre-pass is over

    # -- selection ------------------------------------------------------------------------------------------------
    def pytest_collectreport(self, report):
        if report.failed:
            message = _cut(getattr(report, "longreprtext", "") or report.longrepr, 1500)
            self.collect_errors[report.nodeid] = message
            self.sink.write({"kind": "collect_error", "nodeid": report.nodeid, "message": message})

    def pytest_collection_modifyitems(self, session, config, items):
        """Keep the requested tests, in the order requested (failing ones first survive a short budget)."""
        order = {w: i for i, w in reversed(list(enumerate(self.wanted)))}
        prefixes = [w for w in self.wanted if w not in {item.nodeid for item in items}]  # a class id, a cut id
        rank = {}
        for item in items:
            matches = [order[item.nodeid]] if item.nodeid in order else [
                order[p] for p in prefixes if covers(p, item.nodeid)]
            if matches:
                rank[id(item)] = min(matches)
        deselected = [item for item in items if id(item) not in rank]
        items[:] = sorted((item for item in items if id(item) in rank), key=lambda item: rank[id(item)])
        if deselected:
            config.hook.pytest_deselected(items=deselected)
        self.collected = True
        if deselected:
            config.hook.pytest_deselected(items=deselected)

    # -- one test ---------------------------------------------------------------------------------------------------
    def pytest_runtest_protocol(self, item, nextitem):
        limit = self.budget.limit(item.nodeid)
        self.seen.add(item.nodeid)
        screen = self.screening and self.screen.takes(item.nodeid)
        if limit is None:
            record = {"kind": "test", "nodeid": item.nodeid, "outcome": "not_run", "message": self.budget.why}
            if screen:
                self.screen.keep(record, set())
            else:
                self.sink.write(dict(record, phase=self.phase) if self.phase else record)
            return True  # claims the item: pytest runs nothing of it
        self.current = {"kind": "test", "nodeid": item.nodeid, "outcome": "passed", "message": "", "frames": [],
                        "started": time.time(), "cpu_started": cpu_now(), "timed_out": None, "limit": limit}
        if self.phase:
            self.current["phase"] = self.phase
        if screen:
            self.current["screen"] = True
        self.tracer.begin(item.nodeid, screen=screen)
        on_timeout(self.alarm)
        self.remaining = limit  # the timers run during the test's phases only (`_timed`)
        return None

    def pytest_runtestloop(self, session):
        """After pytest's own loop ran the spectrum's tests: the LDB phase, its tests run again as items."""
        outcome = yield
        if outcome.excinfo is not None:
            return
        items = {item.nodeid: item for item in session.items}
        if self.screen is not None:
            self.screening = False
            chosen = self.screen.choose(self.budget)
            for index, nodeid in enumerate(chosen):
                nextitem = items.get(chosen[index + 1]) if index + 1 < len(chosen) else None
                items[nodeid].ihook.pytest_runtest_protocol(item=items[nodeid], nextitem=nextitem)
        if self.ldb is not None:
            self.ldb.run(lambda budget: self.ldb_runner(items, budget), self.budget)

    def ldb_runner(self, items, budget):
        """Runs one id of the LDB phase: a collected item through pytest's protocol, anything else (a script) as a
        plain call; `nextitem` is the id after it, so fixtures they share stay set up."""
        self.budget, self.phase = budget, "ldb"

        def run(nodeid, next_id):
            item = items.get(nodeid)
            if item is None:
                self.sink.write(_plain_one(nodeid, budget, self.tracer, "ldb"))
            else:
                item.ihook.pytest_runtest_protocol(item=item, nextitem=items.get(next_id))
                if self.current is not None:  # a test that ended its session early
                    self.finish_test()

        return run

    def alarm(self, signum, frame):
        if fired_early(signum):
            return
        if self.current is not None and not self.current["timed_out"]:
            self.current["timed_out"] = timer_of(signum)
        arm(Limit(2.0, 2.0))  # again, if the test swallowed it (and what its teardown may still take)
        raise TestTimeout("test exceeded its time limit")

    def _timed(self):
        """The per-test timers armed during a phase (setup, call, teardown) and paused between them: a timeout
        raised in pytest's own reporting of a failure would end the whole session (INTERNALERROR)."""
        armed = self.current is not None and self.remaining is not None
        if armed:
            arm(self.remaining)
        try:
            yield
        finally:
            if armed:
                self.remaining = disarm()

    def pytest_runtest_setup(self, item):
        yield from self._timed()

    def pytest_runtest_teardown(self, item, nextitem):
        yield from self._timed()

    def pytest_runtest_call(self, item):
        self.tracer.start()
        try:
            yield from self._timed()
        finally:
            self.tracer.stop()

    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        if self.current is None or call.excinfo is None or call.when == "teardown":
            return
        report = outcome.get_result()
        if report.skipped:
            return
        self.current["frames"] = _frames(call.excinfo.tb, self.tracer)
        self.current["message"] = _cut(call.excinfo.exconly(), 500)

    def pytest_runtest_logreport(self, report):
        test = self.current
        if test is None or report.nodeid != test["nodeid"]:
            return
        if report.when == "setup" and report.failed:
            test["outcome"] = "error"
        elif report.skipped and test["outcome"] == "passed":
            test["outcome"] = "xfailed" if hasattr(report, "wasxfail") else "skipped"
        elif report.when == "call" and report.failed:
            test["outcome"] = "failed"
        elif report.when == "teardown" and report.failed and test["outcome"] == "passed":
            test["outcome"] = "error"
        if report.when == "teardown":
            self.finish_test()

    def finish_test(self):
        disarm()
        test, self.current, self.remaining = self.current, None, None
        limit, timer = test.pop("limit"), test.pop("timed_out")
        cpu_s = cpu_now() - test.pop("cpu_started")
        if timer:
            test["outcome"] = "timeout"
            test["message"] = f"{timeout_message(timer, limit, cpu_s)}; {test['message']}"
        test["duration_s"] = round(time.time() - test.pop("started"), 3)
        test["cpu_s"] = round(cpu_s, 3)
        self.budget.ran(cpu_s, test["duration_s"])
        test["lines"], test["recent"], test["blocks"] = self.tracer.take()
        if test.pop("screen", False):
            self.screen.keep(test, self.tracer.take_entered())
        else:
            self.sink.write(test)

    def missing(self, code):
        """Requested ids that no collected test matched: an import error of their file, or not found."""
        for wanted in self.wanted:
            if any(covers(wanted, seen) for seen in self.seen):
                continue
            module = wanted.split("::", 1)[0]
            error = next((m for nodeid, m in self.collect_errors.items() if nodeid in (module, "")), None)
            if error is not None:
                line = {"outcome": "error", "message": "import error: " + error}
            elif not self.collected:
                line = {"outcome": "not_run", "message": f"pytest stopped before running tests (exit code {code});"
                                                         " its output is in the runner's log"}
            else:
                line = {"outcome": "not_found", "message": "no collected test has this id"}
            self.sink.write(dict(kind="test", nodeid=wanted, frames=[], lines={}, blocks={}, duration_s=0.0, **line))


def load_blocks(path):
    """pinpoint's `localization/blocks.py` (standard library only), shipped beside the runner: the same function
    spans and basic blocks as the host's."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("pinpoint_blocks", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _source(root, path):
    try:
        with open(os.path.join(root, path), encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def choose_targets(records, options, blocks):
    """What pinpoint's `ldb.trace_targets` and `collect_block_traces` choose from a spectrum, from its records:
    the `top` functions the spectrum ranks highest (module-level code counts, and has no blocks), split into
    blocks; the failing runs; up to `max_passing` passing runs that ran a target, spread evenly."""
    plan = options["ldb"]
    wanted = options.get("failing")
    failing = [r for r in records if r["outcome"] in FAILING
               and (wanted is None or any(covers(w, r["nodeid"]) for w in wanted))]
    passing = [r for r in records if r["outcome"] == "passed"]
    lines = line_spectrum([(r.get("lines") or {}, r.get("recent") or ()) for r in failing],
                          [(r.get("lines") or {}, ()) for r in passing])
    texts, spans, chosen = {}, {}, {}
    for path, line, *_ in lines:
        if len(chosen) >= plan.get("top", 3):
            break
        if path not in spans:
            texts[path] = _source(options["root"], path)
            try:
                spans[path] = blocks.function_spans(texts[path] or "")
            except (SyntaxError, ValueError):
                spans[path] = []
        span = blocks.innermost_function(spans[path], line)
        chosen.setdefault((path, span.qualname if span else "<module>"), span)
    targets = [blocks.function_blocks(texts[path], line=span.def_line, path=path).to_json()
               for (path, _name), span in chosen.items() if span is not None and texts[path] is not None]

    def runs_a_target(record):
        return any(set(range(t["first_line"], t["end_line"] + 1)) & set((record.get("lines") or {}).get(t["path"], ()))
                   for t in targets)

    chosen_passing = spread_evenly([r["nodeid"] for r in passing if runs_a_target(r)], plan.get("max_passing", 10))
    return targets, [r["nodeid"] for r in failing], chosen_passing


def choose_by_coverage(entered, k):
    """`k` of the screened tests by what they enter: `entered` holds, per test that passed, in pool order, the
    functions under test that the failing tests ran and it entered. Greedy: the test entering the most of them no
    chosen test entered yet, until none adds one; then the others that entered any, spread evenly. A test that
    entered none runs no line a failing test ran, so it can change no line's score: it is never chosen."""
    left = [(nodeid, found) for nodeid, found in entered if found]
    chosen, covered = [], set()
    while left and len(chosen) < k:
        best = max(left, key=lambda c: len(c[1] - covered))  # the first of equals, in pool order
        if not best[1] - covered:
            break
        chosen.append(best[0])
        covered |= best[1]
        left.remove(best)
    chosen += spread_evenly([nodeid for nodeid, _ in left], k - len(chosen))
    order = {nodeid: i for i, (nodeid, _) in enumerate(entered)}
    return sorted(chosen, key=order.get)


class Screen:
    """The coverage pre-pass (`"select": "coverage"`): the passing candidates run once after the failing tests
    with only their calls into the code those ran noted (no line tracer), in a window of the budget of their own;
    then `max_passing` of them, chosen by `choose_by_coverage`, run again as the spectrum's passing tests."""

    def __init__(self, options, sink, tracer):
        self.failing = options["failing"]
        self.max_passing = options.get("max_passing", 40)
        self.sink = sink
        self.tracer = tracer
        self.entered = []

    def takes(self, nodeid):
        return not any(covers(w, nodeid) for w in self.failing)

    def keep(self, record, entered):
        """A screened test's record: its outcome and how many of the failing tests' functions it entered."""
        self.sink.write({"kind": "screen", "nodeid": record["nodeid"], "outcome": record["outcome"],
                         "entered": len(entered), "duration_s": record.get("duration_s", 0.0)})
        if record["outcome"] == "passed":
            self.entered.append((record["nodeid"], entered))

    def choose(self, budget):
        """The passing tests to trace, and their budget's window opened."""
        self.tracer.screening = False
        chosen = choose_by_coverage(self.entered, self.max_passing)
        self.sink.write({"kind": "chosen", "tests": chosen, "screened": len(self.entered)})
        if budget.failing_phase_s is not None:
            budget.window(budget.share, "passing-test")
        return chosen


class LdbPhase:
    """LDB in the spectrum's own interpreter: once the spectrum's tests have run, its targets are chosen here
    (`choose_targets`) and the failing tests and the chosen passing ones run again, tracing only the targets'
    block states; their records say `"phase": "ldb"`. Its limits are those a separate LDB run had: a budget of
    its own, and a failing phase at least as long as the spectrum's (which held the interpreter's start, the
    imports and the collection a second run would pay again)."""

    def __init__(self, options, sink, tracer, started):
        self.options = options
        self.sink = sink
        self.tracer = tracer
        self.started = started
        self.done = False

    def run(self, make_runner, spectrum_budget):
        """`make_runner(budget)` gives `run(nodeid, next_id)`, which runs one id and writes its record;
        `spectrum_budget`: the spectrum phase's, which knows how long its failing phase took."""
        if self.done:
            return
        self.done = True
        blocks = load_blocks(self.options["ldb"]["blocks"])
        targets, failing, passing = choose_targets(self.sink.tests, self.options, blocks)
        now = time.time()
        self.sink.write({"kind": "ldb", "targets": targets, "failing": failing, "passing": passing,
                         "at": round(now - self.started, 3)})
        if not targets or not failing:
            return
        spectrum_phase = spectrum_budget.failing_phase_s
        self.tracer.set_targets(targets)
        self.tracer.failing = failing
        cpu = cpu_now()
        budget = Budget(dict(self.options, failing=failing, select=None), now, cpu_started=cpu,
                        phase_floor=cpu if spectrum_phase is None else spectrum_phase, ldb_phase=True)
        run = make_runner(budget)
        ids = failing + passing
        for index, nodeid in enumerate(ids):
            run(nodeid, ids[index + 1] if index + 1 < len(ids) else None)


def _own_lines(code):
    """The lines of a code object's own instructions (not its nested code's), less a line that holds only a
    `RESUME` (3.11+: the def line, which gives no line event): at least every line it can give an event for, so
    a test that has run them all can add no line (a line listed that never gives one only keeps it traced)."""
    import dis
    lines, line = set(), None
    for instruction in dis.get_instructions(code):
        start = instruction.starts_line
        if start is True:  # 3.13+: a flag, the number apart
            line = instruction.line_number
        elif start:
            line = start
        if line and instruction.opname != "RESUME":
            lines.add(line)
    return frozenset(lines)


def _frames(tb, tracer, keep=8):
    """The deepest `keep` frames of a traceback that lie in repository files: [path, line, function, source]."""
    frames = []
    for frame, line in traceback.walk_tb(tb):
        rel = tracer.relative(frame.f_code.co_filename)
        if rel is not None:
            frames.append([rel, line, frame.f_code.co_name])
    return frames[-keep:]


def _hooks(pytest, plugin):
    """Mark the plugin's generator hooks as hookwrappers (pytest.hookimpl exists in every pytest since 2.8)."""
    pytest.hookimpl(hookwrapper=True, tryfirst=True)(Plugin.pytest_runtest_call)
    pytest.hookimpl(hookwrapper=True, tryfirst=True)(Plugin.pytest_runtest_setup)
    pytest.hookimpl(hookwrapper=True, tryfirst=True)(Plugin.pytest_runtest_teardown)
    pytest.hookimpl(hookwrapper=True)(Plugin.pytest_runtest_makereport)
    pytest.hookimpl(tryfirst=True)(Plugin.pytest_runtest_protocol)
    pytest.hookimpl(hookwrapper=True)(Plugin.pytest_runtestloop)
    return plugin


def run_pytest(pytest, options, sink, tracer, started, ldb=None, screen=None):
    """The requested ids through pytest.main, in-process, with the plugin (the passing ones screened first where
    `screen` is given, the LDB phase after them where `ldb` is); returns the `end` record's fields."""
    plugin = _hooks(pytest, Plugin(options, sink, tracer, started, ldb, screen))
    sys.path.insert(0, options["root"])  # as `python -m pytest` does: the repository's own packages import
    files = list(dict.fromkeys(t.split("::", 1)[0] for t in options["tests"]))
    args = [*files, "-p", "no:cacheprovider", "--assert=plain", "-q", "--rootdir", options["root"],
            "--continue-on-collection-errors", *options.get("pytest_args", [])]
    status, error = "finished", ""
    try:
        code = pytest.main(args, plugins=[plugin])
    except BaseException as exc:  # an internal error of pytest or a test that killed the session
        code, status, error = -1, "error", _cut("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    if plugin.current is not None:
        plugin.finish_test()
    plugin.missing(code)
    return {"status": status, "error": error, "exit_code": int(code), "pytest": getattr(pytest, "__version__", "?")}


#: exceptions by class name that mean a test did not fail (sympy's own testing helpers, unittest's skip)
PLAIN_OUTCOMES = {"Skipped": "skipped", "SkipTest": "skipped", "XFail": "xfailed"}


#: a requested id naming a script to run whole, as one test (the agent's reproduction): `script::/abs/path.py`
SCRIPT_PREFIX = "script::"


def _script_test(path):
    """Run `path` as `__main__`; exiting with status 0 passes, like returning."""
    import runpy

    def run():
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise

    return run


def _plain_test(nodeid):
    """The callable a `path::name` or `path::Class::name` id names, its module imported as a package module."""
    if nodeid.startswith(SCRIPT_PREFIX):
        return _script_test(nodeid[len(SCRIPT_PREFIX):])
    parts = nodeid.split("::")
    if "[" in nodeid or len(parts) not in (2, 3):
        raise LookupError("only plain `file::function` or `file::Class::method` ids run without pytest")
    module = importlib.import_module(parts[0][:-3].replace("/", "."))
    target = getattr(module, parts[1])
    return getattr(target(), parts[2]) if len(parts) == 3 else target


def run_plain(options, sink, tracer, started, why, ldb=None, screen=None):
    """Without pytest (sympy's environments have none): each id is imported (not traced, as collection) and called
    with the tracer on (the passing ones screened first where `screen` is given), then the LDB phase where `ldb`
    is; fixtures and parametrized ids need pytest and are reported so."""
    sys.path.insert(0, options["root"])
    budget = Budget(options, started)
    for nodeid in options["tests"]:
        if screen is not None and screen.takes(nodeid):
            record = _plain_one(nodeid, budget, tracer, screen=True)
            screen.keep(record, record.pop("entered", set()))
        else:
            sink.write(_plain_one(nodeid, budget, tracer))
    for nodeid in screen.choose(budget) if screen is not None else ():
        sink.write(_plain_one(nodeid, budget, tracer))
    if ldb is not None:
        ldb.run(lambda ldb_budget: lambda nodeid, _next: sink.write(_plain_one(nodeid, ldb_budget, tracer, "ldb")),
                budget)
    return {"status": "finished", "error": "", "exit_code": 0, "pytest": f"none ({why}); plain calls"}


def _plain_one(nodeid, budget, tracer, phase=None, screen=False):
    """One id imported and called under the tracer, within its budget: its record (screened: with the functions
    it `entered`)."""
    record = {"kind": "test", "nodeid": nodeid, "outcome": "passed", "message": "", "frames": [], "lines": {},
              "blocks": {}, "duration_s": 0.0}
    if phase:
        record["phase"] = phase
    began, cpu = time.time(), cpu_now()
    limit = budget.limit(nodeid)
    if limit is None:
        return dict(record, outcome="not_run", message=budget.why)
    try:
        test = _plain_test(nodeid)
    except LookupError as exc:
        return dict(record, outcome="not_found", message=str(exc))
    except Exception as exc:
        return dict(record, outcome="error", message=_cut(f"import error: {type(exc).__name__}: {exc}", 1500))
    tracer.begin(nodeid, screen=screen)
    record.update(_call_plain(test, tracer, limit))
    record["duration_s"] = round(time.time() - began, 3)
    record["cpu_s"] = round(cpu_now() - cpu, 3)
    budget.ran(record["cpu_s"], record["duration_s"])
    record["lines"], record["recent"], record["blocks"] = tracer.take()
    if screen:
        record["entered"] = tracer.take_entered()
    return record


def _call_plain(test, tracer, limit):
    """One plain call within its `Limit`: {} when it passed, else its outcome, message and frames."""
    began = cpu_now()

    def alarm(signum, frame):
        if fired_early(signum):
            return
        arm(Limit(2.0, 2.0))  # again, if the test swallowed it
        raise TestTimeout(timeout_message(timer_of(signum), limit, cpu_now() - began))

    on_timeout(alarm)
    arm(limit)
    tracer.start()
    try:
        test()
        return {}
    except BaseException as exc:
        name = type(exc).__name__
        outcome = "timeout" if isinstance(exc, TestTimeout) else PLAIN_OUTCOMES.get(name, "failed")
        return {"outcome": outcome, "message": _cut(f"{name}: {exc}", 500), "frames": _frames(exc.__traceback__, tracer)}
    finally:
        tracer.stop()
        disarm()


# -- mutation mode (MBFL) -----------------------------------------------------------------------------------------
# `{"mode": "mutants", ...}`: the tests are collected (or, without pytest, imported) once; then for the unmutated
# program ("original") and each mutant a forked child swaps one function's code object for its mutated version and
# runs the failing tests and the mutant's passing tests, writing one line per test back through a pipe. The parent
# kills a child past `per_mutant_timeout`, and writes one `mutant` record per child to the sink.

def _code_lines(code):
    """Every line a code object and the code nested in it runs."""
    import dis
    lines = {line for _, line in dis.findlinestarts(code) if line}
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            lines |= _code_lines(const)
    return lines


def _chain(code, line):
    """Index paths (into co_consts) of the code objects containing `line`, outermost first."""
    out, path = [], ()
    while True:
        inner = None
        for index, const in enumerate(code.co_consts):
            if hasattr(const, "co_code"):
                lines = _code_lines(const)
                if lines and const.co_firstlineno <= line <= max(lines):
                    inner = index, const
                    break
        if inner is None:
            return out
        path, code = path + (inner[0],), inner[1]
        out.append((path, code))


def _at(code, path):
    for index in path:
        code = code.co_consts[index]
    return code


class Functions:
    """The live function objects by (real file, name, first line), indexed once before any child forks."""

    def __init__(self, paths):
        import gc
        import types
        wanted = {os.path.realpath(p) for p in paths}
        self.index = {}
        real = {}
        for obj in gc.get_objects():
            if type(obj) is types.FunctionType:
                code = obj.__code__
                name = real.setdefault(code.co_filename, os.path.realpath(code.co_filename))
                if name in wanted:
                    self.index.setdefault((name, code.co_name, code.co_firstlineno), []).append(obj)

    def swap(self, root, mutant):
        """Put the mutant into the live program: the outermost live function containing its line gets the mutated
        code object. Returns None, or why the mutant cannot be swapped in."""
        path = os.path.realpath(os.path.join(root, mutant["path"]))
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        new_text = text[: mutant["start"]] + mutant["replacement"] + text[mutant["end"]:]
        try:
            old, new = compile(text, path, "exec"), compile(new_text, path, "exec")
        except (SyntaxError, ValueError) as exc:
            return f"does not compile: {type(exc).__name__}"
        for index_path, code in _chain(old, mutant["line"]):
            live = self.index.get((path, code.co_name, code.co_firstlineno))
            if not live:
                continue
            try:
                replacement = _at(new, index_path)
                for function in live:
                    function.__code__ = replacement
            except (IndexError, ValueError, TypeError) as exc:  # a changed closure, a shifted structure
                return f"cannot swap the code object: {type(exc).__name__}"
            return None
        return "no live function holds this line (module level, or not imported)"


def _import_targets(root, paths):
    """Import the modules of the mutated files where the tests have not (a lazily imported submodule)."""
    loaded = {os.path.realpath(getattr(m, "__file__", "") or ""): m for m in list(sys.modules.values())}
    for rel in paths:
        if os.path.realpath(os.path.join(root, rel)) in loaded:
            continue
        parts = rel[:-3].split("/")
        if parts[-1] == "__init__":
            parts.pop()
        for start in range(len(parts)):
            try:
                importlib.import_module(".".join(parts[start:]))
                break
            except Exception:
                continue


class Mutations:
    """Forks one child per mutant after the tests are loaded; `run_test(test)` runs one test in the child and
    returns its record (`outcome`, `exc`, `message`)."""

    def __init__(self, options, sink, started, run_test):
        self.options = options
        self.sink = sink
        self.run_test = run_test
        self.deadline = started + options.get("budget_s", 600.0)
        self.per_mutant = options.get("per_mutant_timeout", 60.0)
        self.baseline = {}

    def run_all(self, tests):
        """`tests`: requested id -> the runnable tests it names (pytest items, or callables)."""
        root = self.options["root"]
        paths = sorted({m["path"] for m in self.options["mutants"]})
        _import_targets(root, paths)
        functions = Functions([os.path.join(root, p) for p in paths])
        failing = [t for w in self.options["failing"] for t in tests.get(w, [])]
        passing_all = [t for w in self.options["passing"] for t in tests.get(w, [])]
        base = self.child({"id": "original"}, None, failing, passing_all, stop=None)
        self.baseline = {r["nodeid"]: r for r in base.get("tests", [])}
        for mutant in self.options["mutants"]:
            if time.time() > self.deadline:
                self.sink.write({"kind": "mutant", "id": mutant["id"], "status": "not_run", "tests": []})
                continue
            mine = [t for w in mutant["passing"] for t in tests.get(w, [])]
            self.child(mutant, functions, failing, mine, stop=self.options.get("stop_after_kills", 1))

    def child(self, mutant, functions, failing, passing, stop):
        """One forked run; the parent keeps what the child wrote before it ended or was killed."""
        began = time.time()
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(read_end)
            code = 0
            try:
                self.in_child(mutant, functions, failing, passing, stop, write_end)
            except BaseException as exc:
                code = 3
                os.write(write_end, (json.dumps({"crash": _cut(f"{type(exc).__name__}: {exc}", 300)}) + "\n").encode())
            os._exit(code)
        os.close(write_end)
        raw, status = self.collect(pid, read_end, began)
        records = [json.loads(line) for line in raw.decode("utf-8", "replace").splitlines() if line.startswith("{")]
        note = next((r["unswappable"] for r in records if "unswappable" in r), None)
        crash = next((r["crash"] for r in records if "crash" in r), "")
        tests = [r for r in records if "nodeid" in r]
        record = {"kind": "mutant", "id": mutant["id"], "status": "unswappable" if note else status,
                  "note": note or crash, "seconds": round(time.time() - began, 3), "tests": tests}
        self.sink.write(record)
        return record

    def collect(self, pid, read_end, began):
        """Read the child's lines until it closes its end or passes its time; then reap it."""
        import select
        chunks, status = [], "ok"
        while True:
            left = began + self.per_mutant - time.time()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                status = "timeout"
                break
            ready, _, _ = select.select([read_end], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(read_end, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
        os.close(read_end)
        _, code = os.waitpid(pid, 0)
        if status == "ok" and code != 0:
            status = "crash"
        return b"".join(chunks), status

    def in_child(self, mutant, functions, failing, passing, stop, out):
        def emit(record):
            data = (json.dumps(record, default=str) + "\n").encode()
            while data:
                data = data[os.write(out, data):]

        if functions is not None:
            why = functions.swap(self.options["root"], mutant)
            if why:
                emit({"unswappable": why})
                return
        kills = 0
        for index, test in enumerate(failing + passing):
            record = self.run_test(test)
            record["message"] = normalize_message(record.get("message", ""))
            emit(record)
            if index >= len(failing) and stop is not None:
                base = self.baseline.get(record["nodeid"])
                kills += base is None or _key(base) != _key(record)
                if kills >= stop:
                    return


def _key(record):
    return record.get("outcome") == "passed", record.get("exc", ""), record.get("message", "")


class MutationPlugin:
    """pytest's side of mutation mode: selects the requested tests like `Plugin`, then takes over the run loop."""

    def __init__(self, options, sink, started):
        self.options = options
        self.wanted = list(options["failing"]) + list(options["passing"])
        self.collected = False
        self.mutations = Mutations(options, sink, started, self.run_item)
        self.per_test = options.get("per_test_timeout", 60.0)
        self.current = None
        self.session = None

    pytest_collection_modifyitems = Plugin.pytest_collection_modifyitems

    def pytest_runtestloop(self, session):
        self.session = session
        items = list(session.items)
        tests = {w: [i for i in items if covers(w, i.nodeid)] for w in self.wanted}
        self.mutations.run_all(tests)
        return True

    def run_item(self, item):
        self.current = {"nodeid": item.nodeid, "outcome": "passed", "exc": "", "message": ""}
        if hasattr(signal, "SIGALRM"):
            signal.signal(signal.SIGALRM, self.alarm)
            signal.setitimer(signal.ITIMER_REAL, self.per_test)
        try:
            item.ihook.pytest_runtest_protocol(item=item, nextitem=None)
        finally:
            if hasattr(signal, "SIGALRM"):
                signal.setitimer(signal.ITIMER_REAL, 0)
        return self.current

    def alarm(self, signum, frame):
        signal.setitimer(signal.ITIMER_REAL, 2.0)
        raise TestTimeout(f"test exceeded its {self.per_test:g}s timeout")

    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if self.current is not None and call.excinfo is not None and not report.skipped and not self.current["exc"]:
            self.current["exc"] = call.excinfo.typename
            self.current["message"] = _cut(call.excinfo.exconly(), 500)

    def pytest_runtest_logreport(self, report):
        test = self.current
        if test is None or report.nodeid != test["nodeid"]:
            return
        if report.failed:
            test["outcome"] = "error" if report.when != "call" else "failed"
        elif report.skipped and test["outcome"] == "passed":
            test["outcome"] = "skipped"


def run_mutants_pytest(pytest, options, sink, started):
    plugin = MutationPlugin(options, sink, started)
    pytest.hookimpl(hookwrapper=True)(MutationPlugin.pytest_runtest_makereport)
    pytest.hookimpl(tryfirst=True)(MutationPlugin.pytest_runtestloop)
    sys.path.insert(0, options["root"])
    files = list(dict.fromkeys(t.split("::", 1)[0] for t in plugin.wanted))
    # assertion rewriting on (no tracer runs here): a failed `assert a == b` says its values, so a mutant that
    # changes what a failing test computes changes its message
    args = [*files, "-p", "no:cacheprovider", "-q", "--rootdir", options["root"],
            "--continue-on-collection-errors", *options.get("pytest_args", [])]
    try:
        code = pytest.main(args, plugins=[plugin])
        status, error = "finished", ""
    except BaseException as exc:
        code, status, error = -1, "error", _cut("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    return {"status": status, "error": error, "exit_code": int(code), "pytest": getattr(pytest, "__version__", "?")}


def run_mutants_plain(options, sink, started, why):
    """Without pytest: each id imported once in the parent, then called in each child."""
    sys.path.insert(0, options["root"])
    per_test = options.get("per_test_timeout", 60.0)
    tests = {}
    for nodeid in list(options["failing"]) + list(options["passing"]):
        try:
            tests[nodeid] = [(nodeid, _plain_test(nodeid))]
        except Exception:
            tests[nodeid] = []

    def run_test(test):
        nodeid, function = test
        result = _call_plain(function, _NoTracer(), Limit(per_test, per_test))
        message = result.get("message", "")
        return {"nodeid": nodeid, "outcome": result.get("outcome", "passed"),
                "exc": message.split(":", 1)[0] if message else "", "message": message}

    Mutations(options, sink, started, run_test).run_all(tests)
    return {"status": "finished", "error": "", "exit_code": 0, "pytest": f"none ({why}); plain calls"}


class _NoTracer:
    """No coverage in mutation mode: `_call_plain`'s tracer slot, its frames left empty."""

    def relative(self, filename):
        return None

    def start(self):
        pass

    def stop(self):
        pass


def main_mutants(options, sink, started):
    try:
        import pytest
    except ImportError as exc:
        return run_mutants_plain(options, sink, started, f"import error: {exc}")
    return run_mutants_pytest(pytest, options, sink, started)


def main(argv):
    started = time.time()
    with open(argv[1], encoding="utf-8") as handle:
        options = json.load(handle)
    sink = Sink(options["output"])
    sink.write({"kind": "start", "python": sys.version.split()[0], "pid": os.getpid()})
    if options.get("fit_s") is not None:  # the fitted budget on this clock: imports and collection count in it
        options["deadline"] = started + options["fit_s"]
    sys.dont_write_bytecode = True
    os.chdir(options["root"])
    if options.get("mode") == "mutants":
        end = main_mutants(options, sink, started)
        sink.write(dict(kind="end", seconds=round(time.time() - started, 3), **end))
        return 0
    tracer = Tracer(options["root"], options)
    scripts = [t for t in options["tests"] if t.startswith(SCRIPT_PREFIX)]
    options["tests"] = [t for t in options["tests"] if not t.startswith(SCRIPT_PREFIX)]
    ldb = LdbPhase(options, sink, tracer, started) if options.get("ldb") else None
    screen = Screen(options, sink, tracer) if options.get("select") == "coverage" and options.get("failing") else None
    if scripts:  # first: they are the failing evidence, and a short budget must keep them
        end = run_plain(dict(options, tests=scripts), sink, tracer, started, "scripts run whole",
                        None if options["tests"] else ldb)
    if options["tests"] or not scripts:
        try:
            import pytest
        except ImportError as exc:
            end = run_plain(options, sink, tracer, started, f"import error: {exc}", ldb, screen)
        else:
            end = run_pytest(pytest, options, sink, tracer, started, ldb, screen)
    sink.write(dict(kind="end", seconds=round(time.time() - started, 3), **end))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
