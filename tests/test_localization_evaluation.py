"""Evaluation: tie-aware hit@k, spectrum-based localization on real HumanEvalFix tests, and bad input."""

from agent.cli import main as pinpoint
from localization.data import humanevalfix
from localization.evaluation import expected_hit_at_k
from localization.spectrum import ochiai, run_tests_with_coverage


def test_ties_are_broken_at_random_in_expectation():
    assert expected_hit_at_k({1: 0.0, 2: 0.0, 3: 0.0, 4: 0.0}, {2}, 1) == 0.25
    assert expected_hit_at_k({1: 0.0, 2: 0.0, 3: 0.0, 4: 0.0}, {2}, 3) == 0.75
    assert expected_hit_at_k({1: 1.0, 2: 0.0, 3: 0.0}, {2}, 2) == 0.5
    assert expected_hit_at_k({1: 1.0, 2: 2.0}, {1}, 1) == 0.0
    assert expected_hit_at_k({1: 1.0, 2: 2.0}, {1}, 2) == 1.0


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
    assert pinpoint(["eval-localization", "--sets", "humanevalfix,nope"]) == 2
    assert "unknown evaluation set(s) ['nope']" in capsys.readouterr().err


def test_missing_or_foreign_checkpoint_is_named(tmp_path, capsys):
    assert pinpoint(["eval-localization", "--checkpoint", str(tmp_path / "none.pt"), "--sets", "humanevalfix"]) == 2
    assert f"no diagnostic checkpoint at {tmp_path / 'none.pt'}" in capsys.readouterr().err
    (tmp_path / "other.pt").write_bytes(b"not a checkpoint")
    assert pinpoint(["eval-localization", "--checkpoint", str(tmp_path / "other.pt")]) == 2
    assert "is not a pinpoint diagnostic checkpoint" in capsys.readouterr().err
