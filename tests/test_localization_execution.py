"""Execution-grounded localization (localization.execution, localization.ldb): the trace runner on a small real
repository in a LocalRuntime, its spectrum and block traces, and one real SWE-bench dev instance in its container."""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pinpoint.environments.local import LocalRuntime
from pinpoint.localization import spectrum_rules, trace_runner
from pinpoint.localization.execution import (
    BLOCKS_MODULE,
    RUN_ENV,
    SPECTRUM_RULES,
    TRACE_RUNNER,
    ExecutionEvidence,
    Sources,
    SpectrumLocalizer,
    TracedTest,
    TraceLimits,
    collect_spectrum,
    parse_results,
    qualify_test_ids,
    rank_files,
    rank_functions,
    rank_lines,
    run_traced,
    sample_passing,
)
from pinpoint.localization.ldb import (
    LdbLocalizer,
    abstract,
    block_prompt,
    collect_block_traces,
    failing_trace,
    ldb_suspects,
    llm_block_verdicts,
    llm_ldb_suspects,
    parse_block_verdicts,
    trace_targets,
)
from pinpoint.localization.spectrum_rules import covers, dstar, ochiai
from pinpoint.localization.suspects import LocalizationRequest

CALC = """\
def mean(values):
    if not values:
        return 0.0
    total = 0
    for v in values:
        total += v
    count = len(values)
    if count > 3:
        count += 1
    return total / count


def describe(values):
    return f"mean={mean(values)}"
"""
TESTS = """\
from pkg.calc import describe, mean


def test_empty():
    assert mean([]) == 0.0


def test_small():
    assert mean([1, 2, 3]) == 2


def test_describe():
    assert describe([2]) == "mean=2.0"


def test_large():
    assert mean([1, 2, 3, 4]) == 2.5


def test_negative():
    assert mean([-1, -3]) == -2
"""
SLOW = """\
import time


def test_sleeps():
    time.sleep(600)


def test_short_sleep():
    time.sleep(1.5)


def test_spins():
    while True:
        pass
"""
#: passing tests that each use 0.3 CPU seconds, then run `mean` on lists whose sizes reach different lines (size 0
#: its early return, 4 and more the `count > 3` branch only the failing test takes): which of them are traced
#: shows in the spectrum's scores
WORK = """\
import time

import pytest
from pkg.calc import mean


@pytest.mark.parametrize("size", [1, 2, 0, 4, 5, 6, 7, 8])
def test_work(size):
    began = time.process_time()
    while time.process_time() - began < 0.3:
        pass
    assert mean(list(range(1, size + 1))) >= 0
"""
WORK_IDS = [f"tests/test_work.py::test_work[{n}]" for n in (1, 2, 0, 4, 5, 6, 7, 8)]
OTHER = """\
def test_unrelated():
    assert sorted([2, 1]) == [1, 2]
"""
BROKEN = """\
import pkg.does_not_exist


def test_never_runs():
    pass
"""
PASSING = ["tests/test_calc.py::test_empty", "tests/test_calc.py::test_small", "tests/test_calc.py::test_describe",
           "tests/test_calc.py::test_negative"]
FAILING = ["tests/test_calc.py::test_large"]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args], check=True,
                   capture_output=True)


@pytest.fixture(scope="module")
def calc_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("calc-repo")
    files = {"pkg/__init__.py": "", "pkg/calc.py": CALC, "tests/test_calc.py": TESTS, "tests/test_slow.py": SLOW,
             "tests/test_broken.py": BROKEN, "tests/test_other.py": OTHER, "tests/test_work.py": WORK, "conftest.py": ""}  # the root conftest puts the root on sys.path
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "calc")
    return repo


@pytest.fixture
def runtime(calc_repo: Path):
    with LocalRuntime(calc_repo) as rt:
        yield rt


def test_the_failing_tests_covered_only_line_ranks_first(runtime):
    evidence = collect_spectrum(runtime, FAILING, PASSING, python=sys.executable)
    assert evidence.status == "finished" and evidence.python == sys.version.split()[0]
    assert {t.nodeid: t.outcome for t in evidence.tests} == {**{p: "passed" for p in PASSING}, FAILING[0]: "failed"}
    lines = rank_lines(evidence)
    assert (lines[0].path, lines[0].line, lines[0].ef, lines[0].ep) == ("pkg/calc.py", 9, 1, 0)
    assert lines[0].ochiai == 1.0 and lines[0].score > lines[1].score
    assert all(not s.path.startswith("tests/") for s in lines)  # the tests' own lines are no suspects
    with_tests = rank_lines(evidence, include_tests=True)  # ... which only the failing test runs
    assert ("tests/test_calc.py", 17) in {(s.path, s.line) for s in with_tests if s.score == 1.0}
    assert rank_lines(evidence, "dstar")[0].line == 9
    functions = rank_functions(lines, Sources(runtime))
    assert functions[0].name == "mean" and rank_files(lines) == [("pkg/calc.py", 1.0)]

    suspects = SpectrumLocalizer(evidence, runtime).localize(LocalizationRequest())
    assert (suspects[0].path, suspects[0].start_line, suspects[0].end_line) == ("pkg/calc.py", 9, 9)
    assert suspects[0].signal == "spectrum" and "run by 1/1 failing, 0/4 passing tests" in suspects[0].evidence
    assert (suspects[1].start_line, suspects[1].end_line) == (1, 10)  # mean's span, right after its best line


def test_tracing_leaves_the_tree_clean_and_changes_no_outcome(runtime):
    tests = FAILING + PASSING
    evidence = run_traced(runtime, tests, python=sys.executable)
    assert runtime.diff() == ""
    assert runtime.run("git status --porcelain --ignored").output.strip() == ""  # no caches, no bytecode
    plain = runtime.run(f"PYTHONDONTWRITEBYTECODE=1 {sys.executable} -m pytest -p no:cacheprovider -rA -q "
                        + " ".join(tests), timeout=120)
    expected = {t: "passed" if f"PASSED {t}" in plain.output else "failed" for t in tests}
    assert {t.nodeid: t.outcome for t in evidence.tests} == expected


def test_a_test_past_its_timeout_and_a_module_failing_at_import_give_clear_partial_results(runtime):
    tests = ["tests/test_slow.py::test_sleeps", "tests/test_broken.py::test_never_runs", *FAILING,
             "tests/test_calc.py::test_no_such_test"]
    evidence = run_traced(runtime, tests, per_test_timeout=2, python=sys.executable,
                          limits=TraceLimits(per_test_wall_s=3.0))
    runs = {t.nodeid: t for t in evidence.tests}
    assert evidence.status == "finished"
    sleeper = runs["tests/test_slow.py::test_sleeps"]  # it uses no CPU: its wall cap ends it
    assert sleeper.outcome == "timeout" and "timed out at its wall cap of 3s" in sleeper.message
    assert sleeper.cpu_s < 2 <= sleeper.duration_s
    broken = runs["tests/test_broken.py::test_never_runs"]
    assert broken.outcome == "error" and broken.message.startswith("import error: ")
    assert "pkg.does_not_exist" in broken.message
    assert runs[FAILING[0]].outcome == "failed" and 9 in runs[FAILING[0]].lines["pkg/calc.py"]
    assert runs["tests/test_calc.py::test_no_such_test"].outcome == "not_found"


def test_passing_tests_trace_only_the_code_the_failing_tests_ran_and_the_spectrum_stays_the_same(runtime):
    tests = FAILING + PASSING
    full = run_traced(runtime, tests, python=sys.executable)
    focused = run_traced(runtime, tests, failing=FAILING, python=sys.executable)
    describe = next(t for t in focused.tests if t.nodeid.endswith("::test_describe"))
    assert describe.outcome == "passed" and 14 not in describe.lines["pkg/calc.py"]  # describe: no failing test ran it
    assert 10 in describe.lines["pkg/calc.py"] and "tests/test_calc.py" not in describe.lines
    assert 14 in next(t for t in full.tests if t.nodeid.endswith("::test_describe")).lines["pkg/calc.py"]
    assert focused.failing[0].lines == full.failing[0].lines and focused.failing[0].recent == full.failing[0].recent

    def spectrum(evidence):
        return [(s.path, s.line, s.ef, s.ep, s.score) for s in rank_lines(evidence, include_tests=True)]

    assert spectrum(focused) == spectrum(full)
    untraced = run_traced(runtime, tests, trace=False, python=sys.executable)
    assert [(t.nodeid, t.outcome) for t in untraced.tests] == [(t.nodeid, t.outcome) for t in full.tests]
    assert all(not t.lines for t in untraced.tests) and untraced.failing[0].frames  # the failure still said


def test_tests_past_the_overall_budget_are_not_run(runtime):
    tests = ["tests/test_slow.py::test_short_sleep", *PASSING]
    evidence = run_traced(runtime, tests, budget_s=1.0, python=sys.executable)
    outcomes = [t.outcome for t in evidence.tests]
    assert evidence.status == "finished" and len(outcomes) == len(tests)
    assert outcomes[1:] == ["not_run"] * len(PASSING)  # each starts after the sleep that outlasts the budget
    assert all("overall budget" in t.message for t in evidence.tests if t.outcome == "not_run")


def test_a_slow_passing_test_is_cut_at_the_failing_phases_cpu_and_the_sample_goes_on(runtime):
    tests = [*FAILING, "tests/test_slow.py::test_spins", *PASSING]
    evidence = run_traced(runtime, tests, failing=FAILING, python=sys.executable)
    runs = {t.nodeid: t for t in evidence.tests}
    assert runs[FAILING[0]].outcome == "failed" and evidence.status == "finished"
    spinner = runs["tests/test_slow.py::test_spins"]  # cut at the failing phase's CPU seconds, not its 60 s
    assert spinner.outcome == "timeout" and "CPU s;" in spinner.message and spinner.cpu_s < 30
    assert [runs[t].outcome for t in PASSING] == ["passed"] * len(PASSING)  # one slow test takes not the whole share
    assert rank_lines(evidence)[0].failed == 1 and rank_lines(evidence)[0].passed == len(PASSING)


def test_the_passing_tests_get_the_failing_phases_share_of_cpu_and_none_starts_without_half_a_typical_test(
        monkeypatch):
    cpu, wall = [0.0], [1000.0]
    monkeypatch.setattr(trace_runner, "cpu_now", lambda: cpu[0])
    monkeypatch.setattr(trace_runner.time, "time", lambda: wall[0])
    budget = trace_runner.Budget({"failing": ["t.py::f"], "passing_share": 1.0, "passing_floor_s": 10.0}, 1000.0)
    cpu[0], wall[0] = 3.0, 1003.0
    assert budget.limit("t.py::f") == trace_runner.Limit(60.0, 120.0)  # a failing test: its own CPU limit, a wall cap of twice it
    cpu[0], wall[0] = 30.0, 1200.0  # 30 CPU s of failing phase, on a loaded machine: the wall does not count
    assert budget.limit("t.py::p1") == trace_runner.Limit(30.0, 120.0)  # each passing test at most the phase's CPU, 10x as wall
    for _ in range(13):
        budget.ran(2.0)  # 13 passing tests of 2 CPU s each (and 1 s between them)
    cpu[0] = 57.0
    assert budget.limit("t.py::p14") == trace_runner.Limit(30.0, 120.0)  # 3 of 30 CPU s left, over half a typical test: it starts
    budget.ran(2.2)  # and may use its own limit, not only what was left
    cpu[0] = 59.2
    assert budget.limit("t.py::p15") is None  # 0.8 CPU s left: under half the median test's 2 CPU s, not started
    assert "passing-test budget of 30.0 CPU s spent" in budget.why and "0.80 CPU s left, under 0.5x the median 2.00" \
        in budget.why
    wall[0] = 1700.0
    assert budget.limit("t.py::p5") is None and "overall budget of 600s (wall)" in budget.why
    assert trace_runner.Budget({"failing": None}, 1700.0).limit("t.py::p").cpu_s == 60.0  # no failing: no share


def test_a_cpu_timer_that_fires_before_the_limit_is_used_is_rearmed_not_a_timeout():
    """ITIMER_PROF is charged by scheduler ticks and fires early on a busy machine: its signal is checked against
    the precise process clock, so a test's CPU limit is what it was given whatever the load."""
    import signal
    try:
        trace_runner.arm(trace_runner.Limit(0.3, 30.0))
        assert trace_runner.fired_early(signal.SIGPROF)  # 0.3 CPU s not used yet: re-armed for the rest
        assert 0 < signal.getitimer(signal.ITIMER_PROF)[0] <= 0.31  # (rounded up to the timer's tick)
        assert not trace_runner.fired_early(signal.SIGALRM)  # the wall cap is never second-guessed
        begun = time.process_time()
        while time.process_time() - begun < 0.31:
            signal.setitimer(signal.ITIMER_PROF, 0)  # keep the real timer out of this test's way
        assert not trace_runner.fired_early(signal.SIGPROF)  # used up: a real timeout
    finally:
        left = trace_runner.disarm()
    assert left.cpu_s == 0.0 and 0 < left.wall_s <= 30.0


def _cpu_burners(n: int) -> list[subprocess.Popen]:
    """`n` processes that keep a core busy each: a loaded machine."""
    return [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(n)]


def test_a_loaded_machine_traces_the_same_passing_tests_and_ranks_the_same_and_the_rest_are_not_run(runtime):
    tests = [*FAILING, *WORK_IDS]  # 0.3 CPU s each, in a passing window of 1 CPU s: three fit, the fourth does not
    limits = TraceLimits(passing_share=0.0, passing_floor_s=1.0)

    def traced():
        evidence = run_traced(runtime, tests, failing=FAILING, python=sys.executable, limits=limits)
        spectrum = [(s.path, s.line, s.ef, s.ep, s.score) for s in rank_lines(evidence, include_tests=True)]
        return evidence, [(t.nodeid, t.outcome) for t in evidence.tests], spectrum

    quiet, quiet_outcomes, quiet_spectrum = traced()
    burners = _cpu_burners(2)
    try:
        loaded, loaded_outcomes, loaded_spectrum = traced()
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert loaded_outcomes == quiet_outcomes and loaded_spectrum == quiet_spectrum
    assert [outcome for _, outcome in quiet_outcomes] == ["failed"] + ["passed"] * 3 + ["not_run"] * 5
    cut = [t for t in quiet.tests if t.outcome == "not_run"]  # never started with a sliver left: no timeout
    assert "CPU s left, under 0.5x the median" in cut[0].message or "CPU s spent" in cut[0].message
    assert all(t.cpu_s >= 0.3 for t in quiet.passing)


def test_without_pytest_plain_test_functions_are_called_under_the_tracer(runtime, tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    python = str(tmp_path / "bare" / "bin" / "python")  # no pytest in it, as in sympy's environments
    tests = [*FAILING, *PASSING[:2], "tests/test_broken.py::test_never_runs", "tests/test_calc.py::test_x[1]"]
    evidence = run_traced(runtime, tests, failing=FAILING, python=python)
    runs = {t.nodeid: t for t in evidence.tests}
    assert evidence.status == "finished" and evidence.pytest.startswith("none (import error: ")
    assert [runs[t].outcome for t in tests[:3]] == ["failed", "passed", "passed"]
    assert rank_lines(evidence)[0].line == 9 and runs[FAILING[0]].frames[-1].path == "tests/test_calc.py"
    assert runs[tests[3]].outcome == "error" and "pkg.does_not_exist" in runs[tests[3]].message
    assert runs[tests[4]].outcome == "not_found" and "without pytest" in runs[tests[4]].message
    assert runtime.diff() == ""


def test_a_runner_that_died_midway_keeps_the_tests_it_finished():
    raw = ('{"kind": "start", "python": "3.9.2", "pid": 1}\n'
           '{"kind": "test", "nodeid": "t.py::a", "outcome": "failed", "lines": {"m.py": [3]}, "frames": '
           '[["m.py", 3, "f"]]}\n{"kind": "test", "nodeid": "t.py::b", "outc')
    evidence = parse_results(raw, requested=["t.py::a", "t.py::b"])
    assert evidence.status == "error" and "stopped early" in evidence.error
    assert [t.nodeid for t in evidence.tests] == ["t.py::a"] and evidence.tests[0].frames[0].function == "f"
    assert parse_results("", requested=["t.py::a"]).error.startswith("the trace runner wrote nothing")


def test_spectrum_formulas_and_the_passing_sample():
    assert ochiai(2, 0, 2) == 1.0 and ochiai(0, 5, 2) == 0.0 and ochiai(1, 3, 1) == 0.5
    assert dstar(2, 0, 2) == 8.0 and dstar(1, 1, 2) == 0.5
    failing = ["a.py::t1"]
    passing = [f"a.py::p{i:02d}" for i in range(20)] + [f"b.py::q{i}" for i in range(5)] + failing
    sample = sample_passing(failing, passing, limit=6)
    assert sample == ["a.py::p00", "a.py::p03", "a.py::p06", "a.py::p10", "a.py::p13", "a.py::p16"]
    assert sample_passing(failing, passing, limit=22)[-2:] == ["b.py::q0", "b.py::q2"]
    files = {"tests/test_m.py": "def test_one():\n    pass\n\nclass TestX:\n    def test_two(self):\n        pass\n"}
    assert qualify_test_ids(["test_one", "test_two", "tests/x.py::y", "test_gone"], files) == [
        "tests/test_m.py::test_one", "tests/test_m.py::TestX::test_two", "tests/x.py::y", "test_gone"]


def test_block_traces_find_the_block_whose_values_only_the_failing_run_has(runtime):
    spectrum = collect_spectrum(runtime, FAILING, PASSING, python=sys.executable)
    targets = trace_targets(spectrum, Sources(runtime), top=2)
    assert [t.span.qualname for t in targets] == ["mean", "describe"] or targets[0].span.qualname == "mean"
    traces = collect_block_traces(runtime, spectrum, targets, python=sys.executable)
    mean = traces.functions["pkg/calc.py::mean"]
    trace = failing_trace(traces, mean.key)
    assert trace is not None and trace.steps[-1].returned == "2.0" and trace.omitted > 0
    assert trace.steps[-2].state["count"] == "5"  # the state after `count += 1`, the block before the return

    suspects = LdbLocalizer(traces).localize(LocalizationRequest())
    assert suspects == ldb_suspects(traces)
    assert (suspects[0].path, suspects[0].start_line, suspects[0].end_line) == ("pkg/calc.py", 9, 9)
    assert suspects[0].signal == "ldb" and "count=5" in suspects[0].evidence
    assert "ran in 1/1 failing and 0/" in suspects[0].evidence


def test_the_llm_verdict_reads_one_reply_for_all_blocks_and_ignores_garbage(runtime):
    spectrum = collect_spectrum(runtime, FAILING, PASSING, python=sys.executable)
    traces = collect_block_traces(runtime, spectrum, trace_targets(spectrum, Sources(runtime), top=1),
                                  python=sys.executable)
    mean = traces.functions["pkg/calc.py::mean"]
    trace = failing_trace(traces, mean.key)
    asked: list[str] = []

    def ask(prompt: str) -> str:
        asked.append(prompt)
        wrong = next(i for i, s in enumerate(trace.steps) if mean.blocks[s.block].start_line == 9)
        return f"Sure.\nBLOCK-0: correct - checks for empty input\nBLOCK-{wrong}: Wrong: count must stay len(values)"

    verdicts = llm_block_verdicts(ask, mean, CALC, trace, task="mean of the values", failure="assert 2.0 == 2.5")
    assert len(asked) == 1 and "[BLOCK-0]" in asked[0] and "count += 1" in asked[0] and "# after:" in asked[0]
    assert "mean of the values" in asked[0] and f"{trace.omitted} blocks omitted" in asked[0]
    assert [v.verdict for v in verdicts] == ["correct", "wrong"]
    suspects = llm_ldb_suspects(verdicts, mean)
    assert [(s.start_line, s.end_line) for s in suspects] == [(9, 9)] and "count must stay" in suspects[0].evidence
    assert llm_block_verdicts(lambda p: "I cannot tell.", mean, CALC, trace) == []
    assert llm_block_verdicts(lambda p: 1 / 0, mean, CALC, trace) == []  # a failing client: no verdicts, no crash
    assert block_prompt(mean, CALC, trace).count("[BLOCK-") == len(trace.steps)


def test_verdict_parser_and_value_abstraction():
    assert parse_block_verdicts("BLOCK-1: correct - fine\nblock 2 -> WRONG, off by one\nBLOCK-9: wrong", 3) == {
        1: ("correct", "fine"), 2: ("wrong", "off by one")}
    ldb_json = '[{"block": "BLOCK-0", "correct": false, "explanation": "bad"}, {"block": "BLOCK-1", "correct": true}]'
    assert parse_block_verdicts(ldb_json, 2) == {0: ("wrong", "bad"), 1: ("correct", "")}
    assert parse_block_verdicts("{not json} <<>>", 2) == {} and parse_block_verdicts("", 2) == {}
    assert [abstract(v) for v in ("None", "-3", "0", "7", "2.5", "''", "'x'", "[]", "[1]", "Foo(a=1)",
                                  "<Bar object>")] == [
        "None", "int<0", "int=0", "int>0", "float>0", "str:empty", "str", "list:empty", "list", "Foo", "Bar"]


def test_only_the_expected_failures_are_failing_runs_and_the_summary_counts_outcomes():
    tests = [TracedTest("t::a", "failed"), TracedTest("t::b", "passed"), TracedTest("t::net", "error")]
    evidence = ExecutionEvidence(tests=tests, status="finished", seconds=1.25)
    assert evidence.summary() == "3 tests traced (1 error, 1 failed, 1 passed) in 1.2s, finished"
    assert [t.nodeid for t in evidence.failing] == ["t::a", "t::net"] and evidence.outcome("t::b") == "passed"
    evidence.expected_failing = ["t::a"]  # t::net was sampled as passing and failed for reasons of its own
    assert [t.nodeid for t in evidence.failing] == ["t::a"]
    assert [t.nodeid for t in evidence.unexpected_failures] == ["t::net"]
    assert covers("t.py::T", "t.py::T::test_a") and covers("t.py::test_a[x", "t.py::test_a[x y]")
    assert not covers("t.py::test_a", "t.py::test_ab") and covers("t.py::test_a", "t.py::test_a[1]")


def test_the_shipped_runner_is_standalone_and_shares_its_rules_with_the_host():
    """trace_runner.py is copied into the container as a file and run with the repository's own Python: it imports
    the standard library only (pytest lazily, inside a function) besides spectrum_rules.py, copied beside it, which
    imports the standard library only; so does blocks.py, shipped beside it for its LDB phase. The host ranks with
    the very rules the runner chooses its LDB targets by."""
    for module in (TRACE_RUNNER, SPECTRUM_RULES, BLOCKS_MODULE):
        tree = ast.parse(module.read_text())
        top = {alias.name.split(".")[0] for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
        top |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
                and not node.module.startswith("pinpoint.")}  # the runner's host fallback is checked below
        assert top <= sys.stdlib_module_names | {"__future__", "spectrum_rules"}, top - sys.stdlib_module_names
    assert trace_runner.covers is spectrum_rules.covers and trace_runner.line_spectrum is spectrum_rules.line_spectrum


def test_traced_runs_pin_what_the_graded_run_pins():
    """RUN_ENV is EVAL_ENV's interpreter settings (every one but pip's, which only the graded reinstall reads) plus
    no bytecode; a copy, as execution.py does not import the harness's scripts module (it pulls in swebench)."""
    from pinpoint.swebench_eval.scripts import EVAL_ENV

    interpreter = {k: v for k, v in EVAL_ENV.items() if not k.startswith("PIP_")}
    assert interpreter.items() <= RUN_ENV.items()
    assert set(RUN_ENV) - set(interpreter) == {"PYTHONDONTWRITEBYTECODE"}  # traced runs leave no .pyc in the repository


# -- one real SWE-bench dev instance in its container -----------------------------------------------------------------
#: small and quick (Python 3.9, ~45 tests in under a second); its two FAIL_TO_PASS tests run the fixed line and
#: one passing test does, so Ochiai puts it in a 7-way tie for first (see the report in docs)
INSTANCE = "psf__requests-6028"


@pytest.mark.docker
def test_spectrum_in_a_real_instance_container_ranks_a_gold_line_in_the_top_10(docker_client):
    from pinpoint.environments.docker_runtime import DockerRuntime
    from pinpoint.swebench_eval.datasets import load_instances
    from pinpoint.swebench_eval.images import build_instance_image
    from pinpoint.swebench_eval.metrics import patch_gold_lines

    instance = load_instances(ids=[INSTANCE])[0]
    image = build_instance_image(instance).tag
    with DockerRuntime(image, workdir="/testbed", network=False) as runtime:
        runtime.write_file("/tmp/pinpoint-test.patch", instance.test_patch)
        assert runtime.run("git apply /tmp/pinpoint-test.patch").ok
        before = runtime.diff()
        evidence = collect_spectrum(runtime, list(instance.FAIL_TO_PASS), list(instance.PASS_TO_PASS), ldb_top=2)
        assert runtime.diff() == before  # tracing wrote nothing into the repository
        assert evidence.status == "finished", evidence.log_tail
        assert all(evidence.outcome(t) == "failed" for t in instance.FAIL_TO_PASS)
        assert evidence.passing
        gold = patch_gold_lines(instance.patch)
        top = [(s.path, s.line) for s in rank_lines(evidence)[:10]]
        assert any(line in gold.get(path, ()) for path, line in top), top

        traces = evidence.block_traces  # the same interpreter's LDB phase: what a second run gives
        assert traces is not None and traces.status == "finished" and traces.python.startswith("3.")
        assert any(failing_trace(traces, key) is not None for key in traces.functions)
        _same_traces(traces, collect_block_traces(runtime, evidence, trace_targets(evidence, Sources(runtime), top=2)))
        assert runtime.diff() == before


def _same_traces(one: ExecutionEvidence, two: ExecutionEvidence) -> None:
    """Two LDB runs traced the same: targets, tests, outcomes, block states and the suspects from them."""
    assert one.functions == two.functions
    assert [(t.nodeid, t.outcome, t.blocks, t.lines) for t in one.tests] == [
        (t.nodeid, t.outcome, t.blocks, t.lines) for t in two.tests]
    assert ldb_suspects(one) == ldb_suspects(two)


@pytest.mark.parametrize("bare", [False, True], ids=["pytest", "plain calls"])
def test_one_interpreter_chooses_the_ldb_targets_itself_and_traces_what_a_second_run_did(runtime, tmp_path, bare):
    """The spectrum's run goes on to the LDB phase (targets chosen in the box from its own records, by the host's
    rules) and gives the block states that choosing host-side and running a second interpreter gives."""
    python = sys.executable
    if bare:  # no pytest in it, as in sympy's environments
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
        python = str(tmp_path / "bare" / "bin" / "python")
    spectrum = collect_spectrum(runtime, FAILING, PASSING, python=python)
    targets = trace_targets(spectrum, Sources(runtime), top=3)
    separate = collect_block_traces(runtime, spectrum, targets, python=python)
    one = collect_spectrum(runtime, FAILING, PASSING, python=python, ldb_top=3)
    assert one.status == "finished" and rank_lines(one) == rank_lines(spectrum)
    assert [t.nodeid for t in one.tests] == [t.nodeid for t in spectrum.tests]  # the LDB phase's runs kept apart
    traces = one.block_traces
    assert traces is not None and traces.status == "finished" and list(traces.functions) == [t.key for t in targets]
    assert [t.nodeid for t in traces.failing] == FAILING and traces.passing
    _same_traces(traces, separate)
    assert traces.seconds > 0 and one.seconds > 0
    assert runtime.diff() == ""
    none_failing = collect_spectrum(runtime, ["tests/test_calc.py::test_small"], PASSING, python=python, ldb_top=3)
    assert none_failing.block_traces is None  # nothing failed: no targets, no LDB phase


@pytest.mark.parametrize("bare", [False, True], ids=["pytest", "plain calls"])
def test_passing_tests_chosen_by_coverage_skip_a_test_that_enters_no_function_the_failing_tests_ran(runtime, tmp_path,
                                                                                                    bare):
    python = sys.executable
    if bare:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
        python = str(tmp_path / "bare" / "bin" / "python")
    unrelated = "tests/test_other.py::test_unrelated"
    by_file = collect_spectrum(runtime, FAILING, [unrelated, *PASSING], python=python, max_passing=5)
    assert unrelated in [t.nodeid for t in by_file.passing]  # sampled by file, it costs a traced run for nothing
    evidence = collect_spectrum(runtime, FAILING, [unrelated, *PASSING], python=python, max_passing=3,
                                select="coverage", ldb_top=1)
    assert evidence.status == "finished" and (evidence.screened, evidence.screened_entering) == (5, 4)
    traced = [t.nodeid for t in evidence.passing]
    assert len(traced) == 3 and unrelated not in traced and set(traced) <= set(PASSING)
    assert [t.outcome for t in evidence.tests if t.nodeid not in traced] == ["failed"]  # none marked not run
    assert rank_lines(evidence)[0].line == 9 and evidence.block_traces is not None
    assert "5 passing candidates screened, 4 entering" in evidence.summary()
    with pytest.raises(ValueError, match="select must be"):
        collect_spectrum(runtime, FAILING, PASSING, select="random")


def test_choosing_by_coverage_takes_the_widest_new_coverage_first_then_spreads_and_never_takes_a_test_entering_none():
    entered = [("a", {1}), ("b", {1, 2}), ("c", set()), ("d", {3}), ("e", {1}), ("f", {2}), ("g", {1, 3})]
    assert trace_runner.choose_by_coverage(entered, 2) == ["b", "d"]  # {1, 2} first, then 3
    assert trace_runner.choose_by_coverage(entered, 4) == ["a", "b", "d", "f"]  # then a, e, f, g spread: a, f
    assert "c" not in trace_runner.choose_by_coverage(entered, 10) and trace_runner.choose_by_coverage([], 3) == []


def test_the_runners_test_path_rule_is_retrievals():
    from pinpoint.localization.retrieval import is_test_path

    for path in ("tests/a.py", "pkg/test/b.py", "testing/c.py", "pkg/test_d.py", "pkg/e_test.py", "pkg/conftest.py",
                 "conftest.py", "pkg/testsuite.py", "pkg/tests.py", "pkg/m.py", "src/contest.py"):
        assert trace_runner.excluded_path(path) == (is_test_path(path) or path.rsplit("/", 1)[-1] == "conftest.py")


def _helper(x):
    if x > 0:
        return x + 1
    return -x


def _loop(n):
    total = 0
    for i in range(n):
        total += _helper(i - 2)
    return total


def test_a_passing_test_stops_tracing_a_function_once_it_has_run_every_line_of_it_and_records_the_same_lines():
    def traced(failing):
        tracer = trace_runner.Tracer(str(Path(__file__).parent), {"failing": failing})
        tracer.files[_helper.__code__.co_filename] = "h.py"
        tracer.reached |= {_helper.__code__, _loop.__code__}
        tracer.begin("t::passing")
        tracer.start()
        _loop(50)
        tracer.stop()
        return tracer

    full, focused = traced(None), traced(["t::failing"])
    assert focused.complete == {_helper.__code__, _loop.__code__}  # every line run: later calls untraced
    assert focused.take()[0] == full.take()[0]


def test_the_overhead_lab_refuses_unknown_variants_in_one_line(capsys):
    from pinpoint_lab.localization import tracer_overhead

    assert tracer_overhead.main(["row", "--variants", "old,fast"]) == 2
    assert tracer_overhead.main(["row", "--variants", "old"]) == 2  # 'old' needs --old
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("tracer_overhead: --variants takes old, new, coverage") for line in err)
