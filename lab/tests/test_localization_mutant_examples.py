"""The repository-mutant corpus becomes diagnostic training examples: each kept mutant's function, mutated exactly as
the corpus mutated it (found again from the committed row alone), labelled at the mutated line, split by repository."""

from __future__ import annotations

from pinpoint_lab.localization import mutant_examples as me
from pinpoint_lab.localization.examples import example_from, load_examples, save_examples
from pinpoint_lab.localization.fusion_data import corpus_rows


def _requests_rows(n: int) -> list[dict]:
    rows = [r for r in corpus_rows() if r["repo"] == "psf/requests"]
    return sorted(rows, key=lambda r: r["instance_id"])[:n]


def test_a_committed_mutant_is_rebuilt_from_its_row_and_labelled_at_its_mutated_line():
    rows = _requests_rows(6)
    read = me.offline_reader()
    programs = me.corpus_programs(rows, read)
    assert len(programs) >= 4  # a few may lie outside a function or be too long
    for program in programs:
        row = next(r for r in rows if program.id.endswith(r["instance_id"].removeprefix("mutant-")))
        gold = program.buggy_lines[0]
        # the mutated line holds the row's replacement, and only the mutant differs from its fix, on that line
        assert row["mutant"]["replacement"] in program.code.splitlines()[gold - 1]
        changed = [k + 1 for k, (a, b) in enumerate(zip(program.code.splitlines(), program.fixed_code.splitlines(),
                                                         strict=True)) if a != b]
        assert changed == [gold]
        # the model's target (the first unit that differs from the fix) lies on the gold line
        example = example_from(program, [])
        assert example.units[example.target].line == gold
        assert program.meta["repo"] == "psf/requests" and program.code.lstrip().startswith(("def ", "async def "))


def test_a_row_whose_file_changed_is_left_out_not_mislabelled():
    rows = _requests_rows(2)
    read = me.offline_reader()
    assert me.corpus_programs(rows, lambda row: "# another file\n" + read(row)) == []


def test_the_split_is_by_repository_and_round_trips_through_the_examples_file(tmp_path):
    programs = me.corpus_programs(_requests_rows(3), me.offline_reader())
    examples = [example_from(p, []) for p in programs]
    other = [example_from(p, []) for p in programs[:1]]
    other[0].meta = {**other[0].meta, "repo": "pallets/flask"}
    splits = me.split(examples + other, ["psf/requests"])
    assert [ex.meta["repo"] for ex in splits["train"]] == ["pallets/flask"]
    assert {ex.meta["repo"] for ex in splits["val"]} == {"psf/requests"}
    save_examples(tmp_path / "ex.pkl.gz", splits, me.DataConfig())
    saved = load_examples(tmp_path / "ex.pkl.gz")["splits"]
    assert [ex.id for ex in saved["val"]] == [ex.id for ex in splits["val"]]


def test_a_docstring_is_the_description_and_a_function_without_one_has_none():
    assert me.docstring('def f(x):\n    """Add one.\n\n    More."""\n    return x + 1\n') == "Add one.\n\nMore."
    assert me.docstring("def f(x):\n    return x\n") == ""


def test_a_corpus_with_no_repository_left_to_train_on_is_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "ex.pkl.gz"
    assert me.main(["--out", str(out), "--corpus", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no kept mutant" in err and not out.exists()


def test_a_limit_keeps_every_repository():
    from pinpoint_lab.localization.corpora import Program

    programs = [Program(id=f"{r}{k}", group="g", source="s", code="x", meta={"repo": r}) for r in "ab" for k in range(3)]
    assert [p.id for p in me.round_robin(programs, 3)] == ["a0", "b0", "a1"]
    assert len(me.round_robin(programs)) == 6
