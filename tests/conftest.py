"""Shared fixtures: real repositories from the development data and real images built by the (caching) builders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pinpoint.environments.repo_image import extract_shared_repo
from two_nodes import instance_engine  # noqa: F401 - the session's second engine, for the two-node tests

#: the development data (SWE-bench dev rows, offline repositories, bug sets) beside the checkout; the product's own
#: default is the user's XDG data folder, so the tests (and the commands they start) name this one
DEV_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
os.environ.setdefault("PINPOINT_SHARED_DATA", str(DEV_DATA))


@pytest.hookimpl(tryfirst=True)  # before the -m selection reads the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test of a module that needs the Docker engine or Ray is marked `engine` (`-m engine` selects them,
    `-m "not engine"` the rest): those modules share the engine, its images, Ray's ports and the second node's
    network, and their nothing-left-behind checks look at the whole engine. A test marked `host_only` stays out:
    it reaches no engine, no Ray and no shared fixture of its module's engine tests, so it runs with the others."""
    shared = {item.module for item in items
              if item.get_closest_marker("docker") or item.get_closest_marker("serial")}
    for item in items:
        if item.module in shared and not item.get_closest_marker("host_only"):
            item.add_marker(pytest.mark.engine)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The folders that processes the tests killed (`fix`, drivers, Ray workers, builds) left in the temporary
    folder go, as the next pinpoint start would remove them (`process_tempdir`); a killed process cannot remove its
    own, and a suite's last kills have no next start after them."""
    from pinpoint.environments.files import remove_orphan_folders

    removed = remove_orphan_folders()
    if removed:
        print(f"\npinpoint tests: removed {len(removed)} folder(s) that killed processes left: {', '.join(removed)}")


#: where a test outside the engine modules looks for a Docker engine: nowhere
NO_ENGINE = "unix:///nonexistent/pinpoint-tests-outside-the-engine-group.sock"


@pytest.fixture(autouse=True)
def _engine_only_in_its_group(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """A test outside the engine modules cannot reach the Docker engine, nor can what it starts: every pinpoint
    run sweeps this user's orphaned boxes off the engine, so an unmarked test that touched it could remove what an
    engine test is checking (and would hide that it needs the engine). A test that needs the engine says so with
    the docker (or serial) marker."""
    if request.node.get_closest_marker("engine"):
        yield
        return
    from pinpoint.environments import engine

    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    engine.client.cache_clear()  # a client an engine test left in this worker would still reach the engine
    yield
    engine.client.cache_clear()


@pytest.fixture(autouse=True, scope="session")
def _no_user_config(tmp_path_factory: pytest.TempPathFactory):
    """Every test (and the CLI it starts in a subprocess) reads an empty XDG config folder, never the developer's
    own ~/.config/pinpoint/config.yaml (a test that wants a user file sets XDG_CONFIG_HOME itself), and a run
    without -o/--output writes under a temporary folder, never into the checkout's ./runs (where a run left by an
    older version would refuse the next one's settings). A pytest that a test starts on the host (a team
    repository's test command) loads no entry-point plugins: this venv's hypothesis and langsmith plugins cost
    ~1.3 s per start, and no test command here uses one."""
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))
    mp.setenv("PINPOINT_RUNS", str(tmp_path_factory.mktemp("runs")))
    mp.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    yield
    mp.undo()


#: psf/requests v2.27.0, the base commit of a SWE-bench Verified dev row
REQUESTS_COMMIT = "0192aac24123735b3eaf9b08df46429bb770c283"


@pytest.fixture(scope="session")
def requests_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Path of a bare psf/requests repository (HEAD names no commit: pass `requests_commit`)."""
    return extract_shared_repo("psf__requests", tmp_path_factory.mktemp("repos"))


@pytest.fixture(scope="session")
def requests_commit() -> str:
    return REQUESTS_COMMIT


@pytest.fixture
def local_requests(requests_repo: Path, requests_commit: str):
    """A LocalRuntime on psf/requests at `requests_commit`, closed after the test."""
    from pinpoint.environments.local import LocalRuntime

    with LocalRuntime(requests_repo, requests_commit) as runtime:
        yield runtime


@pytest.fixture(scope="session")
def docker_client():
    """A client for a Docker engine that answers (installing/starting one where `pinpoint env up` can)."""
    from pinpoint.environments.engine import ensure_engine

    return ensure_engine()


@pytest.fixture(scope="session")
def base_image_311(docker_client) -> str:
    """Tag of the real Python 3.11 base image (built once, then cached by the builder)."""
    from pinpoint.environments.images import ensure_base_image

    return ensure_base_image("3.11")


@pytest.fixture(scope="session")
def requests_image(docker_client, requests_repo: Path, requests_commit: str) -> str:
    """Tag of an image with psf/requests at `requests_commit` in /testbed, editable-installed in /opt/venv."""
    from pinpoint.environments.repo_image import build_repo_image

    return build_repo_image(requests_repo, requests_commit, python_version="3.11")


def demo_gold_patch(repo: Path, bug: str) -> str:
    """The reference fix of a demo bug: its canonical solution in place of the buggy one, as git shows it."""
    import subprocess

    from pinpoint.agent.demo import demo_tasks

    task = {t["task_id"]: t for t in demo_tasks()["tasks"]}[bug]
    module = repo / "numeric" / "functions.py"
    original = module.read_text()
    module.write_text(original.replace(task["buggy_solution"].rstrip("\n"), task["canonical_solution"].rstrip("\n")))
    patch = subprocess.run(["git", "diff"], cwd=repo, capture_output=True, text=True, check=True).stdout
    module.write_text(original)
    return patch


@pytest.fixture(scope="session")
def demo_task(tmp_path_factory: pytest.TempPathFactory):
    """The demo's real HumanEvalFix bug (Python/2) as a local RL task, with its reference fix as the gold patch."""
    from pinpoint.agent.demo import build_demo_repo
    from pinpoint.rl.tasks import RlTask

    demo = build_demo_repo(tmp_path_factory.mktemp("demo") / "repo")
    gold = demo_gold_patch(demo.path, "Python/2")
    return RlTask.local("demo-Python-2", demo.path, demo.task.problem_statement, demo.task.test_command,
                        gold_patch=gold)
