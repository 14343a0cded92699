"""One real SWE-bench instance end to end, through the same handler as `pinpoint eval`: real repository, real
layered images, real tests in a container, graded by the official parser and grader."""

from __future__ import annotations

import argparse
import json
import subprocess

import pytest
from pinpoint.swebench_eval.cli import register
from pinpoint.swebench_eval.datasets import load_instances
from pinpoint.swebench_eval.evaluate import evaluate_patch
from pinpoint.swebench_eval.images import build_instance_image, top_layer_files
from pinpoint.swebench_eval.sources import RepoSources

pytestmark = pytest.mark.docker

#: psf/requests builds fastest (Python 3.9, pytest and `pip install .`); -2931 would need real network timeouts
INSTANCE = "psf__requests-1142"
F2P = ["test_requests.py::RequestsTestCase::test_no_content_length"]
#: the package sleeps when the tests import it, so the run outlasts a short timeout on any machine (the suite alone
#: can finish in under 3 s on a fast one); in the package, not a conftest.py, which the grader would put back
SLEEPING_IMPORT = "\n".join([
    "diff --git a/requests/__init__.py b/requests/__init__.py",
    "--- a/requests/__init__.py",
    "+++ b/requests/__init__.py",
    "@@ -69,3 +69,5 @@",
    "             pass",
    " ",  # a blank context line
    " logging.getLogger(__name__).addHandler(NullHandler())",
    "+import time",
    "+time.sleep(600)",
    "",
])


def _eval(tmp_path, capsys, *flags: str) -> tuple[dict, str]:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["eval", *flags, "--instance", INSTANCE, "--output", str(tmp_path), "--run-id", "t"])
    assert args.func(args) == 0
    model = "gold" if "--gold" in flags else "empty"  # results: <runs-dir>/<run-id>/<model>/eval/<instance>/
    report = json.loads((tmp_path / "t" / model / "eval" / INSTANCE / "report.json").read_text())[INSTANCE]
    return report, capsys.readouterr().out


def test_gold_resolves_empty_does_not_and_a_rerun_is_skipped(tmp_path, capsys, docker_client):
    gold, _ = _eval(tmp_path / "gold", capsys, "--gold")
    assert gold["resolved"] is True and gold["pinpoint"]["outcome"] == "resolved"
    assert gold["tests_status"]["FAIL_TO_PASS"]["success"] == F2P
    assert gold["pinpoint"]["test_exit_code"] is not None  # recorded (non-zero here: tests outside the lists fail)
    run_dir = tmp_path / "gold" / "t"
    log = (run_dir / "gold" / "eval" / INSTANCE / "test_output.txt").read_text()
    assert ">>>>> Start Test Output" in log and ">>>>> Test Exit Code: " in log
    assert (run_dir / "gold" / "eval" / INSTANCE / "eval.sh").exists()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["resolved_instances"] == 1 and summary["ids"]["resolved"] == [INSTANCE]

    _, out = _eval(tmp_path / "gold", capsys, "--gold")
    assert f"{INSTANCE}: resolved (finished earlier)" in out

    empty, _ = _eval(tmp_path / "empty", capsys, "--empty")
    assert empty["resolved"] is False and empty["pinpoint"]["outcome"] == "unresolved"
    assert empty["tests_status"]["FAIL_TO_PASS"]["failure"] == F2P
    assert empty["pinpoint"]["test_exit_code"] == 1


def test_a_test_run_past_its_timeout_is_an_infrastructure_failure(tmp_path, docker_client):
    instance = load_instances(ids=[INSTANCE])[0]
    verdict = evaluate_patch(instance, instance.patch + SLEEPING_IMPORT, out_dir=tmp_path, timeout=3)
    assert verdict.outcome == "timeout" and verdict.infra_failure and not verdict.resolved
    assert "Timeout error: 3 seconds exceeded." in (tmp_path / "test_output.txt").read_text()


def test_the_instance_layer_is_slim_and_a_reset_still_restores_the_tree(docker_client):
    """The instance layer holds the checkout, its .git and the install; not what the build step left behind (bytecode,
    a pure-Python build/ tree, pip's cache, git's sample hooks); and git still resets the tree to the base commit."""
    instance = load_instances(ids=[INSTANCE])[0]
    tag = build_instance_image(instance).tag
    files = top_layer_files(tag)
    assert "testbed/.git/index" in files and any(p.startswith("testbed/.git/objects/pack/") for p in files)
    leftovers = [p for p in files if p.endswith(".pyc") or p.startswith(("testbed/build/", "root/.cache/"))
                 or (p.startswith("testbed/.git/hooks/") and p.endswith(".sample"))]
    assert leftovers == []
    script = (f"cd /testbed && echo x >> requests/api.py && rm setup.py && test -n \"$(git status --porcelain)\" && "
              f"git checkout -q {instance.base_commit} -- . && git diff --quiet {instance.base_commit} && "
              "git status --porcelain")
    out = docker_client.containers.run(tag, ["bash", "-c", script], remove=True, network_mode="none")
    assert out.decode().strip() == ""


def test_over_a_shared_reference_the_box_sees_the_base_commit_alone_and_the_layer_holds_only_its_changes(
        docker_client):
    """pytest-7432's quarter has three commits: its reference is another row's base. In the box: the base tree
    exactly (no file of the reference's commit the base lacks), a clean status, the base commit and the SWE-bench
    commit as the only history, and no object outside the base commit's tree (nothing of the reference leaks).
    In the layer: the files that differ, not the checkout."""
    from pinpoint.swebench_eval.reference import archive_dir, tree_objects

    instance = load_instances(ids=["pytest-dev__pytest-7432"])[0]
    record = build_instance_image(instance)
    plan, base = record.plan, instance.base_commit
    assert plan.reference.commit != base
    script = ("cd /testbed && git status --porcelain && echo --- && git log --format=%H%n%P%n%s && echo --- && "
              "git cat-file --batch-all-objects --batch-check='%(objectname)' && echo --- && git ls-files")
    out = docker_client.containers.run(plan.instance_tag, ["bash", "-c", script], remove=True, network_mode="none")
    status, log, objects, tracked = out.decode().split("---\n")
    assert status == ""
    swe_commit, parent, subject, base_again, no_parent, _ = log.split("\n", 5)
    assert (parent, subject, base_again, no_parent) == (base, "SWE-bench", base, "")
    git_dir = archive_dir(RepoSources(), instance.repo)
    tree = tree_objects(git_dir, base)
    assert set(objects.split()) == tree | {base, swe_commit}
    base_paths = subprocess.run(["git", "--git-dir", str(git_dir), "ls-tree", "-r", "--name-only", base],
                                capture_output=True, text=True, check=True).stdout.split()
    assert sorted(tracked.split()) == sorted(base_paths)
    ref_only = set(subprocess.run(["git", "--git-dir", str(git_dir), "ls-tree", "-r", "--name-only",
                                   plan.reference.commit], capture_output=True, text=True, check=True).stdout.split())
    gone = sorted(ref_only - set(base_paths))
    if gone:
        probe = " && ".join(f"test ! -e /testbed/{path}" for path in gone[:50])
        docker_client.containers.run(plan.instance_tag, ["bash", "-c", probe], remove=True, network_mode="none")
    changed = subprocess.run(["git", "--git-dir", str(git_dir), "diff", "--name-only", plan.reference.commit, base],
                             capture_output=True, text=True, check=True).stdout.split()
    files = top_layer_files(plan.instance_tag)
    in_layer = {path.removeprefix("testbed/") for path in files} & set(base_paths)
    assert in_layer and in_layer <= set(changed)  # no tracked file the reference already holds as the base has it
    assert len(in_layer) < len(base_paths) / 2  # most of the checkout comes from the reference
