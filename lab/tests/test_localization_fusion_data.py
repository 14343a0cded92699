"""The learned fusion's mutant corpus (pinpoint_lab/localization/fusion_data.py): a small real repository in a LocalRuntime
(real pytest, the real trace runner and its mutation mode), and the leave-one-repository-out validation on the
bench's cached dev rows."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pinpoint.environments.local import LocalRuntime
from pinpoint.localization.execution import Sources
from pinpoint_lab.localization import fusion_data as corpus
from pinpoint_lab.localization import localize_bench as bench

STATS = """\
def mean(values):
    if not values:
        return 0.0
    total = 0
    for v in values:
        total += v
    return total / len(values)


def spread(values):
    low, high = min(values), max(values)
    return high - low
"""
FROZEN = """\
def frozen(x):
    return x * 2
"""
TESTS = """\
from pkg.frozen import frozen
from pkg.stats import mean, spread


def test_empty():
    assert mean([]) == 0.0


def test_mean():
    assert mean([1, 2, 3]) == 2


def test_spread():
    assert spread([4, 1, 9]) == 8


def test_frozen():
    assert frozen(2) == 4
"""


@pytest.fixture(scope="module")
def stats_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("fusion-data-stats")
    files = {"pkg/__init__.py": "", "pkg/stats.py": STATS, "pkg/frozen.py": FROZEN, "tests/test_stats.py": TESTS,
             "conftest.py": "", "examples/demo/tests/test_demo.py": "def test_demo():\n    pass\n",
             "examples/demo/tests/conftest.py": "import demo_not_installed\n"}  # an example with its own install
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "s"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    return repo


CONFIG = corpus.CorpusConfig(per_repo=4, baseline_budget_s=60, trace_budget_s=60, per_function=3)


def test_the_baseline_keeps_each_passing_tests_coverage_and_is_read_back(stats_repo, tmp_path):
    with LocalRuntime(stats_repo) as runtime:
        assert corpus.test_files(runtime) == ["tests/test_stats.py"]  # the suite, not the example's tests
        evidence = corpus.baseline(runtime, ["tests/test_stats.py"], CONFIG, tmp_path / "baseline.json.gz")
    assert sorted(t.nodeid.rsplit("::", 1)[1] for t in evidence.passing) == [
        "test_empty", "test_frozen", "test_mean", "test_spread"]
    assert not evidence.failing  # nothing is expected to fail on the unmutated code
    mean_test = next(t for t in evidence.passing if t.nodeid.endswith("test_mean"))
    assert {5, 6, 7} <= mean_test.lines["pkg/stats.py"]
    again = corpus.baseline(None, [], CONFIG, tmp_path / "baseline.json.gz")  # no runtime: from the cache
    assert {t.nodeid: t.lines for t in again.passing} == {t.nodeid: t.lines for t in evidence.passing}


def test_mutants_go_only_to_untouched_code_every_function_once_before_any_twice(stats_repo, tmp_path):
    with LocalRuntime(stats_repo) as runtime:
        evidence = corpus.baseline(runtime, ["tests/test_stats.py"], CONFIG, tmp_path / "baseline.json.gz")
        sources = Sources(runtime)
        lines = corpus.mutable_lines(evidence, sources, {"pkg/frozen.py"}, CONFIG, limit=20)
        assert lines and all(path == "pkg/stats.py" for path, _ in lines)
        first_two = {"mean" if n <= 7 else "spread" for _, n in lines[:2]}
        assert first_two == {"mean", "spread"}
        assert sum(n <= 7 for _, n in lines) <= CONFIG.per_function
        planned = corpus.plan(lines, sources, CONFIG)
    assert planned and {(m.path, m.line) for m in planned} <= set(lines)


def test_a_kept_mutant_is_a_bench_row_labelled_at_its_line_and_the_file_is_put_back(stats_repo, tmp_path):
    with LocalRuntime(stats_repo) as runtime:
        evidence = corpus.baseline(runtime, ["tests/test_stats.py"], CONFIG, tmp_path / "baseline.json.gz")
        sources = Sources(runtime)
        planned = corpus.plan(corpus.mutable_lines(evidence, sources, set(), CONFIG, limit=20), sources, CONFIG)
        results, base = corpus.screen(runtime, evidence, planned, CONFIG)
        killed = [(r, corpus.killing_tests(r, base)) for r in results]
        result, failing = next((r, f) for r, f in killed if f)
        assert all(base[t].passed and not result.tests[t].passed for t in failing)
        row = corpus.mutant_row(runtime, result.mutant, failing, evidence, CONFIG)
        assert not runtime.diff()  # the mutated file is back as it was
    assert row["kept"] and row["gold_lines"] == {result.mutant.path: [result.mutant.line]}
    assert {"spectrum", "ldb", "traceback", "bm25", "fused"} <= set(row["signals"])
    row.update(repo="x/stats", setting="oracle")
    x, y = bench.row_examples(row)  # the dev rows' feature extractor reads it
    assert x.shape[0] == len(y) and y.sum() == 1


def test_the_failing_tests_text_is_their_source():
    sources = Sources(files={"tests/test_stats.py": TESTS})
    text = corpus.failing_text(sources, ["tests/test_stats.py::test_mean", "tests/test_stats.py::test_gone"])
    assert text == "def test_mean():\n    assert mean([1, 2, 3]) == 2"


@pytest.fixture(scope="module")
def dev_rows() -> list[dict]:
    rows = bench.cached_folder(bench.ROWS_DIR, "oracle")
    return [r for r in rows if r.get("repo") in ("psf/requests", "pallets/flask", "mwaskom/seaborn")]


def test_validation_holds_each_repository_out_of_the_mutants_it_trains_on(dev_rows, monkeypatch):
    from pinpoint.localization import learned_fusion

    fake_corpus = [{**r, "repo": "psf/requests"} for r in dev_rows[:3]] + [
        {**r, "repo": "pallets/flask"} for r in dev_rows[3:6]]
    seen = []
    real_train = learned_fusion.train
    monkeypatch.setattr(learned_fusion, "train", lambda ex, **kw: seen.append((kw["trained_on"], len(ex)))
                        or real_train(ex, **kw))
    report = corpus.validate(fake_corpus, dev_rows)
    sizes = {name: n for name, n in seen}
    assert sizes["mutants without psf/requests"] == 3 and sizes["mutants without pallets/flask"] == 3
    assert sizes["mutants without mwaskom/seaborn"] == 6
    rrf = bench.totals([{**r, "signals": {"fused": r["signals"]["fused"]}} for r in dev_rows])["fused"]
    assert report["table"]["rrf"]["line@10~"] == pytest.approx(rrf["line@10~"], abs=1e-4)
    assert report["beats"]["mutants"] == all(report["table"]["mutants"][m] > report["table"]["rrf"][m]
                                             for m in corpus.DECIDING)
    assert "reciprocal rank" in corpus.format_validation(report)


def test_validation_needs_two_repositories_of_mutants(dev_rows):
    with pytest.raises(ValueError, match="fewer than 2 repositories"):
        corpus.validate([{**r, "repo": "psf/requests"} for r in dev_rows[:2]], dev_rows)


def test_the_command_names_an_unknown_repository_in_one_line(tmp_path, capsys):
    from pinpoint_lab.cli import main

    code = main(["train", "fusion-data", "--repos", "nobody/nothing", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "nobody/nothing" in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())


def test_hidden_text_features_get_no_weight_so_the_model_ignores_them(dev_rows):
    from pinpoint.localization.learned_fusion import FEATURES, train

    examples = corpus.hide_text([bench.row_examples(r) for r in dev_rows])
    weights = dict(zip(FEATURES, train(examples).weights, strict=True))
    assert all(w == 0 for name, w in weights.items() if name.startswith(("bm25_", "retrieval_", "lexical_")))
    assert any(w != 0 for name, w in weights.items() if name.startswith("spectrum_"))
