"""`pinpoint batch` killed mid-way and started again: no finished prediction is lost and none is redone.

Tasks are real small git repositories run on LocalRuntime; the model is the FAKE scripted server (real HTTP), which
answers by looking at what the agent sent, so any task can be resumed at any step.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from fake_llm_server import FakeScriptedLLMServer, delay, tool_call

N_TASKS = 6
ROOT = Path(__file__).resolve().parents[1]


def _make_tasks(tmp_path: Path, n: int = N_TASKS) -> Path:
    """`n` small real git repositories, task-0..task-(n-1), each with a one-line bug, as a `batch --tasks` file."""
    rows = []
    for i in range(n):
        repo = tmp_path / f"repo{i}"
        (repo / "pkg").mkdir(parents=True)
        (repo / "pkg" / "limits.py").write_text(f"def limit_{i}():\n    return {i} - 1\n")
        subprocess.run("git init -q && git add -A && git -c user.email=t@t -c user.name=t commit -qm base",
                       shell=True, cwd=repo, check=True)
        rows.append({"instance_id": f"task-{i}", "repo_path": str(repo),
                     "problem_statement": f"task-{i}: `limit_{i}` in pkg/limits.py returns {i} - 1; it must return {i}."})
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _reply(request):
    """Edit, then submit twice (review-on-submit), whatever task the request belongs to."""
    messages = request["messages"]
    task = next(m["content"] for m in messages if m["role"] == "user")
    i = int(task.split("task-")[1].split(":")[0])
    turns = sum(m["role"] == "assistant" for m in messages)
    if turns == 0:
        step = tool_call("str_replace_editor", {"command": "str_replace", "path": "pkg/limits.py",
                                                "old_str": f"return {i} - 1", "new_str": f"return {i}"})
    else:
        step = tool_call("submit", {})
    return delay(0.4, then=step)


def _batch_command(tasks: Path, out: Path, base_url: str) -> list[str]:
    return [sys.executable, "-m", "pinpoint.cli", "batch", "--tasks", str(tasks), "--output", str(out),
            "--workers", "2", "--quiet", "--set", "search.policy=none",
            "--set", f"llm.base_url={base_url}", "--set", "llm.model=fake", "--set", "llm.max_retries=0"]


def _batch(tasks: Path, out: Path, base_url: str) -> subprocess.Popen:
    return subprocess.Popen(_batch_command(tasks, out, base_url), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _ids(preds: Path) -> list[str]:
    if not preds.exists():
        return []
    return [json.loads(line)["instance_id"] for line in preds.read_text().splitlines() if line.strip()]


def _task_of(request) -> str:
    first_user = next(m["content"] for m in request["messages"] if m["role"] == "user")
    return first_user.split("task-")[1].split(":")[0]


def test_batch_killed_midway_resumes_without_losing_or_redoing_predictions(tmp_path):
    tasks = _make_tasks(tmp_path)
    out = tmp_path / "out"
    preds = out / "tasks" / "fake" / "preds.jsonl"  # <runs root>/<run id: the tasks file>/<model>/
    with FakeScriptedLLMServer(default=_reply) as fake:
        first = _batch(tasks, out, fake.base_url)
        deadline = time.monotonic() + 300
        while len(_ids(preds)) < 2 and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        finished_before = _ids(preds)
        assert 2 <= len(finished_before) < N_TASKS, first.stdout.read().decode()[-2000:]
        seen = len(fake.chat_requests)

        second = _batch(tasks, out, fake.base_url)
        output = second.communicate(timeout=600)[0].decode()
        assert second.returncode == 0, output[-3000:]
        later = fake.chat_requests[seen:]

    ids = _ids(preds)
    assert sorted(ids) == sorted(f"task-{i}" for i in range(N_TASKS))  # all there, each exactly once
    assert ids[: len(finished_before)] == finished_before  # earlier lines untouched
    redone = {_task_of(r) for r in later} & {i.split("-")[1] for i in finished_before}
    assert not redone, f"finished tasks were asked again: {redone}"
    assert f"{len(finished_before)} already in" in output
    for row in map(json.loads, preds.read_text().splitlines()):
        i = row["instance_id"].split("-")[1]
        assert f"+    return {i}\n" in row["model_patch"] and row["status"] == "submitted"


def test_a_rerun_under_other_settings_never_takes_the_old_answers(tmp_path):
    """A run id answers one configuration: rerun with another budget, batch refuses in one line (it would skip
    the old predictions as done); --fresh redoes the run under the new settings."""
    tasks = _make_tasks(tmp_path, n=1)
    out = tmp_path / "out"
    with FakeScriptedLLMServer(default=_reply) as fake:
        first = _batch(tasks, out, fake.base_url)
        assert first.wait(timeout=300) == 0, first.stdout.read().decode()[-2000:]
        asked = len(fake.chat_requests)
        changed = subprocess.run([*_batch_command(tasks, out, fake.base_url), "--set", "budget.max_steps=5"],
                                 cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert changed.returncode == 2, changed.stdout + changed.stderr
        assert "budget.max_steps 30 -> 5" in changed.stderr
        assert "--fresh" in changed.stderr
        assert "Traceback" not in changed.stderr
        assert len(fake.chat_requests) == asked  # refused before any model call
        fresh = subprocess.run([*_batch_command(tasks, out, fake.base_url), "--set", "budget.max_steps=5",
                                "--fresh"], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert fresh.returncode == 0, fresh.stdout + fresh.stderr
        assert len(fake.chat_requests) > asked
    record = json.loads((out / "tasks" / "fake" / "run.json").read_text())
    assert record["settings"]["budget"]["max_steps"] == 5
