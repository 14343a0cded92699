"""`pinpoint rl synthesize` on a real repository (the demo's, with its pytest suite): the tasks it keeps are real
bugs that the gold patch fixes and the empty patch does not, graded by RepairEnv as any local task, and they load
as a tasks file for `rl dataset` (slow); and, fast, that a SWE-bench row's mutants are written as rows of its image
(a setup patch over its base commit), which tests the tracer says reach an edit in a real pytest run, and how
problem statements quote pytest's and sympy's failures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pinpoint.agent.demo import build_demo_repo
from pinpoint.rl.dataset import write_training_parquet
from pinpoint.rl.env import EnvSettings, RepairEnv
from pinpoint.rl.policies import GoldPolicy
from pinpoint.rl.synth_run import run_synthesis
from pinpoint.rl.synth_sources import local_source
from pinpoint.rl.synth_trace import enclosing_function
from pinpoint.rl.synthesize import (
    Source,
    SynthSettings,
    baseline,
    inverse_patch,
    problem_statement,
    reaching,
    synthesize,
    verify_task,
)
from pinpoint.rl.tasks import load_tasks
from pinpoint.swebench_eval.datasets import validate_row

TEST_COMMAND = "python -m pytest -q -p no:cacheprovider -rA --tb=short"


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    root = tmp_path_factory.mktemp("synth")
    demo = build_demo_repo(root / "demo")
    out = root / "tasks.jsonl"
    (stats,) = run_synthesis([{"repo": str(demo.path), "test_command": TEST_COMMAND}], out,
                             SynthSettings(max_mutants=6, timeout_s=120))
    assert not stats["error"] and stats["tried"] == 6
    assert stats["kept"] + stats["equivalent"] + stats["unreached"] + stats["hung"] == stats["tried"]
    assert stats["traced"]  # each test's calls were recorded: a mutant runs only the tests that reach it
    return out, [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.slow
def test_kept_mutants_break_baseline_tests_and_say_how(synthesized) -> None:
    _, tasks = synthesized
    assert tasks and len({t["base_commit"] for t in tasks}) == len(tasks)  # one commit per task, no duplicates
    for task in tasks:
        assert task["FAIL_TO_PASS"] and not set(task["FAIL_TO_PASS"]) & set(task["PASS_TO_PASS"])
        assert task["synthesis"]["tests_broken"] == len(task["FAIL_TO_PASS"])
        assert task["synthesis"]["file"] not in task["problem_statement"]  # no hint of where the fault is
        assert all(test in task["problem_statement"] for test in task["FAIL_TO_PASS"][:8])


@pytest.mark.slow
def test_the_gold_patch_resolves_and_the_empty_patch_does_not(synthesized, tmp_path: Path) -> None:
    _, tasks = synthesized
    assert [verify_task(task, tmp_path) for task in tasks[:3]] == [(True, True)] * min(3, len(tasks))


@pytest.mark.slow
def test_repair_env_rewards_synthesized_tasks_like_any_task(synthesized, tmp_path: Path) -> None:
    out, tasks = synthesized
    loaded = load_tasks(out)
    assert [t.task_id for t in loaded] == [t["task_id"] for t in tasks]
    assert write_training_parquet(loaded, tmp_path / "train.parquet") == len(tasks)
    task = loaded[0]
    with RepairEnv(EnvSettings(reward="unit")) as env:
        env.reset(options={"task": task})
        reward, info = play_gold(env, task.gold_patch)
        assert reward == 1.0, info
        env.reset(options={"task": task})
        _, empty, *_ = env.step({"name": "submit", "arguments": {}})
        assert empty == 0.0


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout


def test_a_rows_mutants_are_rows_of_its_image_with_a_setup_patch(tmp_path: Path) -> None:
    """A source made from a row (its base commit, then its fix and test patch committed) writes each kept mutant as
    a row of that row: its base commit, test patch and environment, the broken state as a setup patch over the
    non-test files, which with the test patch gives exactly the mutant's commit."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "m.py").write_text("def f(x):\n    return x\n")
    (repo / "tests" / "test_m.py").write_text("from pkg.m import f\n\n\ndef test_zero():\n    assert f(0) == 0\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "pkg" / "m.py").write_text("def f(x):\n    return x + 1\n")
    (repo / "tests" / "test_m.py").write_text("from pkg.m import f\n\n\ndef test_f():\n    assert f(1) == 2\n")
    test_patch = _git(repo, "diff", "--", "tests")
    _git(repo, "commit", "-qam", "reference fix and tests")
    row = validate_row({"instance_id": "o__n-1", "repo": "o/n", "base_commit": base, "version": "1.0",
                        "patch": _git(repo, "diff", base, "HEAD", "--", "pkg"), "test_patch": test_patch,
                        "environment_setup_commit": base, "FAIL_TO_PASS": ["tests/test_m.py::test_f"]}, "row")
    source = Source("o__n-1", str(repo), f"{sys.executable} -m pytest -p no:cacheprovider -rA",
                    ("tests/test_m.py",), files=("pkg/m.py",), instance=row)
    result = synthesize(source, SynthSettings(max_mutants=4, timeout_s=60))
    assert result.tasks, result.stats
    for task in result.tasks:
        made = validate_row(task, "task")
        assert made.instance_id.startswith("o__n-1.synth-") and made.image_row().instance_id == "o__n-1"
        assert (made.base_commit, made.test_patch, made.environment_setup_commit) == (base, test_patch, base)
        assert made.FAIL_TO_PASS == ("tests/test_m.py::test_f",) and "repo_path" not in task
        assert "tests/test_m.py" not in made.setup_patch and made.patch != row.patch
        branch = f"pinpoint-synth/{made.instance_id}"
        _git(repo, "checkout", "-q", base)
        for patch in (made.setup_patch, made.test_patch):
            subprocess.run(["git", "apply", "-"], cwd=repo, input=patch, text=True, check=True)
        assert _git(repo, "diff", branch) == ""  # the mutant's state, from the base commit
        subprocess.run(["git", "apply", "-"], cwd=repo, input=made.patch, text=True, check=True)
        assert _git(repo, "diff", branch + "~1") == ""  # the gold patch undoes the mutant
        _git(repo, "checkout", "-qf", "master" if "master" in _git(repo, "branch") else "main")


def test_the_gold_patch_is_the_inverse_edit_and_the_statement_quotes_failures() -> None:
    patch = inverse_patch("pkg/m.py", "x = 2\n", "x = 1\n")
    assert patch.startswith("diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n")
    assert "-x = 2\n+x = 1\n" in patch
    output = ("____ T.test_c ____\n    def test_c():\nE   KeyError: 'x'\n"
              "FAILED t.py::test_a - assert 2 == 1\nFAILED t.py::T::test_c - KeyErr...\n")
    text = problem_statement(["t.py::test_a", "t.py::test_b", "t.py::T::test_c"], output)
    assert "t.py::test_a: assert 2 == 1" in text and "t.py::test_b: fails (no message)" in text
    assert "t.py::T::test_c: KeyError: 'x'" in text  # a summary line cut short: the traceback's error instead


def test_the_trace_says_which_tests_reach_a_function(tmp_path: Path) -> None:
    """The tracer plugin in a real pytest run: an edit in a function reaches only the tests calling it, an edit at
    module level or in a function called at import reaches all of them."""
    (tmp_path / "m.py").write_text("import functools\n\n\ndef used(x):\n    return x + 1\n\n\n"
                                   "@functools.lru_cache\ndef unused(x):\n    return x - 1\n\n\nLIMIT = 3\n\n\n"
                                   "def at_import():\n    return 1\n")
    (tmp_path / "conftest.py").write_text("import m\n\nm.at_import()\n")
    (tmp_path / "test_m.py").write_text("import m\n\n\ndef test_a():\n    assert m.used(1) == 2\n\n\n"
                                        "def test_b():\n    assert m.LIMIT == 3\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "."], cwd=tmp_path, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"], cwd=tmp_path,
                   check=True)
    source = local_source(tmp_path, f"{sys.executable} -m pytest -p no:cacheprovider -rA", tmp_path / "work")
    base = baseline(source, 60)
    assert base.passing == ["test_m.py::test_a", "test_m.py::test_b"] and base.calls is not None
    text = (tmp_path / "m.py").read_text()
    assert enclosing_function("m.py", text, 5) == "m.py:4"
    assert enclosing_function("m.py", text, 10) == "m.py:8"  # a decorated function's code starts at its decorator
    assert reaching(base, "m.py", text, 5) == ["test_m.py::test_a"]
    assert reaching(base, "m.py", text, 10) == []
    assert reaching(base, "m.py", text, 13) == base.passing  # module level: runs at import, reaches every test
    assert reaching(base, "m.py", text, 17) == base.passing  # called at import (conftest): reaches every test


def test_a_sympy_failure_is_quoted_by_its_last_traceback_line() -> None:
    output = ("________________________________________________________________________________\n"
              "_____________ sympy/printing/tests/test_str.py:test_Float ______________________\n"
              '  File "/testbed/sympy/printing/tests/test_str.py", line 9, in test_Float\n'
              "    assert str(Float('1.23')) == '1.23'\nAssertionError\n"
              "________________________________________________________________________________\n"
              "_____________ sympy/printing/tests/test_str.py:test_Mul ________________________\n"
              "ValueError: bad\n"
              "\n= tests finished: 1 passed, 2 failed, in 0.50 seconds =\nDO *NOT* COMMIT!\n")
    text = problem_statement(["test_Float", "test_Mul"], output)
    assert "- test_Float: AssertionError\n- test_Mul: ValueError: bad" in text


def test_a_sympy_test_the_official_parser_cannot_see_in_a_whole_file_run_is_never_a_label(tmp_path: Path) -> None:
    """bin/test ends a file's last test line with `[OK]`, which the official parser skips: the official eval script
    runs whole files, so that test would be missing from every grading of a row that names it."""
    (tmp_path / "log.txt").write_text(
        "sympy/printing/tests/test_str.py[3] \ntest_a ok\ntest_b ok\n"
        "test_c ok                                                                   [OK]\n\n"
        "================== tests finished: 3 passed, in 0.10 seconds ===================\n")
    source = Source("s", str(tmp_path), "cat log.txt; true", ("sympy/printing/tests/test_str.py",),
                    parser="parse_log_sympy")
    assert baseline(source, 30).passing == ["test_a", "test_b"]


def _tiny_repo(path: Path) -> Path:
    (path / "pkg").mkdir(parents=True)
    (path / "pkg" / "__init__.py").write_text("")
    (path / "pkg" / "m.py").write_text("def f(x):\n    return x + 1\n")
    (path / "test_m.py").write_text("from pkg.m import f\n\n\ndef test_f():\n    assert f(1) == 2\n")
    _git(path, "init", "-q")
    _git(path, "add", "-A")
    _git(path, "commit", "-qm", "tiny")
    return path


def test_a_rerun_with_the_same_output_resumes_after_the_finished_sources(tmp_path: Path) -> None:
    """A killed run loses only the source in progress: its tasks written before it was recorded as finished are
    dropped and it is synthesized again; a finished source is skipped, its tasks and their commits kept."""
    first, second = _tiny_repo(tmp_path / "first"), _tiny_repo(tmp_path / "second")
    specs = [{"repo": str(repo), "test_command": f"{sys.executable} -m pytest -p no:cacheprovider -rA"}
             for repo in (first, second)]
    out, settings = tmp_path / "tasks.jsonl", SynthSettings(max_mutants=2, timeout_s=60)
    (done,) = run_synthesis(specs[:1], out, settings)
    assert done["kept"] and not done.get("resumed")
    before = out.read_text()
    stale = json.loads(before.splitlines()[0]) | {"task_id": "second.synth-0", "synthesis": {"source": "second"}}
    out.write_text(before + json.dumps(stale) + "\n" + '{"task_id": "cut sh')  # killed while writing `second`
    stats = run_synthesis(specs, out, settings)
    assert [s.get("resumed", False) for s in stats] == [True, False] and stats[0] == {**done, "resumed": True}
    tasks = [json.loads(line) for line in out.read_text().splitlines()]
    assert out.read_text().startswith(before) and "second.synth-0" not in out.read_text()
    assert {t["synthesis"]["source"] for t in tasks} == {"first", "second"}
    assert len({t["task_id"] for t in tasks}) == len(tasks) == done["kept"] + stats[1]["kept"]
    for task in tasks:  # the finished source's repository was left alone: its tasks' commits are still there
        _git(Path(task["repo_path"]), "cat-file", "-e", task["base_commit"])


def play_gold(env, patch: str) -> tuple[float, dict]:
    """Step a reset env with the gold-replaying policy until the episode ends: its last reward and info."""
    policy = GoldPolicy(patch)
    while True:
        _, reward, terminated, truncated, info = env.step(policy.act([])[0])
        if terminated or truncated:
            return reward, info
