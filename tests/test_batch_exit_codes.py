"""`batch --help` says the exit codes `batch` returns: a batch whose only task ends with no patch exits 0, as the
help says (it said 1 before). Real CLI, a real git repository, the FAKE scripted model (it submits at once)."""

from __future__ import annotations

import subprocess
import sys

from fake_llm_server import FakeScriptedLLMServer, tool_call
from test_agent_batch import _make_tasks

CLI = [sys.executable, "-m", "pinpoint.cli"]


def test_a_batch_with_no_patch_exits_as_its_help_says(tmp_path) -> None:
    shown = subprocess.run([*CLI, "batch", "--help"], capture_output=True, text=True, check=True).stdout
    assert "0 every task ended, with a patch or without" in " ".join(shown.split())
    tasks = _make_tasks(tmp_path, 1)
    with FakeScriptedLLMServer(default=tool_call("submit", {})) as fake:
        done = subprocess.run([*CLI, "batch", "--tasks", str(tasks), "--base-url", fake.base_url, "--model", "fake",
                               "-o", str(tmp_path / "runs"), "--set", "search.policy=none", "--set",
                               "agent.execution=false"], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "0 submitted" in done.stderr + done.stdout
