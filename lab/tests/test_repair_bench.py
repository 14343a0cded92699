"""The repair bench on real HumanEvalFix bugs: a bug's repository, its verdicts, and the per-bug rows cache that
lets a killed run resume without redoing a bug."""

from __future__ import annotations

import json

from pinpoint.agent.config import load_config
from pinpoint_lab import repair_bench
from pinpoint_lab.paths import use_dev_data

use_dev_data()


def _rows(*ids: str) -> list[dict]:
    rows = {r["task_id"]: r for r in repair_bench.humanevalfix()}
    return [rows[i] for i in ids]


def test_same_program_ignores_layout_but_not_meaning():
    assert repair_bench.same_program("def f(x):\n    return (x+1)  # one\n", "def f(x):\n    return x + 1\n")
    assert not repair_bench.same_program("def f(x):\n    return x * 1\n", "def f(x):\n    return x\n")


def test_touched_lines_counts_changed_removed_and_insertion_points():
    before = "a\nb\nc\nd\n"
    assert repair_bench.touched_lines(before, "a\nB\nc\nd\n") == {2}
    assert repair_bench.touched_lines(before, "a\nc\nd\n") == {2}
    assert repair_bench.touched_lines(before, "a\nb\nnew\nc\nd\n") == {3}


def test_rows_are_cached_per_bug_and_a_second_run_resumes(tmp_path):
    config = load_config(defaults=repair_bench.SETTINGS, **{"agent.execution": False})
    heard: list[str] = []
    first = repair_bench.bench_repair(_rows("Python/2"), ["candidates"], tmp_path, config, progress=heard.append)
    [row] = first["candidates"]
    assert row.plausible and row.model_calls == 0 and row.candidates_run >= 1 and row.localized
    assert row.precision == row.recall == 1.0  # the one line the reference changes, and only it
    assert len(heard) == 1
    cached = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [(r["arm"], r["bug"]) for r in cached] == [("candidates", "Python/2")]
    again = repair_bench.bench_repair(_rows("Python/2", "Python/23"), ["candidates"], tmp_path, config,
                                      progress=heard.append)
    assert len(heard) == 2 and heard[-1].startswith("candidates Python/23")  # only the new bug ran
    assert again["candidates"][0] == row
    assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == 2


def test_swebench_rows_are_cached_per_row_and_rows_without_an_image_stay_out_of_the_rates(tmp_path):
    from pinpoint_lab import repair_swebench

    rows = repair_swebench.swebench_rows(["psf__requests-2931", "psf__requests-1142"])
    assert [r["task_id"] for r in rows] == ["psf__requests-1142", "psf__requests-2931"]
    ran: list[str] = []

    def fake_row_runner(row, arm, config, work, ask, scorer):  # a fake: the real one needs the instance images
        ran.append(row["task_id"])
        built = row["task_id"].endswith("1142")
        return repair_bench.BugResult(row["task_id"], arm, row["instance"].repo,
                                      "resolved" if built else repair_bench.NO_IMAGE, built, built, "candidate",
                                      "x", 1.0, 1.0, 0, 3, 1.0, built)

    config = load_config(defaults=repair_swebench.SETTINGS)
    first = repair_bench.bench_repair(rows[:1], ["candidates"], tmp_path, config, progress=lambda _: None,
                                      run=fake_row_runner)
    again = repair_bench.bench_repair(rows, ["candidates"], tmp_path, config, progress=lambda _: None,
                                      run=fake_row_runner)
    assert ran == ["psf__requests-1142", "psf__requests-2931"]  # the cached row did not run again
    assert again["candidates"][0] == first["candidates"][0]
    figures = repair_bench.summary(again["candidates"])
    assert figures["bugs"] == 1 and figures["no_image"] == 1 and figures["correct"] == 1.0


def test_the_swebench_answer_leaves_out_the_test_patch_the_search_ran_against():
    from pinpoint.swebench_eval.metrics import patch_gold_lines
    from pinpoint_lab import repair_swebench

    [row] = repair_swebench.swebench_rows(["psf__requests-2931"])
    instance = row["instance"]
    both = instance.test_patch + instance.patch
    answer = repair_swebench.without_test_files(both, set(patch_gold_lines(instance.test_patch)))
    assert answer == instance.patch
    assert repair_swebench.oracle_command(["t.py::a[x y]"], ["t.py::b"]).endswith("'t.py::a[x y]' t.py::b")
