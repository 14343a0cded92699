"""Which processes have a reaper: the first box a process labels (`labels.container_labels`) starts one for (run
id, process, engine), the detached `python -m pinpoint.environments.reaper` that removes that process's boxes once
it is gone. Kept apart from the reaper itself so that labels, which every box-starting path calls, need not import
what prunes by those labels."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from pinpoint.environments.processes import process_start

_watched: set[tuple[str, int, str]] = set()
_watched_lock = threading.Lock()


def watch_boxes(run_id: str) -> None:
    """Make sure a reaper watches this process for the boxes it starts under `run_id` on its engine (DOCKER_HOST):
    the first call per (run, process, engine) starts one; later calls cost a set lookup."""
    key = (run_id, os.getpid(), os.environ.get("DOCKER_HOST", ""))
    with _watched_lock:
        if key in _watched:
            return
        _watched.add(key)
    start_reaper(run_id, only_pid=True)


def watched_runs() -> set[str]:
    """The runs this process has started boxes for (and a reaper watches it for)."""
    with _watched_lock:
        return {run_id for run_id, pid, _ in _watched if pid == os.getpid()}


def start_reaper(run_id: str, pid: int | None = None, only_pid: bool = False) -> None:
    """Start the detached reaper for `pid` (default: this process) and the containers of `run_id` (all of them,
    or with `only_pid` only those `pid` started); returns once it runs on its own."""
    pid = os.getpid() if pid is None else pid
    command = [sys.executable, "-m", "pinpoint.environments.reaper", "--pid", str(pid), "--start",
               process_start(pid) or "", "--run-id", run_id, *(["--only-pid"] if only_pid else []), "--detach"]
    subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   close_fds=True, check=False, timeout=60)
