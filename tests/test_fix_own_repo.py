"""`pinpoint fix` on a team's own repository, through the real CLI: a real git repository with a four-module package,
a ten-test pytest suite and a planted bug, and the FAKE scripted model over real HTTP. Covers the run's identity
(a different question never resumes an old answer), the clone being what the tests import, a broken test command
refused before any model call, the endpoint preflight, the conventions (environment variables, --version, dirty
trees, the issue's title) and the results on stdout."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_lines import said
from fake_llm_server import FakeScriptedLLMServer, tool_call
from pinpoint.cli import main

MODULES = {
    "calc/__init__.py": '"""A small calculator package."""\n',
    "calc/arith.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n",
    "calc/stats.py": textwrap.dedent('''\
        """Summary statistics."""


        def total(values):
            return sum(values)


        def mean(values):
            return total(values) / (len(values) + 1)
        '''),
    "calc/text.py": "def shout(word):\n    return word.upper() + '!'\n",
    "tests/test_arith.py": textwrap.dedent('''\
        from calc.arith import add, sub


        def test_add():
            assert add(2, 3) == 5


        def test_add_negative():
            assert add(-2, 3) == 1


        def test_sub():
            assert sub(5, 3) == 2


        def test_sub_zero():
            assert sub(0, 0) == 0
        '''),
    "tests/test_stats.py": textwrap.dedent('''\
        from calc.stats import mean, total


        def test_total():
            assert total([1, 2, 3]) == 6


        def test_mean():
            assert mean([1, 2, 3]) == 2


        def test_mean_one():
            assert mean([4]) == 4


        def test_mean_floats():
            assert mean([0.5, 1.5]) == 1.0
        '''),
    "tests/test_text.py": "from calc.text import shout\n\n\ndef test_shout():\n    assert shout('hi') == 'HI!'\n\n\n"
                          "def test_shout_empty():\n    assert shout('') == '!'\n",
}
ISSUE = "# mean() is off for every list\n\n`calc.stats.mean([1, 2, 3])` returns 1.5 instead of 2.\n"
FIX = {"command": "str_replace", "path": "calc/stats.py", "old_str": "total(values) / (len(values) + 1)",
       "new_str": "total(values) / len(values)"}
#: no execution tracing (coverage, LDB): minutes of a 2-core machine that these checks do not need
FAST = ("--set", "agent.execution=false")
#: the pytest script (not `python -m pytest`, which would put the working directory first on the path itself)
PYTEST = str(Path(sys.executable).parent / "pytest")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def make_team_repo(repo: Path) -> Path:
    """The team's repository at `repo`, committed, with the planted bug in calc/stats.py (3 of its 10 tests fail)."""
    for name, text in MODULES.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    _git(repo.parent, "init", "-q", str(repo))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "calc")
    return repo


@pytest.fixture
def team_repo(tmp_path: Path) -> Path:
    return make_team_repo(tmp_path / "team-app")


def _issue(tmp_path: Path, text: str = ISSUE, folder: str = "a") -> Path:
    path = tmp_path / folder / "issue.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _fix(repo: Path, issue: Path, out: Path, fake: FakeScriptedLLMServer, *extra: str) -> int:
    return main(["fix", str(repo), "--issue", str(issue), "--local", "--test-cmd", f"{PYTEST} -q tests",
                 "--output", str(out), "--set", "search.policy=none", "--base-url", fake.base_url, *FAST, *extra])


def _script() -> list:
    return [tool_call("str_replace_editor", FIX), tool_call("submit", {}), tool_call("submit", {})]


def _trajectories(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("fix/*/trajectories/*/trajectory.json"))]


TWO = ("--set", "budget.max_steps=2")


def test_a_different_issue_with_the_same_file_name_never_resumes_the_old_answer(team_repo, tmp_path, capsys):
    out = tmp_path / "out"
    with FakeScriptedLLMServer(_script(), default=tool_call("submit", {})) as fake:
        assert _fix(team_repo, _issue(tmp_path), out, fake) == 0
        other = _issue(tmp_path, "# shout() should not add '!'\n\nIt is rude.\n", folder="b")  # same file name
        asked = len(fake.chat_requests)
        assert _fix(team_repo, other, out, fake, *TWO) == 1  # a new run: the model submits no edit this time
        assert len(fake.chat_requests) > asked
        capsys.readouterr()
        asked = len(fake.chat_requests)
        assert _fix(team_repo, other, out, fake, *TWO) == 1  # the same question: returned as is, no model call
        assert "already finished" in capsys.readouterr().err and len(fake.chat_requests) == asked
        assert _fix(team_repo, other, out, fake, "--set", "budget.max_steps=3") == 1  # another budget: another run
        assert len(fake.chat_requests) > asked
        asked = len(fake.chat_requests)
        assert _fix(team_repo, other, out, fake, "--set", "budget.max_steps=3", "--fresh") == 1
        assert len(fake.chat_requests) > asked and "new run" in capsys.readouterr().err
    runs = _trajectories(out)
    assert len(runs) == 3
    for run in runs:  # each trajectory's conversation is about its own task
        assert run["task"]["problem_statement"].splitlines()[-1] in json.dumps(run["messages"])


def test_local_tests_import_the_clone_not_the_users_checkout(team_repo, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PYTHONPATH", str(team_repo))  # the user's environment imports their own checkout
    with FakeScriptedLLMServer(_script()) as fake:
        assert _fix(team_repo, _issue(tmp_path), tmp_path / "out", fake) == 0
    stdout = capsys.readouterr().out
    assert "tests on the final patch: PASS (10 passed, 0 failed)" in stdout
    [run] = _trajectories(tmp_path / "out")
    assert run["status"] == "submitted" and run["test_runs"][-1]["ok"] is True
    assert "total(values) / len(values)" in run["final_patch"]


def _refused(capsys, code: int) -> str:
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(said(err)) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("command, says", [("nosuchtool -q", "command not found"),
                                           (f"{PYTEST} -q tests/test_nothing_here.py", "pytest exit 4"),
                                           (f"{PYTEST} -q -k no_such_test tests", "pytest exit 5")])
def test_a_broken_test_command_is_refused_before_any_model_call(team_repo, tmp_path, capsys, command, says):
    with FakeScriptedLLMServer(_script()) as fake:
        code = main(["fix", str(team_repo), "--issue", str(_issue(tmp_path)), "--local", "--test-cmd", command,
                     "--output", str(tmp_path / "out"), "--base-url", fake.base_url])
        assert fake.chat_requests == []
    err = _refused(capsys, code)
    assert "misconfigured" in err and says in err


def test_a_collection_error_is_a_misconfigured_command(team_repo, tmp_path, capsys):
    (team_repo / "tests" / "test_broken.py").write_text("import no_such_module\n")
    _git(team_repo, "add", "-A")
    _git(team_repo, "commit", "-qm", "a test that cannot be collected")
    with FakeScriptedLLMServer(_script()) as fake:
        err = _refused(capsys, _fix(team_repo, _issue(tmp_path), tmp_path / "out", fake))
        assert fake.chat_requests == []
    assert "pytest exit 2" in err and "no_such_module" in err


def test_an_unreachable_endpoint_is_one_line_before_any_work(team_repo, tmp_path, capsys):
    code = main(["fix", str(team_repo), "--issue", str(_issue(tmp_path)), "--local", "--test-cmd", "true",
                 "--output", str(tmp_path / "out"), "--base-url", "http://127.0.0.1:9/v1"])
    err = _refused(capsys, code)
    assert "http://127.0.0.1:9/v1 does not answer" in err
    assert not (tmp_path / "out").exists()


def test_openai_base_url_and_the_servers_model_name_are_used(team_repo, tmp_path, monkeypatch, capsys):
    with FakeScriptedLLMServer(_script(), model="served-model") as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        code = main(["fix", str(team_repo), "--issue", str(_issue(tmp_path)), "--local", "--test-cmd",
                     f"{PYTEST} -q tests", "--output", str(tmp_path / "out"), "--set", "search.policy=none",
                     "--branch", "pinpoint/mean", *FAST])
        assert code == 0 and len(fake.chat_requests) == 3
    stdout = capsys.readouterr().out
    [trajectory] = (tmp_path / "out" / "fix" / "served-model" / "trajectories").glob("*/trajectory.json")
    assert trajectory.parent.name.startswith("team-app-mean-is-off-for-every-list-")  # the issue's title
    assert f"trajectory: {trajectory.resolve()}" in stdout
    assert f"inspect: pinpoint inspect {trajectory.parent.resolve()}" in stdout
    assert _git(team_repo, "log", "-1", "--format=%s", "pinpoint/mean") == "mean() is off for every list"


def test_a_dirty_tree_is_refused_unless_allowed(team_repo, tmp_path, capsys):
    (team_repo / "calc" / "text.py").write_text("def shout(word):\n    return word.upper() + '!!'\n")
    with FakeScriptedLLMServer(_script(), default=tool_call("submit", {})) as fake:
        err = _refused(capsys, _fix(team_repo, _issue(tmp_path), tmp_path / "out", fake))
        assert "uncommitted changes (calc/text.py)" in err and "--allow-dirty" in err
        assert _fix(team_repo, _issue(tmp_path), tmp_path / "out", fake, "--allow-dirty", "--set", "budget.max_steps=4") == 0
    captured = capsys.readouterr()
    assert "working on the working tree" in captured.err
    assert "FAIL (8 passed, 2 failed)" in captured.out  # the user's uncommitted '!!' is what was tested
    [run] = _trajectories(tmp_path / "out")
    assert "calc/text.py" not in run["final_patch"]  # their changes are the base, not part of the patch


def test_version_and_the_documented_variables_in_help(capsys):
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.startswith("pinpoint ")
    with pytest.raises(SystemExit):
        main(["fix", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for word in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "PINPOINT_MODEL", "--fresh", "--allow-dirty", "Exit codes"):
        assert word in help_text


def test_sigterm_ends_the_run_as_interrupted_and_removes_its_temp_folders(team_repo, tmp_path):
    from fake_llm_server import delay

    temp = tmp_path / "tmp"
    temp.mkdir()
    out = tmp_path / "out"
    with FakeScriptedLLMServer([delay(120)]) as fake:  # the first model call hangs until the run is killed
        argv = [sys.executable, "-m", "pinpoint.cli", "fix", str(team_repo), "--issue", str(_issue(tmp_path)),
                "--local", "--test-cmd", f"{PYTEST} -q tests", "--output", str(out), "--base-url", fake.base_url,
                "--set", "search.policy=none", *FAST]
        proc = subprocess.Popen(argv, env={**os.environ, "TMPDIR": str(temp)}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            while not fake.chat_requests and proc.poll() is None:  # wait for the hanging model call
                select.select([], [], [], 0.2)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
    assert proc.returncode == 130, err
    [run] = _trajectories(out)
    assert run["status"] == "interrupted"
    assert not list(temp.glob("pinpoint-*"))  # the clone and the source folder are gone
