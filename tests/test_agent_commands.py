"""`pinpoint fix` on a team's own repository (local checkout, issue from a file, patch + branch) and its input errors.
The model is the FAKE scripted server over real HTTP."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cli_lines import said
from fake_llm_server import FakeScriptedLLMServer, tool_call
from pinpoint.agent.demo import build_demo_repo
from pinpoint.agent.fix import IssueError, read_issue
from pinpoint.cli import main

FIX = {"command": "str_replace", "path": "numeric/functions.py", "old_str": "return number % 1.0 + 1.0",
       "new_str": "return number % 1.0"}


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_fix_writes_the_patch_and_a_branch_without_touching_the_users_checkout(tmp_path):
    demo = build_demo_repo(tmp_path / "team-repo", "Python/2")
    (demo.path / "notes.txt").write_text("uncommitted work\n")  # the user's own uncommitted file
    head = _git(demo.path, "rev-parse", "HEAD")
    issue = tmp_path / "issue-42.md"
    issue.write_text(demo.task.problem_statement)
    script = [tool_call("str_replace_editor", FIX), tool_call("submit", {}), tool_call("submit", {})]
    with FakeScriptedLLMServer(script) as fake:
        code = main(["fix", str(demo.path), "--issue", str(issue), "--local", "--branch", "pinpoint/issue-42",
                     "--test-cmd", demo.task.test_command, "--output", str(tmp_path / "out"), "--set", "search.policy=none",
                     "--set", f"llm.base_url={fake.base_url}", "--set", "llm.model=fake"])
    assert code == 0
    run = tmp_path / "out" / "fix" / "fake"  # <runs root>/<run id>/<model>
    [patch_file] = run.glob("*.patch")  # named after the repository, the issue's title and the run's identity
    patch = patch_file.read_text()
    assert "+    return number % 1.0\n" in patch
    # the branch holds exactly the patch on top of the user's HEAD
    assert _git(demo.path, "rev-parse", "pinpoint/issue-42^") == head
    assert "+    return number % 1.0" in _git(demo.path, "show", "pinpoint/issue-42")
    # the user's checkout is as it was
    assert _git(demo.path, "rev-parse", "HEAD") == head
    assert _git(demo.path, "status", "--porcelain") == "?? notes.txt"
    assert "+ 1.0" in (demo.path / "numeric" / "functions.py").read_text()
    trajectory = json.loads((run / "trajectories" / patch_file.stem / "trajectory.json").read_text())
    assert trajectory["status"] == "submitted" and trajectory["runtime"] == "LocalRuntime"


def test_issue_url_offline_gives_a_clear_error(monkeypatch):
    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")  # nothing listens there: the request cannot leave
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with pytest.raises(IssueError, match="--issue FILE"):
        read_issue("https://github.com/psf/requests/issues/6028", timeout=5)


def test_issue_that_is_neither_url_nor_file_is_named(tmp_path, capsys):
    demo = build_demo_repo(tmp_path / "r", "Python/2")
    code = main(["fix", str(demo.path), "--issue", "no-such-issue.txt", "--local"])
    assert code == 2
    assert "no-such-issue.txt" in capsys.readouterr().err


def test_bad_config_stops_before_any_work(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("search:\n  k: ten\n")
    code = main(["demo", "--config", str(config), "--output", str(tmp_path / "out")])
    assert code == 2
    assert "search.k" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# -- `pinpoint run` refuses what it cannot do, in one line, before building anything ---------------------------------
def _one_line_refusal(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(said(err)) == 1 and "Traceback" not in err, err
    return said(err)[0]


def test_run_refuses_an_instance_without_a_repository_source(capsys):
    err = _one_line_refusal(capsys, ["run", "astropy__astropy-12907"])
    assert err.startswith("pinpoint run: ") and "no offline source for astropy/astropy" in err


def test_run_refuses_an_instance_without_an_environment_spec(tmp_path, capsys):
    from pinpoint.swebench_eval.datasets import load_instances

    row = load_instances(ids=["psf__requests-1142"])[0].to_row()
    row["version"] = "99.9"
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text(json.dumps(row) + "\n")
    err = _one_line_refusal(capsys, ["run", "psf__requests-1142", "--dataset", str(dataset)])
    assert "SpecError" in err and "no environment spec for psf/requests version '99.9'" in err


def test_run_without_a_docker_engine_says_how_to_start_one(monkeypatch, capsys):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    err = _one_line_refusal(capsys, ["run", "psf__requests-1142"])
    assert "EngineUnavailable" in err and "pinpoint env up" in err


@pytest.mark.parametrize("edit, says", [({}, "no edit to compare with the gold patch"),
                                        ({"error": "bad hunk"}, "edit F1 not computed: bad hunk"),
                                        ({"f1": 0.5, "precision": 1.0, "recall": 0.333}, "edit F1 vs gold: 0.5")])
def test_run_says_what_the_edit_f1_is_never_none(edit, says):
    from pinpoint.agent.commands import edit_summary

    assert edit_summary(edit) == says and "None" not in edit_summary(edit)


@pytest.mark.parametrize("model, settings, cost", [
    ("gpt-4o-mini", {}, 0.15 + 0.60),
    ("openai/gpt-4o-mini-2024-07-18", {}, 0.15 + 0.60),  # a provider prefix and a dated snapshot
    ("gpt-4o-2024-08-06", {}, 2.50 + 10.00),
    ("claude-3-5-sonnet-20241022", {}, 3.00 + 15.00),
    ("gpt-4o-mini", {"price_per_mtok_in": 1.0}, 1.0 + 0.60),  # one price overridden, the other built in
    ("Qwen2.5-Coder-32B-Instruct", {}, None),  # a local model: unknown, not $0
    ("Qwen2.5-Coder-32B-Instruct", {"price_per_mtok_in": 0.2, "price_per_mtok_out": 0.4}, 0.2 + 0.4),
])
def test_known_models_have_a_built_in_price_that_the_config_overrides(model, settings, cost):
    from pinpoint.agent.llm_config import LLMConfig, cost_of

    config = LLMConfig(base_url="http://localhost:8000/v1", model=model, **settings)
    got = cost_of(config, 1_000_000, 1_000_000)
    assert got == pytest.approx(cost) if cost is not None else got is None
    assert config.cost_known is (cost is not None)


def _fix_with_model(tmp_path, model: str) -> Path:
    """`pinpoint fix --local` on a demo repository, the FAKE scripted server named as `model`; its trajectory."""
    demo = build_demo_repo(tmp_path / "repo", "Python/2")
    issue = tmp_path / "issue.md"
    issue.write_text(demo.task.problem_statement)
    with FakeScriptedLLMServer([tool_call("submit", {})], default=tool_call("submit", {}), model=model) as fake:
        main(["fix", str(demo.path), "--issue", str(issue), "--local", "--output", str(tmp_path / "out"),
              "--set", "search.policy=none", "--base-url", fake.base_url, "--model", model, "--set", "budget.max_steps=2",
              "--set", "agent.execution=false"])
    [path] = (tmp_path / "out" / "fix" / model / "trajectories").glob("*/trajectory.json")
    return path


def test_a_run_on_a_priced_model_costs_more_than_nothing(tmp_path):
    """Through the real CLI: the trajectory's cost is its tokens at gpt-4o-mini's built-in price."""
    data = json.loads(_fix_with_model(tmp_path, "gpt-4o-mini").read_text())
    assert data["prompt_tokens"] > 0
    expected = (data["prompt_tokens"] * 0.15 + data["completion_tokens"] * 0.60) / 1e6
    assert data["cost_usd"] == pytest.approx(expected) and data["cost_usd"] > 0


def test_a_run_on_an_unpriced_model_shows_its_cost_as_unknown(tmp_path, capsys):
    """A local model with no listed price: the trajectory's cost is null and `show` says unknown, not $0.0000."""
    path = _fix_with_model(tmp_path, "my-local-model")
    assert json.loads(path.read_text())["cost_usd"] is None
    capsys.readouterr()
    main(["show", str(path)])
    shown = capsys.readouterr().out
    assert "unknown" in shown and "$0.0000" not in shown


class FakeGitHubAPI:
    """A FAKE GitHub REST API on 127.0.0.1 (PINPOINT_GITHUB_API points at it): one issue, and the headers asked with."""

    def __init__(self, issue: dict) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.requests: list[tuple[str, dict]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                fake.requests.append((self.path, dict(self.headers)))
                found = self.path == "/repos/acme/app/issues/7"
                body = json.dumps(issue if found else {"message": "Not Found"}).encode()
                self.send_response(200 if found else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_an_issue_by_owner_repo_number_or_url_is_read_through_the_github_api(monkeypatch):
    api = FakeGitHubAPI({"title": "mean() is off", "body": "It returns 1.5.", "number": 7})
    try:
        monkeypatch.setenv("PINPOINT_GITHUB_API", api.url)
        monkeypatch.delenv("GITHUB_TOKEN", raising=False)
        monkeypatch.setenv("GH_TOKEN", "gh-test-token")  # gh's own variable is honoured
        for spec in ("acme/app#7", "https://github.com/acme/app/issues/7"):
            assert read_issue(spec) == ("acme__app-7", "mean() is off\n\nIt returns 1.5.")
        assert all(headers.get("Authorization") == "Bearer gh-test-token" for _, headers in api.requests)
        with pytest.raises(IssueError, match="GitHub answered 404"):
            read_issue("acme/app#8")
    finally:
        api.close()


def test_a_gh_issue_view_json_export_is_an_issue_file(tmp_path):
    export = tmp_path / "issue-7.json"  # what `gh issue view 7 --json title,body > issue-7.json` writes
    export.write_text(json.dumps({"body": "It returns 1.5.\n", "title": "mean() is off"}))
    assert read_issue(str(export)) == ("issue-7", "mean() is off\n\nIt returns 1.5.")
    (tmp_path / "other.json").write_text('{"labels": []}')
    with pytest.raises(IssueError, match="no title or body"):
        read_issue(str(tmp_path / "other.json"))


def test_owner_repo_number_offline_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PINPOINT_GITHUB_API", "http://127.0.0.1:9")  # nothing listens there: as offline
    demo = build_demo_repo(tmp_path / "r", "Python/2")
    assert main(["fix", str(demo.path), "--issue", "acme/app#7", "--local"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(said(err)) == 1 and "are you offline" in err and "gh issue view 7 -R acme/app" in err, err
