"""Candidate repairs for the repair-likelihood signal (no LLM here; the real scorer's tests are in
test_localization_scorer.py)."""

from dataclasses import replace

from pinpoint.agent.config import Config
from pinpoint.agent.runner import default_localizers
from pinpoint.localization.mutations import Source
from pinpoint.localization.repair import RepairLocalizer, enclosing_functions, repair_edits
from pinpoint_lab.localization.corpora import humanevalfix

CODE = "def last(xs, n):\n    if n == 0:\n        return xs[len(xs)]\n    return xs[n] - 2\n"


def _rewrites_on_line(code: str, line: int) -> set[str]:
    return {new.splitlines()[line - 1].strip() for new, _, at in repair_edits(code) if at == line}


def test_repairs_cover_other_operators_numbers_and_indices_one_off():
    assert {"if n < 0:", "if n != 0:", "if n >= 0:", "if n == 1:"} <= _rewrites_on_line(CODE, 2)
    assert {"return xs[len(xs) - 1]", "return xs[len(xs) + 1]"} <= _rewrites_on_line(CODE, 3)
    assert {"return xs[n] + 2", "return xs[n] % 2", "return xs[n] - 1", "return xs[n] - 3"} <= _rewrites_on_line(CODE, 4)


def test_repairs_also_take_excess_logic_out():
    code = "def f(xs):\n    total = 0\n    for x in xs:\n        total += abs(x) * 2\n        print(x)\n" \
           "    return sorted(xs).copy(), [1, 2, 3]\n"
    assert {"total += abs(x)", "total += 2", "total += x * 2", "total = abs(x) * 2"} <= _rewrites_on_line(code, 4)
    assert {"return sorted(xs), [1, 2, 3]", "return sorted(xs).copy(), [1, 3]"} <= _rewrites_on_line(code, 6)
    dropped = [new for new, edit, line in repair_edits(code) if edit.operator == "drop_statement"]
    assert code.replace("        print(x)\n", "") in dropped  # a statement on its own line, the block keeps one
    for pid in ("Python/2", "Python/120", "Python/139"):  # `+ 1.0`, `.sort(...)`, a whole `i *= n` line too many
        program = next(p for p in humanevalfix() if p.id == pid)
        assert program.fixed_code.strip() in {new.strip() for new, _, _ in repair_edits(program.code)}


def test_repairs_are_distinct_parsable_and_deterministic():
    rewrites = repair_edits(CODE)
    codes = [new for new, _, _ in rewrites]
    assert len(codes) == len(set(codes)) and CODE not in codes
    assert all(not Source(new).tree.root_node.has_error for new in codes)
    assert repair_edits(CODE) == rewrites


def test_the_reference_fix_of_a_real_operator_bug_is_a_candidate():
    program = next(p for p in humanevalfix() if p.id == "Python/3")  # `balance == 0` should be `balance < 0`
    assert program.fixed_code in {new for new, _, _ in repair_edits(program.code)}


def test_lines_are_grouped_by_their_innermost_function():
    code = "X = 1\n\n\nclass A:\n    def f(self):\n        def g():\n            return 1\n        return g()\n"
    assert enclosing_functions(code, [1, 5, 7, 8]) == {(5, 8): {5, 8}, (6, 7): {7}}  # line 1 is in no function


def test_the_agent_adds_the_repair_signal_when_asked():
    config = Config()
    plain = [loc.name for loc in default_localizers(None, config)]
    with_repair = default_localizers(None, replace(config, agent=replace(config.agent, repair=True)))
    assert "repair" not in plain and "flare" not in plain
    assert [loc.name for loc in with_repair] == [*plain, "repair"]  # the model picks its lines, not a signal itself
    assert isinstance(with_repair[-1], RepairLocalizer)
    # repositories are read with the checkpoint fine-tuned on repository code
    assert with_repair[-1].diagnostic.checkpoint.training["init_from"] == "localization/checkpoints/diagnostic-small.pt"
