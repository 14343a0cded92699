"""A `pinpoint rl rollout` driver killed with SIGKILL leaves no container behind: the run prints its id first (stderr),
and the reaper started with the run's first box (environments/reaper.py) removes every container labelled with it
once the driver is gone. Real Docker (the psf__requests-1142 instance image), real Ray; the scripted gold policy is a fake (it replays
the reference patch) with the dense localization reward, so episodes are short and need no grading."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.docker]

INSTANCE = "psf__requests-1142"


def _containers(run_id: str) -> list:
    from pinpoint.environments.engine import client
    from pinpoint.environments.labels import RUN_LABEL

    return client().containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_id}"})


def _wait_for(check, deadline_s: float, what: str) -> None:
    deadline = time.monotonic() + deadline_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


def test_a_killed_driver_leaves_no_container_of_its_run(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"instance_id": INSTANCE}) + "\n")
    out = tmp_path / "episodes.jsonl"
    command = [sys.executable, "-m", "pinpoint.cli", "rl", "rollout", "--tasks", str(tasks), "--policy", "scripted-gold",
               "--samples-per-task", "400", "--concurrency", "2", "--reward", "localization", "--output", str(out)]
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        first = driver.stderr.readline()
        assert first.startswith("run id: "), first
        run_id = first.split(": ", 1)[1].strip()
        # mid-run: episodes are being written and the run's boxes are up
        _wait_for(lambda: driver.poll() is None and out.exists() and out.read_text().count("\n") >= 1
                  and _containers(run_id), 300, "the rollout never had a finished episode and a live box")
        assert driver.poll() is None, "the rollout finished before it could be killed"
        os.kill(driver.pid, signal.SIGKILL)  # the driver only: no cleanup of its own can run
        driver.wait()
        _wait_for(lambda: not _containers(run_id), 60, f"containers of run {run_id} left 60 s after the kill")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)  # whatever of Ray outlived its driver
        driver.wait()
