"""Predicate switching: finding the branch conditions, the switch edits (every evaluation, or the first only, line
numbers kept), scores on hand-made outcomes (a pass beats a change, a crash is unknown), the tie-break, and real
switches forked in the trace runner on a small repository, implicating the faulty predicate."""

from __future__ import annotations

import sys

import pytest
from pinpoint.environments.local import LocalRuntime
from pinpoint.localization.execution import Sources, collect_spectrum
from pinpoint.localization.mbfl import MutantResult, PlannedMutant, TestOutcome
from pinpoint.localization.predicates import (
    Predicate,
    PredicateConfig,
    PredicateLocalizer,
    collect_switches,
    find_predicates,
    plan_switches,
    predicate_scores,
    switch_text,
    tie_break,
)
from pinpoint.localization.suspects import Suspect
from test_localization_execution import CALC, FAILING, PASSING, calc_repo  # noqa: F401 (a fixture)

PROGRAM = '''def pick(xs, y):
    out = []
    for x in xs:
        if (x > y and
                x != 3):  # a comment inside the condition
            out.append(x)
        elif x == "é" or y < 0:
            out.append(-1)
    return [o for o in out if o] if out else None
'''


def _run(text: str, predicate: Predicate, mode: str):
    new = text[: predicate.start] + switch_text(predicate, mode) + text[predicate.end:]
    assert new.count("\n") == text.count("\n")  # every later line keeps its number
    sys.__dict__.pop("_pinpoint_switched", None)  # each forked child starts without the flag
    scope: dict = {}
    exec(compile(new, "m.py", "exec"), scope)
    try:
        return scope["pick"]([1, 4, 5], 2)
    finally:
        sys.__dict__.pop("_pinpoint_switched", None)


def test_branch_conditions_and_short_circuit_operands_are_found_with_exact_offsets():
    found = find_predicates("m.py", PROGRAM)
    assert [(p.line, p.kind, p.text) for p in found] == [
        (4, "if", "x > y and\n                x != 3"), (4, "operand", "x > y"), (7, "if", 'x == "é" or y < 0'),
        (7, "operand", 'x == "é"'), (9, "comprehension", "o"), (9, "ifexp", "out")]
    assert all(PROGRAM[p.start:p.end] == p.text for p in found)  # offsets in characters, past a non-ASCII one
    assert found[0].block_end == 8 and found[4].block_end == 9  # an `if` guards its statement, an expression itself


def test_a_switch_flips_every_evaluation_or_only_the_first():
    first = find_predicates("m.py", PROGRAM)[0]
    assert _run(PROGRAM, first, "all") == [1]  # unswitched: [4, 5]
    assert _run(PROGRAM, first, "first") == [1, 4, 5]  # only x=1's test flipped (to true)
    ifexp = next(p for p in find_predicates("m.py", PROGRAM) if p.kind == "ifexp")
    assert _run(PROGRAM, ifexp, "first") is None and _run(PROGRAM, ifexp, "all") is None


def _switch(line: int, mode: str) -> PlannedMutant:
    return PlannedMutant("m.py", line, f"switch-{mode}-if", line, line + 1, "x", "h")


BASE = {"f1": TestOutcome("f1", "failed", "AssertionError", "assert 1 == 2"),
        "f2": TestOutcome("f2", "failed", "AssertionError", "assert 3 == 4")}


def test_a_switch_that_makes_a_failing_test_pass_outranks_one_that_only_changes_it_and_crashes_are_unknown():
    predicates = {}
    results = []
    for line, mode, status, f1 in ((1, "first", "ok", ("failed", "AssertionError", "assert 9 == 2")),
                                   (2, "first", "ok", ("passed", "", "")),
                                   (2, "all", "ok", ("failed", "AssertionError", "assert 1 == 2")),
                                   (3, "first", "crash", ("passed", "", "")),
                                   (4, "first", "ok", ("failed", "AssertionError", "assert 1 == 2"))):
        switch = _switch(line, mode)
        predicates[switch.id] = Predicate("m.py", line, "if", line, line + 1, "x", line + 2)
        results.append(MutantResult(switch, status, {"f1": TestOutcome("f1", *f1),
                                                     "f2": BASE["f2"]}))
    scores = predicate_scores(results, BASE, ["f1", "f2"], predicates)
    assert set(scores) == {("m.py", 1), ("m.py", 2), ("m.py", 4)}  # the crashed switch is unknown
    assert scores[("m.py", 2)].switched == 0.5 and scores[("m.py", 2)].mode == "first" and scores[("m.py", 2)].runs == 2
    assert scores[("m.py", 1)].switched == 0 and scores[("m.py", 1)].changed == 0.5
    assert scores[("m.py", 4)].score == 0
    assert scores[("m.py", 2)].score > scores[("m.py", 1)].score > scores[("m.py", 4)].score
    # the tie-break: line 2 leads its tie, the block it guards (3-4) comes next, line 1 after; a gap is never crossed
    spectrum = [Suspect("m.py", n, n, 0.5, "spectrum") for n in (1, 4, 3, 2, 5)] + [Suspect("m.py", 9, 9, 0.4, "s")]
    assert [s.start_line for s in tie_break(spectrum, scores)] == [2, 4, 3, 1, 5, 9]


def test_switches_run_forked_in_the_runner_implicate_the_faulty_predicate_and_are_cached(calc_repo, tmp_path):  # noqa: F811
    with LocalRuntime(calc_repo) as runtime:
        evidence = collect_spectrum(runtime, FAILING, PASSING, python=sys.executable)
        config = PredicateConfig(cache_dir=tmp_path)
        planned, of = plan_switches(evidence, Sources(runtime), config)
        assert {of[m.id].line for m in planned} == {2, 8}  # `not values` and `count > 3`: what test_large ran
        switches = collect_switches(runtime, evidence, Sources(runtime), config, python=sys.executable)
        assert switches.runs.status == "finished" and switches.runs.ran == len(planned), switches.runs.error
        assert not runtime.diff()  # the switches live in the forked children only
        localizer = PredicateLocalizer(switches, evidence)
        top = localizer.localize(None)
        # switching `count > 3` makes test_large pass; switching `not values` only changes its failure
        assert (top[0].start_line, top[0].score) == (8, 1.0) and top[1].start_line == 8 and top[1].end_line == 9
        assert localizer.scores()[("pkg/calc.py", 2)].score == pytest.approx(0.1)
        again = collect_switches(runtime, evidence, Sources(runtime), config, python=sys.executable)
        assert again.runs.ran == 0 and all(r.cached for r in again.runs.results)
        assert CALC.splitlines()[7].strip() == "if count > 3:"


def test_the_agents_execution_signals_fuse_switches_or_split_ties_with_them_and_record_every_targeted_signal(
        calc_repo, tmp_path):  # noqa: F811
    from pinpoint.localization.failing_tests import ExecutionSignals, FailingTests
    from pinpoint.localization.suspects import LocalizationRequest

    with LocalRuntime(calc_repo) as runtime:
        tests = FailingTests("oracle", FAILING, PASSING, python=sys.executable)
        member = ExecutionSignals(runtime, tests, budget_s=60, predicates=PredicateConfig(cache_dir=tmp_path))
        assert [loc.name for loc in member.localizers()] == ["spectrum", "ldb", "test_names", "mentions", "predicates"]  # the default
        assert member.suspects("predicates", LocalizationRequest())[0].start_line == 8
        assert not any("predicates:" in s.evidence for s in member.suspects("spectrum", LocalizationRequest()))
        split = ExecutionSignals(runtime, tests, budget_s=60, insertion=True,
                                 predicates=PredicateConfig(cache_dir=tmp_path, fuse_member=False))
        assert [loc.name for loc in split.localizers()] == ["spectrum", "ldb", "test_names", "mentions"]  # tie-breaks, not members
        assert any("predicates:" in s.evidence for s in split.suspects("spectrum", LocalizationRequest()))
        record = split.record()
        assert record["predicates"]["suspects"][0]["start_line"] == 8
        assert record["predicates"]["status"] == "finished" and record["insertion"]["suspects"]
        assert "predicates switched" in record["predicates"]["summary"]  # the switches' summary, not the mutants'
        assert "mbfl" not in record  # off here
        assert member.record()["insertion"]["used"] is False and member.record()["insertion"]["suspects"]


@pytest.mark.docker
def test_switches_in_a_real_instance_box_run_leave_the_tree_alone_and_are_cached(docker_client, tmp_path):
    from pinpoint.environments.docker_runtime import DockerRuntime
    from pinpoint.swebench_eval.datasets import load_instances
    from pinpoint.swebench_eval.images import build_instance_image

    instance = load_instances(ids=["psf__requests-1142"])[0]
    image = build_instance_image(instance).tag
    with DockerRuntime(image, workdir="/testbed", network=False) as runtime:
        runtime.write_file("/tmp/pinpoint-test.patch", instance.test_patch)
        assert runtime.run("git apply /tmp/pinpoint-test.patch").ok
        before = runtime.diff()
        evidence = collect_spectrum(runtime, list(instance.FAIL_TO_PASS), list(instance.PASS_TO_PASS))
        config = PredicateConfig(cache_dir=tmp_path)
        switches = collect_switches(runtime, evidence, Sources(runtime), config)
        assert switches.runs.status == "finished" and switches.runs.ran > 0, switches.runs.error
        assert runtime.diff() == before
        scores = PredicateLocalizer(switches, evidence).scores()
        assert scores and all(0 <= s.score <= 1 for s in scores.values())
        again = collect_switches(runtime, evidence, Sources(runtime), config)
        assert again.runs.ran == 0 and all(r.cached for r in again.runs.results)
