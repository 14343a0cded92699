"""Training data: held-out sets stay out, splits are by base task, mutations make parsable, located bugs."""

import pytest
from pinpoint.localization.mutations import OPERATORS, mutants
from pinpoint.localization.units import _parser, lexical_units
from pinpoint_lab.localization import corpora
from pinpoint_lab.localization.examples import (
    DataConfig,
    evaluation_programs,
    first_buggy_unit,
    mutant_programs,
    training_programs,
)


def test_held_out_benchmarks_never_reach_training():
    held = corpora.pdb_held_out_tasks()
    assert "BigCodeBench/1015" in held  # PDB-Multi's first bug comes from this BigCodeBench task
    cfg = DataConfig()
    for split in ("train", "val"):
        bases, real = training_programs(split, cfg)
        assert bases and real
        for program in bases + real:
            assert program.group not in held
            assert program.source not in {"humanevalfix", "pdb_multi"}
            assert not program.id.startswith(("Python/", "HumanEval"))
            assert corpora.split_of(program.group) == split


def test_splits_are_by_base_task_and_stable():
    programs = corpora.condefects()
    by_group: dict[str, set[str]] = {}
    for p in programs:
        by_group.setdefault(p.group, set()).add(corpora.split_of(p.group))
    assert all(len(s) == 1 for s in by_group.values())
    counts = {s: sum(1 for _ in corpora.iter_split(programs, s)) for s in corpora.SPLITS}
    assert counts["train"] > 5 * counts["test"] > 0
    assert corpora.split_of("condefects/abc221_f") == corpora.split_of("condefects/abc221_f")


def test_mutants_of_real_code_parse_and_locate_their_bug():
    base = next(p for p in corpora.bigcodebench_solutions() if p.id == "BigCodeBench/104")
    muts = mutants(base.code, 12, seed=3)
    assert len(muts) == 12 and len({m.code for m in muts}) == 12
    assert len({m.operator for m in muts}) >= 4
    assert mutants(base.code, 12, seed=3) == muts  # deterministic
    for m in muts:
        assert m.code != base.code
        assert not _parser("python").parse(m.code.encode()).root_node.has_error
        assert m.code[: m.bug_start] == base.code[: m.bug_start]  # nothing changed before the bug
    assert set(OPERATORS) >= {"wrong_operator", "off_by_one", "swapped_arguments", "wrong_variable",
                              "dropped_condition", "wrong_constant", "missing_call"}


def test_mutant_gold_line_holds_the_edit():
    base = corpora.livecodebench_solutions()[0]
    for program, start, end in mutant_programs(base, 5, seed=0):
        assert program.buggy_lines[0] == program.code.count("\n", 0, start) + 1
        assert program.buggy_lines[-1] == program.code.count("\n", 0, max(start, end - 1)) + 1


def test_first_buggy_unit_of_a_real_bug_is_the_changed_token():
    program = corpora.humanevalfix()[0]  # `distance = elem - elem2`, fixed to `abs(elem - elem2)`
    units = lexical_units(program.code)
    target = first_buggy_unit(units, program.code, program.fixed_code, program.buggy_lines)
    assert units[target].line == 8 and units[target].text == "elem"


def test_programs_carry_their_task_description_and_mutants_keep_it():
    base = next(p for p in corpora.bigcodebench_solutions() if p.id == "BigCodeBench/104")
    assert base.description.startswith("Analyzes the groups in a DataFrame") and "Parameters:" in base.description
    assert all(p.description for p in corpora.livecodebench_solutions()[:20] + corpora.debugbench()[:20])
    assert all(not p.description for p in corpora.condefects()[:20])  # AtCoder statements are not in the data
    assert {m.description for m, _, _ in mutant_programs(base, 3, seed=0)} == {base.description}


def test_humanevalfix_comes_with_and_without_its_docstring():
    plain, docs = evaluation_programs("humanevalfix"), evaluation_programs("humanevalfix_docs")
    assert [p.code for p in plain] == [p.code for p in docs] and len(docs) == 164
    assert not any(p.description for p in plain)
    flip = next(p for p in docs if p.entry_point == "flip_case")
    assert "lowercase characters to uppercase" in flip.description


def test_described_training_programs_also_come_without_their_description():
    bases, real = training_programs("val", DataConfig())
    for pool in (bases, real):
        described = [p for p in pool if p.description]
        twins = {p.id for p in pool if not p.description and p.source != "condefects"}
        assert described and {p.id for p in described} == twins
    alone, _ = training_programs("val", DataConfig(undescribed_twins=False))
    assert len(bases) == 2 * len(alone)  # every base has a description


def test_swebench_functions_are_the_functions_real_fixes_change_at_their_base_commit():
    programs = evaluation_programs("swebench")
    assert {p.meta["repo"] for p in programs[:8]} == {p.meta["repo"] for p in programs}  # round-robin: a limit keeps all
    requests = [p for p in programs if p.meta["repo"] == "psf/requests"]
    for p in requests:
        assert p.code.startswith(("def ", "async def ")) and p.description
        assert all(1 <= n <= len(p.code.splitlines()) for n in p.buggy_lines)
    # psf/requests#1142: GET requests got `Content-Length: 0`; the fix stops prepare_content_length setting it
    (fix,) = [p for p in requests if "psf__requests-1142/" in p.id]
    assert fix.code.startswith("def prepare_content_length(self, body):")
    assert [fix.code.splitlines()[n - 1].strip() for n in fix.buggy_lines] == ["self.headers['Content-Length'] = '0'"]
    assert "content length" in fix.description.lower()


@pytest.mark.slow  # reads every file of requests at each SWE-bench base commit: about a minute
def test_repository_functions_leave_out_tests_and_every_file_swebench_touches():
    programs = corpora.repository_functions(("psf__requests",))
    assert len(programs) > 50
    touched = {p.id.split("/", 2)[2].rsplit(":", 1)[0] for p in evaluation_programs("swebench")
               if p.meta["repo"] == "psf/requests"}
    assert "requests/models.py" in touched  # psf/requests#1142's fix
    for p in programs:
        path = p.group.removeprefix("repo/psf__requests/")
        assert path not in touched and not path.startswith("tests/") and p.code.startswith(("def ", "async def "))
    described = [p for p in programs if p.description]
    assert described and all('"""' not in p.description for p in described)  # the docstring's text, unquoted
    cfg = DataConfig(repository_bases=10_000, bigcodebench_bases=0, livecodebench_bases=0)
    bases, _ = training_programs("val", cfg)
    assert bases and all(corpora.split_of(p.group) == "val" for p in bases if p.source == "repository")
