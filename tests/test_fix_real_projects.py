"""`pinpoint fix` used as a team would: the installed `pinpoint` script as a subprocess, run from inside the team's
repository on `.`, against the FAKE scripted OpenAI-compatible endpoint (tests/fake_llm_server.py) over real HTTP.
Each test is a defect a new team met: a crash on `.`, results left untracked in their repository, a second run
making every model call twice, a finished run rewritten, bad flags accepted, a dead-end `--offline` box."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_llm_server import FakeScriptedLLMServer, delay, garbage_reply, http_error, tool_call
from test_fix_own_repo import FIX, ISSUE, PYTEST, make_team_repo

PINPOINT = str(Path(sys.executable).parent / "pinpoint")
QUICK = ("--set", "agent.execution=false", "--set", "search.policy=none")
#: the test command inside the box pinpoint builds (its venv's python)
IN_BOX = "python -m pytest -q tests"


def repo_images(prefix: str) -> set[str]:
    """The engine's `pinpoint/repo` images whose tag starts with `prefix` (a repository's name)."""
    listed = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}", "pinpoint/repo"],
                            capture_output=True, text=True).stdout.split()
    return {tag for tag in listed if tag.startswith(f"pinpoint/repo:{prefix}")}


@pytest.fixture
def team_images():
    """The images these tests build for the team's repository, removed afterwards (each test's repository is a
    new commit, so each would leave ~300 MB behind)."""
    before = repo_images("team-app-")
    yield
    made = repo_images("team-app-") - before
    if made:
        subprocess.run(["docker", "rmi", "-f", *made], capture_output=True)


def _script() -> list:
    return [tool_call("str_replace_editor", FIX), tool_call("submit", {}), tool_call("submit", {})]


@pytest.fixture
def team(tmp_path: Path) -> Path:
    repo = make_team_repo(tmp_path / "team-app")
    (repo.parent / "issue.md").write_text(ISSUE)
    return repo


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PINPOINT_RUNS", "OPENAI_BASE_URL", "PINPOINT_MODEL")}
    return {**env, "HOME": str(tmp_path / "home"), "XDG_DATA_HOME": str(tmp_path / "data"),
            "XDG_CONFIG_HOME": str(tmp_path / "config")}


def pinpoint(repo: Path, fake: FakeScriptedLLMServer, *args: str, env: dict[str, str] | None = None,
             test_cmd: str | None = f"{PYTEST} -q tests", local: bool = True) -> subprocess.CompletedProcess:
    """`pinpoint fix . --issue ../issue.md ...` run from inside `repo`, as the docs show it."""
    argv = [PINPOINT, "fix", ".", "--issue", "../issue.md", "--base-url", fake.base_url, *QUICK, *args]
    argv += ["--test-cmd", test_cmd] if test_cmd is not None else []
    argv += ["--local"] if local else []
    return subprocess.run(argv, cwd=repo, env=env or _env(repo.parent), capture_output=True, text=True, timeout=600)


def _one_line_refusal(proc: subprocess.CompletedProcess) -> str:
    """The error: stderr's last line (notices such as the run id come before it), with no traceback."""
    err = proc.stderr.strip()
    assert proc.returncode == 2, (proc.stdout, err)
    assert "Traceback" not in err and err, err
    return err.splitlines()[-1]


def _results(stdout: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in stdout.splitlines() if ": " in line)


def test_fix_dot_names_the_run_after_the_folder_and_leaves_the_repository_clean(team):
    with FakeScriptedLLMServer(_script()) as fake:
        proc = pinpoint(team, fake)
    assert proc.returncode == 0, proc.stderr
    out = _results(proc.stdout)
    assert out["tests on the final patch"] == "PASS (10 passed, 0 failed)"
    run_dir = Path(out["trajectory"]).parent
    assert run_dir.name.startswith("team-app-mean-is-off-for-every-list-")
    assert run_dir.is_relative_to(team.parent / "data" / "pinpoint" / "runs")  # the user's data folder
    untracked = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=team, capture_output=True,
                               text=True).stdout
    assert untracked == ""  # nothing left in the team's repository


def test_a_tilde_in_the_output_folder_is_the_home_folder(team):
    with FakeScriptedLLMServer(_script()) as fake:
        proc = pinpoint(team, fake, "--output", "~/pinpoint-runs")
    assert proc.returncode == 0, proc.stderr
    assert Path(_results(proc.stdout)["trajectory"]).is_relative_to(team.parent / "home" / "pinpoint-runs")
    assert not (team / "~").exists()


def test_a_second_identical_command_says_the_first_holds_the_run_and_asks_no_model(team):
    with FakeScriptedLLMServer([delay(60, _script()[0]), *_script()[1:]]) as fake:
        argv = [PINPOINT, "fix", ".", "--issue", "../issue.md", "--base-url", fake.base_url, *QUICK, "--local",
                "--test-cmd", f"{PYTEST} -q tests"]
        first = subprocess.Popen(argv, cwd=team, env=_env(team.parent), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            while not fake.chat_requests and first.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert fake.chat_requests, first.stderr.read() if first.poll() is not None else "no model call"
            second = pinpoint(team, fake)
            assert len(fake.chat_requests) == 1  # the second run made no model call
        finally:
            first.kill()
            first.communicate()
    err = _one_line_refusal(second)
    assert "another pinpoint process is running this run" in err


def test_a_finished_run_is_returned_as_it_was_without_rewriting_it(team):
    with FakeScriptedLLMServer(_script()) as fake:
        assert pinpoint(team, fake).returncode == 0
        asked = len(fake.chat_requests)
        first = _results(pinpoint(team, fake, "--set", "budget.max_steps=30").stdout)  # the same settings
        trajectory = Path(first["trajectory"])
        before = trajectory.read_bytes(), trajectory.stat().st_mtime_ns
        again = pinpoint(team, fake)
        assert len(fake.chat_requests) == asked
    assert again.returncode == 0 and "already finished" in again.stderr
    assert (trajectory.read_bytes(), trajectory.stat().st_mtime_ns) == before
    assert _results(again.stdout)["tests on the final patch"] == "PASS (10 passed, 0 failed)"


def test_a_run_ended_by_the_endpoint_says_why_its_tests_did_not_run(team):
    with FakeScriptedLLMServer([http_error(400, "model not loaded")]) as fake:
        proc = pinpoint(team, fake)
    assert proc.returncode == 2
    assert _results(proc.stdout)["tests on the final patch"] == "not run (the run ended with llm_error)"


def test_one_non_json_reply_is_retried_like_a_server_error(team):
    with FakeScriptedLLMServer([garbage_reply(), *_script()]) as fake:
        proc = pinpoint(team, fake, "--set", "llm.retry_backoff_s=0.1")
    assert proc.returncode == 0, proc.stderr
    assert _results(proc.stdout)["status"].startswith("submitted")


@pytest.mark.parametrize("args, says", [
    (("--test-cmd", ""), "--test-cmd is empty"),
    (("--set", "budget.max_steps=0"), "budget.max_steps 0: give at least 1"),
    (("--set", "budget.max_steps=-1"), "budget.max_steps -1: give at least 1"),
    (("--branch", "fix..7"), "is not a valid branch name"),
    (("--branch", "main"), "already exists"),
])
def test_bad_flags_are_refused_before_any_model_call(team, args, says):
    subprocess.run(["git", "branch", "-m", "main"], cwd=team, check=True)
    with FakeScriptedLLMServer(_script()) as fake:
        proc = pinpoint(team, fake, *args, test_cmd=None)
        assert fake.chat_requests == []
    assert says in _one_line_refusal(proc)


def test_show_takes_a_run_folder(team):
    with FakeScriptedLLMServer(_script()) as fake:
        run_dir = Path(_results(pinpoint(team, fake).stdout)["trajectory"]).parent
    shown = subprocess.run([PINPOINT, "show", str(run_dir), "--json"], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["status"] == "submitted"


@pytest.mark.docker
@pytest.mark.slow
def test_fix_dot_in_a_container_results_on_stdout_and_offline_stops_at_the_preflight(team, team_images):
    with FakeScriptedLLMServer(_script()) as fake:
        proc = pinpoint(team, fake, local=False, test_cmd=IN_BOX)
        assert proc.returncode == 0, proc.stderr
        assert not [line for line in proc.stdout.splitlines() if line.startswith("pinpoint")]  # notices: stderr
        assert "pinpoint/repo:team-app-" in proc.stderr
        assert _results(proc.stdout)["tests on the final patch"] == "PASS (10 passed, 0 failed)"
        asked = len(fake.chat_requests)
        offline = pinpoint(team, fake, "--offline", local=False, test_cmd=IN_BOX)
        assert len(fake.chat_requests) == asked
    err = _one_line_refusal(offline)
    assert "no module named 'pytest'" in err and "drop --offline" in err


@pytest.mark.docker
def test_an_unavailable_python_is_a_user_facing_line(team):
    with FakeScriptedLLMServer(_script()) as fake:
        proc = pinpoint(team, fake, "--python", "3.12", local=False, test_cmd=IN_BOX)
        assert fake.chat_requests == []
    err = _one_line_refusal(proc)
    assert "--python 3.12" in err and "allow_nearest" not in err


@pytest.mark.docker
@pytest.mark.slow
def test_allow_dirty_reuses_one_image_for_the_same_changes(team, team_images):
    (team / "calc" / "text.py").write_text("def shout(word):\n    return word.upper() + '!!'\n")
    before = repo_images("team-app-")
    with FakeScriptedLLMServer(_script(), default=tool_call("submit", {})) as fake:
        for _ in range(2):
            proc = pinpoint(team, fake, "--allow-dirty", "--fresh", local=False, test_cmd=IN_BOX)
            assert proc.returncode == 0, proc.stderr
    assert len(repo_images("team-app-") - before) == 1  # one image, named after the repository (not its copy)
