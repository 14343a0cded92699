"""Evaluation: tie-aware hit@k, spectrum-based localization on real HumanEvalFix tests, and bad input."""

from pinpoint_lab.cli import main as pinpoint
from pinpoint_lab.localization.corpora import humanevalfix
from pinpoint_lab.localization.evaluation import expected_hit_at_k, fused_ranker, memoized
from pinpoint_lab.localization.examples import example_from
from pinpoint_lab.localization.spectrum import ochiai, run_tests_with_coverage


def test_ties_are_broken_at_random_in_expectation():
    assert expected_hit_at_k({1: 0.0, 2: 0.0, 3: 0.0, 4: 0.0}, {2}, 1) == 0.25
    assert expected_hit_at_k({1: 0.0, 2: 0.0, 3: 0.0, 4: 0.0}, {2}, 3) == 0.75
    assert expected_hit_at_k({1: 1.0, 2: 0.0, 3: 0.0}, {2}, 2) == 0.5
    assert expected_hit_at_k({1: 1.0, 2: 2.0}, {1}, 1) == 0.0
    assert expected_hit_at_k({1: 1.0, 2: 2.0}, {1}, 2) == 1.0


def test_fusion_lets_one_ranker_order_the_lines_the_other_ties():
    program = next(p for p in humanevalfix() if p.id == "Python/2")
    ex = example_from(program, [])
    lines = sorted({u.line for u in ex.units})
    calls = []

    def spectrum(_ex):  # ties every line but the first, as Ochiai does for lines every failing test runs
        calls.append(1)
        return {line: 0.0 if line == lines[0] else 0.5 for line in lines}

    def model(_ex):  # prefers the last line
        return {line: float(line) for line in lines}

    once = memoized(spectrum)
    fused = fused_ranker([model, once])(ex)
    assert max(fused, key=fused.get) == lines[-1]
    assert fused[lines[0]] < min(v for line, v in fused.items() if line != lines[0])  # last for both
    once(ex)
    assert len(calls) == 1  # the tests ran once


def test_ochiai_from_real_tests_points_at_the_humanevalfix_bug():
    program = next(p for p in humanevalfix() if p.id == "Python/2")  # truncate_number: bug on line 2
    outcomes = run_tests_with_coverage(program.code, program.tests, program.entry_point)
    assert outcomes and not any(o.passed for o in outcomes)
    scores = ochiai(outcomes)
    assert max(scores, key=scores.get) in program.buggy_lines
    fixed = run_tests_with_coverage(program.fixed_code, program.tests, program.entry_point)
    assert fixed and all(o.passed for o in fixed)


def test_a_hanging_program_fails_its_tests_instead_of_hanging():
    code = "def f(x):\n    while True:\n        pass\n"
    tests = "def check(f):\n    assert f(1) == 1\n    assert True\n"
    outcomes = run_tests_with_coverage(code, tests, "f", per_test_timeout=0.5)
    assert [o.passed for o in outcomes] == [False, True]
    assert 2 in outcomes[0].lines


def test_unknown_evaluation_set_is_a_clear_error(capsys):
    assert pinpoint(["bench", "lines", "--sets", "humanevalfix,nope"]) == 2
    assert "unknown evaluation set(s) ['nope']" in capsys.readouterr().err
    assert pinpoint(["bench", "lines", "--sets", "humanevalfix", "--repair-sets", "humaneval"]) == 2
    assert "unknown evaluation set(s) ['humaneval']" in capsys.readouterr().err
    assert pinpoint(["bench", "lines", "--sets", "humanevalfix", "--repair-top", "0"]) == 2
    assert "--repair-top must be at least 1" in capsys.readouterr().err


def test_missing_or_foreign_checkpoint_is_named(tmp_path, capsys):
    assert pinpoint(["bench", "lines", "--checkpoint", str(tmp_path / "none.pt"), "--sets", "humanevalfix"]) == 2
    assert f"no diagnostic checkpoint at {tmp_path / 'none.pt'}" in capsys.readouterr().err
    (tmp_path / "other.pt").write_bytes(b"not a checkpoint")
    assert pinpoint(["bench", "lines", "--checkpoint", str(tmp_path / "other.pt")]) == 2
    assert "is not a pinpoint diagnostic checkpoint" in capsys.readouterr().err
