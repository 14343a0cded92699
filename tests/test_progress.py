"""Progress on stderr, results on stdout: `fix`'s live status line (plain lines off a terminal, rich's live line on
one), `batch`'s per-instance table (rows from the moment an instance starts), `--quiet`, result tables that wrap
paths instead of cutting them, and the embedded model's request timeout. Through the real CLI, with a real git
repository and pytest suite and the FAKE scripted model over real HTTP."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cli_lines import said
from fake_llm_server import FakeScriptedLLMServer, delay, tool_call
from pinpoint.cli import main
from test_agent_batch import N_TASKS, _make_tasks, _reply
from test_fix_own_repo import FAST, ISSUE, PYTEST, _script, _trajectories, make_team_repo

ROOT = Path(__file__).resolve().parents[1]
INSTANCE = "team-app-mean-is-off-for-every-list"
#: one plain status line: `[m:ss] instance · node · step k/N · T tokens · cost`
LINE = re.compile(r"^\[\d+:\d\d\] (\S+) · (\w+) · step (\d+)/(\d+) · ([\d,]+) tokens · (cost unknown|\$\d+\.\d{4})$")


@pytest.fixture
def team_repo(tmp_path: Path) -> Path:
    return make_team_repo(tmp_path / "team-app")


def _issue(tmp_path: Path) -> Path:
    path = tmp_path / "issue.md"
    path.write_text(ISSUE)
    return path


def _fix_argv(repo: Path, issue: Path, out: Path, base_url: str, *extra: str) -> list[str]:
    return ["fix", str(repo), "--issue", str(issue), "--local", "--test-cmd", f"{PYTEST} -q tests",
            "--output", str(out), "--set", "search.policy=none", "--base-url", base_url, *FAST, *extra]


def _status_lines(err: str) -> list[tuple[str, ...]]:
    return [m.groups() for m in map(LINE.match, err.splitlines()) if m]


def test_fix_status_line_names_each_node_step_tokens_and_cost_on_stderr_only(team_repo, tmp_path, capsys):
    with FakeScriptedLLMServer(_script()) as fake:
        assert main(_fix_argv(team_repo, _issue(tmp_path), tmp_path / "out", fake.base_url)) == 0
    captured = capsys.readouterr()
    lines = _status_lines(captured.err)
    nodes = [node for _, node, *_ in lines]
    assert nodes[0] == "view" and nodes[-1] == "finalize" and "edit" in nodes and "test" in nodes, captured.err
    assert {instance for instance, *_ in lines} == {INSTANCE}
    assert {(step_budget, cost) for *_, step_budget, _, cost in lines} == {("30", "cost unknown")}
    steps = [int(step) for _, _, step, *_ in lines]
    assert steps == sorted(steps) and steps[0] == 0 and steps[-1] == 3  # three model turns: edit, submit, submit
    tokens = [int(t.replace(",", "")) for *_, t, _ in lines]
    assert tokens[0] == 0 and tokens[-1] > 0 and tokens == sorted(tokens)
    assert " · step " not in captured.out  # results only on stdout
    assert "tests on the final patch: PASS (10 passed, 0 failed)" in captured.out


def test_a_priced_model_shows_its_cost_and_a_long_node_repeats_its_line(team_repo, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PINPOINT_PROGRESS_S", "0.1")
    script = [delay(2.0, then=tool_call("str_replace_editor", {
        "command": "str_replace", "path": "calc/stats.py", "old_str": "total(values) / (len(values) + 1)",
        "new_str": "total(values) / len(values)"})), tool_call("submit", {}), tool_call("submit", {})]
    with FakeScriptedLLMServer(script, model="gpt-4o-mini") as fake:
        argv = _fix_argv(team_repo, _issue(tmp_path), tmp_path / "out", fake.base_url, "--model", "gpt-4o-mini")
        assert main(argv) == 0
    lines = _status_lines(capsys.readouterr().err)
    first_edit = [line for line in lines if line[1] == "edit" and line[2] == "0"]
    assert len(first_edit) >= 2, lines  # the 2 s model call: repeated every PINPOINT_PROGRESS_S
    assert lines[-1][-1].startswith("$") and float(lines[-1][-1][1:]) > 0  # gpt-4o-mini's built-in price


def test_quiet_fix_has_no_status_line_and_a_bad_interval_is_one_line(team_repo, tmp_path, capsys, monkeypatch):
    with FakeScriptedLLMServer(_script()) as fake:
        assert main(_fix_argv(team_repo, _issue(tmp_path), tmp_path / "out", fake.base_url, "--quiet")) == 0
        captured = capsys.readouterr()
        assert not _status_lines(captured.err) and "tests on the final patch: PASS" in captured.out
        monkeypatch.setenv("PINPOINT_PROGRESS_S", "soon")
        assert main(_fix_argv(team_repo, _issue(tmp_path), tmp_path / "out2", fake.base_url)) == 2
    err = capsys.readouterr().err.strip()
    assert len(said(err)) == 1 and "PINPOINT_PROGRESS_S" in err and "Traceback" not in err


def _read_all(fd: int, into: list[bytes]) -> None:
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed its end
            return
        if not chunk:
            return
        into.append(chunk)


@pytest.mark.slow  # a CLI subprocess: its imports take ~10 s on two shared cores
def test_on_a_terminal_the_status_line_is_live_and_stdout_keeps_the_results(team_repo, tmp_path):
    master, slave = pty.openpty()
    script = [delay(1.5, then=_script()[0]), *_script()[1:]]
    chunks: list[bytes] = []
    with FakeScriptedLLMServer(script) as fake:
        argv = [sys.executable, "-m", "pinpoint.cli", *_fix_argv(team_repo, _issue(tmp_path), tmp_path / "out",
                                                                  fake.base_url)]
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "160", "PYTHONPATH": str(ROOT.parent)}
        env.pop("NO_COLOR", None)
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=slave, text=True, env=env)
        os.close(slave)
        reader = threading.Thread(target=_read_all, args=(master, chunks), daemon=True)
        reader.start()
        out, _ = proc.communicate(timeout=300)
        reader.join(timeout=10)
    os.close(master)
    err = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0, err[-2000:]
    assert "\x1b[?25l" in err  # rich's live display hides the cursor while it redraws the line
    assert f"{INSTANCE} · edit · step 0/30" in err
    assert not _status_lines(err)  # no plain lines on a terminal
    assert "tests on the final patch: PASS" in out and " · step " not in out


# -- batch ----------------------------------------------------------------------------------------------------------
def _batch_argv(tasks: Path, out: Path, base_url: str, *extra: str) -> list[str]:
    return ["batch", "--tasks", str(tasks), "--output", str(out), "--workers", "2", "--set", "search.policy=none",
            "--set", f"llm.base_url={base_url}", "--set", "llm.model=fake", *extra]


def test_batch_says_each_instance_when_it_starts_and_ends(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PINPOINT_PROGRESS_S", "0.1")
    tasks = _make_tasks(tmp_path, 4)
    with FakeScriptedLLMServer(default=_reply) as fake:
        assert main(_batch_argv(tasks, tmp_path / "out", fake.base_url)) == 0
    err = capsys.readouterr().err.splitlines()
    for i in range(4):
        started = next(n for n, line in enumerate(err) if line.startswith(f"task-{i}: started"))
        [ended] = [n for n, line in enumerate(err) if re.match(rf"task-{i}: submitted, 3 steps, \d+:\d\d \(\d/4 done\)$",
                                                               line)]
        assert started < ended
    running = [line for line in err if re.match(r"\[\d+:\d\d\] batch: \d/4 done, [12] running: task-\d \(", line)]
    assert running, err  # the heartbeat names the running instances, their node and time


def test_batch_quiet_prints_only_the_summary(tmp_path, capsys):
    tasks = _make_tasks(tmp_path, 2)
    with FakeScriptedLLMServer(default=_reply) as fake:
        assert main(_batch_argv(tasks, tmp_path / "out", fake.base_url, "--quiet")) == 0
    err = capsys.readouterr().err
    assert "started" not in err and "running" not in err
    assert "pinpoint batch: 2 submitted" in err


def test_local_executor_reports_an_item_before_it_runs():
    from pinpoint.environments.executor import Item, LocalExecutor

    started: list[str] = []

    def work(key: str) -> bool:
        return key in started  # on_start ran on this thread before the item itself

    items = [Item(f"k{i}", (f"k{i}",)) for i in range(N_TASKS)]
    outcomes = list(LocalExecutor(3).run(work, items, on_start=started.append))
    assert sorted(started) == sorted(i.key for i in items) and all(o.value is True for o in outcomes)


def test_the_live_batch_table_wraps_long_instance_ids_and_shows_running_rows():
    from pinpoint.agent.progress import NodeProgress
    from pinpoint.agent.status import BatchTable
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=60, height=30, force_terminal=True, color_system=None)
    long_id = "django__django-" + "x" * 50 + "-12345"
    table = BatchTable(console, 2, enabled=False)
    table.started(long_id)
    table.reporter(long_id)(NodeProgress(long_id, "edit", "start", 4, 30, 100, None, 1.0))
    table.started("short")
    table.finished("short", "submitted", 3)
    console.print(table)
    text = buffer.getvalue()

    def column(n: int) -> str:
        return "".join(line.split("│")[n].strip() for line in text.splitlines() if line.startswith("│"))

    assert "…" not in text and long_id in column(1)
    assert column(2) == "running: editsubmitted" and column(3) == "4/303"
    assert "1/2 done, 1 running" in text


# -- paths are never cut -------------------------------------------------------------------------------------------
def test_run_results_go_to_stdout_with_full_paths_at_any_width(tmp_path, capsys, monkeypatch):
    from pinpoint.agent.commands import _print_result
    from pinpoint.agent.runner import RunResult

    monkeypatch.setenv("COLUMNS", "40")
    path = tmp_path / ("deep-" * 12) / "trajectories" / "psf__requests-1142" / "trajectory.json"
    _print_result(RunResult("psf__requests-1142", "submitted", "", "", path, 3, 10, 5, 0.0, 1.0, {"total": 2}))
    captured = capsys.readouterr()
    assert captured.err == "" and "…" not in captured.out
    assert str(path) in "".join(line.strip() for line in captured.out.splitlines() if not line.startswith("instance"))


def test_show_wraps_a_long_instance_id_instead_of_cutting_it(team_repo, tmp_path, capsys, monkeypatch):
    with FakeScriptedLLMServer(_script()) as fake:
        assert main(_fix_argv(team_repo, _issue(tmp_path), tmp_path / "out", fake.base_url, "--quiet")) == 0
    [trajectory] = (tmp_path / "out").glob("fix/*/trajectories/*/trajectory.json")
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", "40")
    assert main(["show", str(trajectory)]) == 0
    out = capsys.readouterr().out
    header = out.split("╰")[0]
    assert "…" not in header and f"instance{INSTANCE}status" in re.sub(r"[\s│]", "", header)
    assert _trajectories(tmp_path / "out")[0]["status"] == "submitted"


# -- the embedded model's timeout ------------------------------------------------------------------------------------
def test_the_embedded_model_gets_a_request_timeout_it_can_meet(monkeypatch):
    from pinpoint.agent import embedded_model
    from pinpoint.agent.llm import LLMConfig

    monkeypatch.setattr(embedded_model, "start_embedded_model",
                        lambda base: LLMConfig(**{**base.__dict__, "base_url": "http://127.0.0.1:1/v1"}))
    assert embedded_model.resolve_config(LLMConfig(base_url=None)).timeout_s == embedded_model.EMBEDDED_TIMEOUT_S
    assert embedded_model.resolve_config(LLMConfig(base_url=None, timeout_s=900.0)).timeout_s == 900.0
    hosted = LLMConfig(base_url="http://127.0.0.1:1/v1")
    assert embedded_model.resolve_config(hosted).timeout_s == 120.0  # an endpoint keeps its own


@pytest.mark.slow  # the real embedded model's first edit turn: minutes on two shared cores
def test_fix_with_the_embedded_model_does_not_time_out_on_its_first_edit(team_repo, tmp_path, capsys):
    code = main(["fix", str(team_repo), "--issue", str(_issue(tmp_path)), "--local", "--test-cmd",
                 f"{PYTEST} -q tests", "--output", str(tmp_path / "out"), "--set", "search.policy=none", "--set", "budget.max_steps=1",
                 *FAST])
    captured = capsys.readouterr()
    assert code in (0, 1), captured.err
    [run] = _trajectories(tmp_path / "out")
    assert run["status"] != "llm_error", run.get("detail")
    assert run["config"]["llm"]["timeout_s"] == 600.0 and run["model"] == "SmolLM2-135M-Instruct"
    assert any(e["kind"] == "llm" and e["completion_tokens"] > 0 for e in run["events"])
