"""The traced run's fitted budget (issue 27): where the failing tests' own untraced run is known, the spectrum +
LDB run stops its passing tests and its LDB phase at 3x that run + 30 s, less what it pays outside the runner's
clock; the failing tests always run first and are exempt. On the small real repository of
test_localization_execution (LocalRuntime) and the runner's Budget on fake clocks."""

from __future__ import annotations

import sys

import pytest
from pinpoint.environments.local import LocalRuntime
from pinpoint.localization import trace_runner
from pinpoint.localization.execution import OwnRun, own_run, rank_lines, run_traced
from pinpoint.localization.failing_tests import ExecutionSignals, FailingTests
from test_localization_execution import FAILING, PASSING, calc_repo  # noqa: F401 (the repository fixture)

SLEEPER = "tests/test_slow.py::test_sleeps"  # a passing test that sleeps 600 s: a row's slow passing test


@pytest.fixture
def runtime(calc_repo):  # noqa: F811 (the imported fixture)
    with LocalRuntime(calc_repo) as rt:
        yield rt


def test_a_slow_passing_test_stops_at_the_fitted_budget_and_the_failing_tests_line_still_ranks_first(runtime):
    own = own_run(runtime, FAILING, python=sys.executable)
    assert own.seconds > 0 and 0 <= own.outside_s <= own.seconds
    fit = own.fit_s(slack_s=2.0, reserve_s=0.0)  # 3x the own run + 2 s: far under the sleeper's 10 s wall cap
    evidence = run_traced(runtime, [*FAILING, SLEEPER, *PASSING], failing=FAILING, python=sys.executable,
                          ldb_top=1, fit_s=fit)
    runs = {t.nodeid: t for t in evidence.tests}
    assert evidence.status == "finished" and runs[FAILING[0]].outcome == "failed"
    sleeper = runs[SLEEPER]  # stopped in flight (or, on a slow machine, never started) at the fitted budget
    assert sleeper.outcome in ("timeout", "not_run") and "fitted budget" in sleeper.message, sleeper.message
    if sleeper.outcome == "timeout":
        assert "stopped at the fitted budget" in sleeper.message and "partial result dropped" in sleeper.message
    assert all(runs[t].outcome == "not_run" and "fitted budget" in runs[t].message for t in PASSING)
    lines = rank_lines(evidence)  # the sleeper's partial run is no passing run: the failing test's lines rank first
    assert (lines[0].score, lines[0].ef, lines[0].passed) == (1.0, 1, 0)
    assert ("pkg/calc.py", 9) in {(s.path, s.line) for s in lines if s.score == lines[0].score}
    traces = evidence.block_traces  # the LDB phase: its failing test in the time kept for it, or cut at the budget
    assert traces is not None and [t.nodeid for t in traces.tests] == FAILING
    assert traces.tests[0].outcome == "failed" or "fitted budget" in traces.tests[0].message
    assert evidence.wall_s >= evidence.seconds and evidence.outside_s >= 0


def test_oracle_tests_are_timed_untraced_first_and_the_run_records_its_fitted_budget(runtime):
    execution = ExecutionSignals(runtime, FailingTests("oracle", FAILING, PASSING, python=sys.executable))
    execution.collect()
    record = execution.record()["own_run"]
    assert record["seconds"] > 0 and record["fit_s"] == round(execution.own.fit_s(), 2)
    assert [t.outcome for t in execution.spectrum.tests] == ["failed"] + ["passed"] * len(PASSING)  # 30 s: room
    command = ExecutionSignals(runtime, FailingTests("command", FAILING, [], python=sys.executable))
    command.collect()  # a command's selection may be a whole suite: not run twice, the fixed budget bounds it
    assert command.own is None and "own_run" not in command.record()
    unfitted = ExecutionSignals(runtime, FailingTests("oracle", FAILING, PASSING, python=sys.executable), fit=False)
    unfitted.collect()
    assert unfitted.own is None


def test_the_fitted_budget_binds_passing_tests_and_the_ldb_phase_but_not_the_spectrums_failing_tests(monkeypatch):
    cpu, wall = [0.0], [1000.0]
    monkeypatch.setattr(trace_runner, "cpu_now", lambda: cpu[0])
    monkeypatch.setattr(trace_runner.time, "time", lambda: wall[0])
    options = {"failing": ["t.py::f"], "fit_s": 20.0, "deadline": 1020.0, "ldb": {"top": 1}}
    budget = trace_runner.Budget(options, 1000.0)
    wall[0] = 1030.0  # past the fitted budget: a failing test still runs, under the overall budget
    assert budget.limit("t.py::f") == trace_runner.Limit(60.0, 120.0)
    budget.ran(1.0, 4.0)  # the failing test took 4 s of wall: kept for the LDB phase
    assert budget.limit("t.py::p") is None and budget.why == (
        "fitted budget of 20.0s (wall), less 4.0s kept for the LDB phase spent")
    budget = trace_runner.Budget(options, 1000.0)
    wall[0] = 1001.0
    budget.ran(0.5, 2.0)
    wall[0], cpu[0] = 1012.0, 1.0  # 6 s left before the reserve: the passing test's wall cap is cut to them
    assert budget.limit("t.py::p") == trace_runner.Limit(1.0, 6.0, "fitted budget of 20.0s (wall), less 2.0s kept "
                                                                   "for the LDB phase")
    assert "stopped at the fitted budget" in trace_runner.timeout_message("wall", budget.limit("t.py::p"), 0.1)
    ldb = trace_runner.Budget(options, 1010.0, ldb_phase=True)  # its failing test bound too, nothing kept back
    assert ldb.limit("t.py::f") == trace_runner.Limit(60.0, 8.0, "fitted budget of 20.0s (wall)")
    wall[0] = 1021.0
    assert ldb.limit("t.py::f") is None and "fitted budget of 20.0s (wall) spent" in ldb.why
    assert trace_runner.Budget({"failing": ["t.py::f"]}, 1000.0).limit("t.py::p") is not None  # none: unbound


def test_the_fitted_budget_is_3x_the_own_run_plus_30_s_less_what_is_paid_outside_the_runners_clock_and_after_it():
    assert OwnRun(2.0, 1.5).fit_s() == 6.0 + 30.0 - 1.5 - 5.0 and OwnRun(0.1, 40.0).fit_s() == 0.0
    assert OwnRun(2.0, 0.5).fit_s(factor=1.0, slack_s=0.0, reserve_s=0.0) == 1.5


INSTANCE = "psf__requests-6028"
#: a passing test written into the instance's tree: it sleeps far past any budget
SLOW_TEST = "tests/test_pinpoint_sleeps.py"


@pytest.mark.docker
def test_in_a_real_instance_container_a_slow_passing_test_stops_at_the_fitted_budget(docker_client):
    from pinpoint.environments.docker_runtime import DockerRuntime
    from pinpoint.swebench_eval.datasets import load_instances
    from pinpoint.swebench_eval.images import build_instance_image

    instance = load_instances(ids=[INSTANCE])[0]
    with DockerRuntime(build_instance_image(instance).tag, workdir="/testbed", network=False) as runtime:
        runtime.write_file("/tmp/pinpoint-test.patch", instance.test_patch)
        assert runtime.run("git apply /tmp/pinpoint-test.patch").ok
        runtime.write_file(SLOW_TEST, "import time\n\n\ndef test_sleeps():\n    time.sleep(600)\n")
        failing, passing = list(instance.FAIL_TO_PASS), list(instance.PASS_TO_PASS)[:5]
        own = own_run(runtime, failing)
        evidence = run_traced(runtime, [*failing, f"{SLOW_TEST}::test_sleeps", *passing], failing=failing,
                              ldb_top=1, fit_s=own.fit_s(slack_s=3.0, reserve_s=0.0))
    runs = {t.nodeid: t for t in evidence.tests}
    assert evidence.status == "finished", evidence.log_tail
    assert all(runs[t].outcome == "failed" for t in failing)
    sleeper = runs[f"{SLOW_TEST}::test_sleeps"]
    assert sleeper.outcome in ("timeout", "not_run") and "fitted budget" in sleeper.message, sleeper.message
    assert all(runs[t].outcome == "not_run" and "fitted budget" in runs[t].message for t in passing)
    lines = rank_lines(evidence)  # the failing tests' lines, none of the sleeper's partial run
    assert lines and lines[0].ef == len(failing) and lines[0].passed == 0
