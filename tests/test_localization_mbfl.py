"""Targeted MBFL: outcome normalization, Metallaxis and MUSE on hand-made outcomes, the tie-break, mutant planning,
the trace runner's mutation mode on a small repository (with and without pytest), and one real instance's box."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from pinpoint.environments.local import LocalRuntime
from pinpoint.localization.execution import LineScore, Sources, collect_spectrum, rank_lines
from pinpoint.localization.mbfl import (
    MbflConfig,
    MbflLocalizer,
    MutantResult,
    PlannedMutant,
    TestOutcome,
    collect_mbfl,
    line_scores,
    mbfl_suspects,
    normalize_message,
    plan_mutants,
    tie_break,
)
from pinpoint.localization.mutations import Source
from pinpoint.localization.suspects import Suspect
from test_localization_execution import CALC, FAILING, PASSING, TESTS, _git

FAULT_LINE = 9  # `count += 1` in CALC: only the failing test's input reaches it


# -- normalization -----------------------------------------------------------------------------------------------------
def test_messages_lose_addresses_ids_temp_paths_timings_and_ports():
    a = ("AssertionError: <Session object at 0x7f3a2b1c> != None in /tmp/pytest-of-root/pytest-12/test_x0/f.py "
         "after 0.53s (pid=4242, request 123456789, localhost:40211)")
    b = ("AssertionError: <Session object at 0x55aa01> != None in /tmp/pytest-of-root/pytest-99/test_x0/f.py "
         "after 1.07s (pid=17, request 987654321, localhost:5000)")
    assert normalize_message(a) == normalize_message(b)
    assert "0x7f3a2b1c" not in normalize_message(a) and "/tmp/" not in normalize_message(a)
    # what the failure says stays: another value is another outcome
    assert normalize_message("assert 2.0 == 2.5") != normalize_message("assert 3.0 == 2.5")
    assert normalize_message("a\n   b") == "a b" and len(normalize_message("x" * 1000)) == 300


def test_outcome_keys_compare_pass_fail_type_and_normalized_message_only():
    one = TestOutcome("t", "failed", "KeyError", "KeyError: <obj at 0x1234>")
    assert one.key == TestOutcome("t", "failed", "KeyError", "KeyError: <obj at 0xffff>").key
    assert one.key != TestOutcome("t", "failed", "TypeError", "KeyError: <obj at 0x1234>").key
    assert one.key != TestOutcome("t", "passed").key
    assert TestOutcome("t", "error", "E").key[0] is False  # an error is not a pass


# -- scores on hand-made outcomes ----------------------------------------------------------------------------------------
def _mutant(line: int, op: str = "wrong_operator") -> PlannedMutant:
    return PlannedMutant("m.py", line, op, line * 10, line * 10 + 1, "-", "h")


def _result(line: int, status: str = "ok", op: str = "wrong_operator", **tests: tuple[str, str, str]) -> MutantResult:
    return MutantResult(_mutant(line, op), status, {k: TestOutcome(k, *v) for k, v in tests.items()})


BASE = {"f1": TestOutcome("f1", "failed", "AssertionError", "assert 1 == 2"),
        "f2": TestOutcome("f2", "failed", "AssertionError", "assert 3 == 4"),
        "p1": TestOutcome("p1", "passed"), "p2": TestOutcome("p2", "passed")}


def test_metallaxis_and_muse_on_hand_made_outcomes():
    results = [
        # line 1: makes f1 pass, f2 fail differently; kills no passing test
        _result(1, f1=("passed", "", ""), f2=("failed", "AssertionError", "assert 5 == 4"), p1=("passed", "", "")),
        # line 2: changes f1, kills p1
        _result(2, f1=("failed", "TypeError", "boom"), f2=("failed", "AssertionError", "assert 3 == 4"),
                p1=("failed", "E", "x")),
        # line 3: changes nothing a failing test sees (the address differs only), kills p2
        _result(3, f1=("failed", "AssertionError", "assert 1 == 2"), f2=("failed", "AssertionError", "assert 3 == 4"),
                p2=("failed", "E", "y")),
        # line 4: hangs before any test reports; never swapped mutants do not count
        _result(4, "timeout"), _result(5, "unswappable"),
    ]
    scores = line_scores(results, BASE, ["f1", "f2"])
    assert set(scores) == {("m.py", 1), ("m.py", 2), ("m.py", 3), ("m.py", 4)}
    assert scores[("m.py", 1)].metallaxis == pytest.approx(2 / math.sqrt(2 * 2))  # fk 2, pk 0
    assert scores[("m.py", 2)].metallaxis == pytest.approx(1 / math.sqrt(2 * 2))  # fk 1, pk 1
    assert scores[("m.py", 3)].metallaxis == 0.0
    assert scores[("m.py", 4)].metallaxis == pytest.approx(2 / math.sqrt(2 * 2))  # a hang changes both
    # MUSE: all f2p = 1 (line 1), all p2f = 2 (lines 2 and 3); each line's sum over (its mutants + 1)
    assert scores[("m.py", 1)].muse == pytest.approx((1 / 1) / 2)
    assert scores[("m.py", 2)].muse == pytest.approx((-1 / 2) / 2)
    assert scores[("m.py", 3)].muse == pytest.approx((-1 / 2) / 2)
    # lines 1 and 4 tie on Metallaxis: MUSE decides (line 1 made a failing test pass), before the spectrum's order
    assert [s.start_line for s in mbfl_suspects(scores, order=[("m.py", 4), ("m.py", 1)])] == [1, 4, 2, 3]


def test_a_mutant_that_crashes_the_harness_is_unknown_neither_implicating_nor_clearing_its_line():
    # a mutant of `_pytest/` stops the in-process pytest: its tests never report (or report half); that says
    # nothing about the line, so the line keeps only its other mutants' evidence
    crash = _result(1, "crash", op="a", f1=("failed", "AssertionError", "assert 1 == 2"))
    clean = _result(1, op="b", f1=("failed", "AssertionError", "assert 1 == 2"),
                    f2=("failed", "AssertionError", "assert 3 == 4"))
    scores = line_scores([crash, clean, _result(2, "crash")], BASE, ["f1", "f2"])
    assert set(scores) == {("m.py", 1)}  # line 2's only mutant crashed: unknown, not killing
    assert scores[("m.py", 1)].mutants == 1 and scores[("m.py", 1)].metallaxis == 0.0
    assert crash.ran and not crash.informative  # it ran (cost, counts) but is not evidence


def test_metallaxis_takes_a_lines_best_mutant_and_muse_averages_them():
    results = [_result(1, op="a", f1=("passed", "", ""), f2=("passed", "", "")),
               _result(1, op="b", f1=("failed", "AssertionError", "assert 1 == 2"),
                       f2=("failed", "AssertionError", "assert 3 == 4"))]
    score = line_scores(results, BASE, ["f1", "f2"])[("m.py", 1)]
    assert score.metallaxis == pytest.approx(1.0) and score.mutants == 2 and score.killing == 1
    assert score.muse == pytest.approx((2 / 2 + 0) / 3)


def test_the_tie_break_orders_tied_spectrum_lines_and_never_crosses_an_ochiai_gap():
    spectrum = [Suspect("m.py", 5, 5, 1.0, "spectrum"), Suspect("m.py", 6, 6, 1.0, "spectrum"),
                Suspect("m.py", 7, 7, 1.0, "spectrum"), Suspect("m.py", 1, 9, 1.0, "spectrum"),
                Suspect("m.py", 8, 8, 0.9, "spectrum")]
    results = [_result(6, f1=("passed", "", "")), _result(8, f1=("passed", "", ""), f2=("passed", "", "")),
               _result(5, f1=("failed", "AssertionError", "assert 1 == 2"))]
    broken = tie_break(spectrum, line_scores(results, BASE, ["f1", "f2"]))
    # line 6's mutant changes a failing test: it leads its tie; line 5's changed nothing and line 7 has none:
    # they keep their order; line 8 (Metallaxis 1.0) stays below the 1.0 group, Ochiai's gap is never crossed
    assert [(s.start_line, s.end_line) for s in broken] == [(6, 6), (5, 5), (7, 7), (1, 9), (8, 8)]
    assert all(a.score >= b.score for a, b in zip(broken, broken[1:], strict=False))


# -- planning ----------------------------------------------------------------------------------------------------------
def test_mutants_are_planned_only_at_the_top_lines_breadth_first_and_all_parse():
    sources = Sources(files={"pkg/calc.py": CALC})
    top = [LineScore("pkg/calc.py", n, 1.0 - n / 100, 0, 0, 1, 0, 1, 1) for n in (9, 8, 7, 2)]
    planned = plan_mutants(top, sources, MbflConfig(top_lines=3, per_line=2, cache_dir=None))
    assert {m.line for m in planned} <= {9, 8, 7}
    assert [m.line for m in planned[:3]] == [9, 8, 7]  # every line once before any line twice
    assert max(sum(m.line == n for m in planned) for n in (9, 8, 7)) <= 2
    for m in planned:
        new = CALC[: m.start] + m.replacement + CALC[m.end:]
        assert new != CALC and not Source(new).tree.root_node.has_error
        assert CALC.count("\n", 0, m.start) + 1 == m.line
    assert len({m.id for m in planned}) == len(planned)


# -- the runner's mutation mode ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def calc_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("mbfl-calc")
    for path, text in {"pkg/__init__.py": "", "pkg/calc.py": CALC, "tests/test_calc.py": TESTS,
                       "conftest.py": ""}.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "calc")
    return repo


def _run(calc_repo: Path, cache: Path, python: str) -> None:
    with LocalRuntime(calc_repo) as runtime:
        evidence = collect_spectrum(runtime, FAILING, PASSING, python=python)
        assert evidence.failing
        config = MbflConfig(cache_dir=cache)
        mutation = collect_mbfl(runtime, evidence, Sources(runtime), config, python=python)
        assert mutation.status == "finished", mutation.error
        assert mutation.ran == len(mutation.results) > 0
        assert all(r.status == "ok" for r in mutation.results), [(r.status, r.note) for r in mutation.results]
        assert not runtime.diff()  # mutants live in the forked children only
        top = MbflLocalizer(mutation, evidence).localize(None)
        assert top[0].start_line == FAULT_LINE and top[0].score > top[-1].score
        again = collect_mbfl(runtime, evidence, Sources(runtime), config, python=python)
        assert again.ran == 0 and all(r.cached for r in again.results)
        assert MbflLocalizer(again, evidence).localize(None) == top


def test_mutants_run_forked_in_one_process_rank_the_fault_first_and_are_cached(calc_repo, tmp_path):
    _run(calc_repo, tmp_path / "cache", sys.executable)


def test_without_pytest_the_mutants_call_the_tests_directly(calc_repo, tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    _run(calc_repo, tmp_path / "cache", str(tmp_path / "bare" / "bin" / "python"))


def test_a_mutant_that_hangs_is_killed_at_its_timeout_and_counts_as_a_change(calc_repo, tmp_path):
    with LocalRuntime(calc_repo) as runtime:
        evidence = collect_spectrum(runtime, FAILING, PASSING, python=sys.executable)
        start = CALC.index("v in values")
        hang = PlannedMutant("pkg/calc.py", 5, "test_hang", start, start + len("v in values"),
                             "v in iter(int, 1)", "h")  # an endless loop
        from pinpoint.localization.mbfl import run_mutants
        mutation = run_mutants(runtime, evidence, [hang], MbflConfig(cache_dir=None, budget_s=30),
                               python=sys.executable)
        (result,) = mutation.results
        assert result.status == "timeout"
        assert line_scores(mutation.results, mutation.baseline, mutation.failing)[("pkg/calc.py", 5)].metallaxis > 0


def test_a_run_whose_failing_tests_no_longer_fail_caches_nothing(calc_repo, tmp_path):
    """The agent's old oracle mode ran mutants after the test patch was gone; those results must not be stored
    under the fault's key, or every later run reads them back."""
    cache = tmp_path / "cache"
    with LocalRuntime(calc_repo) as runtime:
        evidence = collect_spectrum(runtime, FAILING, PASSING, python=sys.executable)
        runtime.write_file("tests/test_calc.py", "")  # the failing tests are gone, as after a removed test patch
        mutation = collect_mbfl(runtime, evidence, Sources(runtime), MbflConfig(cache_dir=cache),
                                python=sys.executable)
        assert mutation.results and not any(r.cached for r in mutation.results)
        assert not cache.exists() or not any(cache.iterdir())
        runtime.write_file("tests/test_calc.py", TESTS)
        again = collect_mbfl(runtime, evidence, Sources(runtime), MbflConfig(cache_dir=cache),
                             python=sys.executable)
        assert again.ran > 0 and not any(r.cached for r in again.results)
        assert MbflLocalizer(again, evidence).localize(None)[0].start_line == FAULT_LINE


# -- a real instance -------------------------------------------------------------------------------------------------------
@pytest.mark.docker
def test_mbfl_in_a_real_instance_box_runs_caches_and_implicates_a_gold_line(docker_client, tmp_path):
    from pinpoint.environments.docker_runtime import DockerRuntime
    from pinpoint.swebench_eval.datasets import load_instances
    from pinpoint.swebench_eval.images import build_instance_image
    from pinpoint.swebench_eval.metrics import patch_gold_lines

    instance = load_instances(ids=["psf__requests-1142"])[0]
    image = build_instance_image(instance).tag
    with DockerRuntime(image, workdir="/testbed", network=False) as runtime:
        runtime.write_file("/tmp/pinpoint-test.patch", instance.test_patch)
        assert runtime.run("git apply /tmp/pinpoint-test.patch").ok
        before = runtime.diff()
        evidence = collect_spectrum(runtime, list(instance.FAIL_TO_PASS), list(instance.PASS_TO_PASS))
        config = MbflConfig(cache_dir=tmp_path)
        mutation = collect_mbfl(runtime, evidence, Sources(runtime), config)
        assert mutation.status == "finished" and mutation.ran > 0, mutation.error
        assert runtime.diff() == before
        gold = patch_gold_lines(instance.patch)
        scores = MbflLocalizer(mutation, evidence).scores()
        implicated = [k for k, s in scores.items() if s.metallaxis > 0 and k[1] in gold.get(k[0], ())]
        top = [(s.path, s.line) for s in rank_lines(evidence)[: config.top_lines]]
        assert implicated or any(n in gold.get(p, ()) for p, n in top), sorted(scores)
        again = collect_mbfl(runtime, evidence, Sources(runtime), config)
        done = {r.mutant.id for r in mutation.results if r.status != "not_run"}  # a loaded machine cuts the budget
        assert done and all(r.cached for r in again.results if r.mutant.id in done)
        assert again.ran <= len(mutation.results) - len(done)  # only what the budget left is run again


def test_the_agents_execution_signals_split_the_spectrums_ties_with_mbfl_and_fuse_it(calc_repo, tmp_path):
    from pinpoint.localization.failing_tests import ExecutionSignals, FailingTests
    from pinpoint.localization.suspects import LocalizationRequest

    with LocalRuntime(calc_repo) as runtime:
        tests = FailingTests("oracle", FAILING, PASSING, python=sys.executable)
        execution = ExecutionSignals(runtime, tests, budget_s=60, mbfl=MbflConfig(cache_dir=tmp_path))
        assert [loc.name for loc in execution.localizers()] == ["spectrum", "ldb", "test_names", "mentions", "mbfl"]  # a member by default
        spectrum = execution.suspects("spectrum", LocalizationRequest())
        assert spectrum[0].start_line == FAULT_LINE and "mbfl:" in spectrum[0].evidence  # and the tie-break
        assert execution.suspects("mbfl", LocalizationRequest())
        assert "mbfl" in execution.record()
