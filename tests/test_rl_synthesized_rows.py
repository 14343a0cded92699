"""A task synthesized from a SWE-bench row is a row of that row's image: its setup patch (reference fix and mutant)
makes the broken state in the box before the agent starts and before a grader applies a patch. Fast: a row made
from a real git history round-trips through a tasks file and a training parquet's row. Docker: one of the
committed synthesized rows (requests', a small image) is resolved by its gold patch and not by the empty one in
the fresh and the pooled grader, and a `RepairEnv` episode on it runs in a container."""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

import pytest
from pinpoint.environments.docker_runtime import DockerRuntime
from pinpoint.rl.dataset import training_row
from pinpoint.rl.env import EnvSettings, RepairEnv
from pinpoint.rl.synthesize import inverse_patch, setup_patch, synthesized_row
from pinpoint.rl.tasks import load_tasks
from pinpoint.swebench_eval.datasets import DatasetError, Instance, load_instances, validate_row
from pinpoint.swebench_eval.evaluate import evaluate_patch
from test_rl_synthesize import play_gold

TASKS = Path(__file__).resolve().parents[1] / "rl" / "data" / "synth_tasks.jsonl.gz"
SOURCE = "psf__requests-1724"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", message)
    return _git(repo, "rev-parse", "HEAD").strip()


def test_a_synthesized_row_round_trips_through_a_tasks_file(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    base = _commit(repo, {"pkg/m.py": "def f():\n    return 1\n", "tests/test_m.py": "def test_f():\n    pass\n"},
                   "base")
    _commit(repo, {"pkg/m.py": "def f():\n    return 2\n", "tests/test_m.py": "def test_f():\n    assert 1\n"},
            "reference fix and tests")
    test_patch = _git(repo, "diff", base, "HEAD", "--", "tests")
    mutant = _commit(repo, {"pkg/m.py": "def f():\n    return 3\n"}, "mutant")
    source = validate_row({"instance_id": "o__n-1", "repo": "o/n", "base_commit": base, "patch": "",
                           "test_patch": test_patch, "version": "1.0", "FAIL_TO_PASS": ["tests/test_m.py::test_f"],
                           "difficulty": "<15 min fix"}, "row")
    setup = setup_patch(str(repo), source, mutant)
    assert "pkg/m.py" in setup and "tests/test_m.py" not in setup  # test files come from the test patch
    assert "-    return 1\n+    return 3\n" in setup  # from the base commit: the reference fix and the mutant
    gold = inverse_patch("pkg/m.py", "def f():\n    return 3\n", "def f():\n    return 2\n")
    row = synthesized_row(source, "o__n-1.synth-abc", setup, gold, "These tests used to pass and now fail: ...",
                          ["tests/test_m.py::test_f"], [], {"operator": "constant"})
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text(json.dumps(row) + "\n")
    (task,) = load_tasks(tasks_file)
    instance = task.instance
    assert task.kind == "swebench" and task.task_id == "o__n-1.synth-abc" and task.gold_patch == gold
    assert instance.setup_patch == setup and instance.test_patch == test_patch
    assert instance.FAIL_TO_PASS == ("tests/test_m.py::test_f",) and instance.base_commit == base
    assert instance.image_row().instance_id == "o__n-1" and not instance.image_row().setup_patch
    assert instance.extra == {"synthesis": {"operator": "constant"}}  # nothing of the source row's own labels
    assert validate_row(instance.to_row(), "again") == instance
    shipped = json.loads(training_row(task, 0)["extra_info"]["task"])  # what a trainer's node rebuilds it from
    assert validate_row(shipped, "parquet") == instance


def test_a_row_without_a_setup_patch_is_as_before_and_a_bad_one_is_refused() -> None:
    row = {"instance_id": "o__n-1", "repo": "o/n", "base_commit": "abc", "patch": "", "version": "1.0",
           "test_patch": "diff --git a/t.py b/t.py\n"}
    plain = validate_row(row, "row")
    assert "setup_patch" not in plain.to_row() and plain.image_row() is plain
    with pytest.raises(DatasetError, match=r"row \(o__n-1\): field 'setup_patch' must be a unified diff"):
        validate_row({**row, "setup_patch": "not a diff"}, "row")


def _rows(source: str) -> list[Instance]:
    with gzip.open(TASKS, "rt") as handle:
        rows = [json.loads(line) for line in handle]
    return [validate_row(r, "row") for r in rows if r["synthesis"]["source"] == source]


@pytest.mark.docker
@pytest.mark.slow
def test_the_gold_patch_resolves_a_synthesized_row_and_the_empty_patch_does_not_fresh_and_pooled() -> None:
    from pinpoint.swebench_eval.images import build_instance_image
    from pinpoint.swebench_eval.pooled import prime
    from pinpoint.swebench_eval.runtime import instance_runtime

    first, second = _rows(SOURCE)[:2]
    (source,) = load_instances(ids=[SOURCE])
    assert [evaluate_patch(first, p).outcome for p in (first.patch, "")] == ["resolved", "unresolved"]
    tag = build_instance_image(first).tag
    assert tag == build_instance_image(second).tag == build_instance_image(first.image_row()).tag  # one image
    box = instance_runtime(first, tag, grading=True)
    try:
        prime(box, first)
        # one warm box, switched between two tasks of the image and the row they were made from: each grading
        # starts from its own row's state
        verdicts = [evaluate_patch(row, patch, runtime=box, warm=True)
                    for row, patch in ((first, first.patch), (second, ""), (second, second.patch), (first, ""),
                                       (source, source.patch), (first, first.patch))]
    finally:
        box.close()
    assert [(v.instance_id, v.outcome) for v in verdicts] == [
        (first.instance_id, "resolved"), (second.instance_id, "unresolved"), (second.instance_id, "resolved"),
        (first.instance_id, "unresolved"), (SOURCE, verdicts[4].outcome), (first.instance_id, "resolved")]
    # the row itself, graded after its tasks in that box, gets a fresh box's per-test verdicts (offline, some of
    # its tests need the network)
    fresh = evaluate_patch(source, source.patch)
    assert verdicts[4].report[SOURCE]["tests_status"] == fresh.report[SOURCE]["tests_status"]


@pytest.mark.docker
@pytest.mark.slow
def test_an_episode_on_a_synthesized_row_runs_in_a_container_from_its_broken_state() -> None:
    row = _rows(SOURCE)[0]
    broken = next(line[1:] for line in row.patch.splitlines() if line.startswith("-") and not line.startswith("---"))
    path = row.extra["synthesis"]["file"]
    with RepairEnv(EnvSettings(reward="unit", grader="pooled")) as env:
        env.reset(options={"task": row.to_row()})
        runtime = env._episode.runtime
        assert isinstance(runtime, DockerRuntime) and runtime.container is not None  # not the host
        assert broken in runtime.read_file(path).decode()  # the setup patch was applied before the agent's first step
        assert runtime.diff() == ""  # and is the episode's base: the agent's diff holds only its own edits
        reward, info = play_gold(env, row.patch)
        assert reward == 1.0, info
        env.reset(options={"task": row.to_row()})
        _, empty, *_ = env.step({"name": "submit", "arguments": {}})
    assert empty == 0.0
