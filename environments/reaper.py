"""A watchdog that outlives the process it watches: when that process is gone (Ctrl-C, SIGTERM, or SIGKILL, where
no cleanup of its own can run), it removes the containers that process started, so nothing is left behind for
longer than a few seconds, whatever command started them and wherever it ran.

Every box pinpoint starts is labelled by `labels.container_labels`, and that call also calls `watch.watch_boxes`:
the first box of a process on an engine starts one reaper for (run id, process, engine), so the one mechanism
covers `run`, `batch`, `eval`, `fix`, `demo`, `rl rollout`, `images build` and the benches, on the driver or on a
Ray worker (whose boxes carry the worker's pid: a worker killed by an interrupted `eval` is reaped like a driver).

The reaper is `python -m pinpoint.environments.reaper` detached twice (its own session, and not a child of the
watched process: Ray kills a dead worker's children). It first removes this user's boxes on its engine whose
starting process (on this host) is gone: what a run killed together with its reaper left (a resumed `fix`, a
node back after a loss). Then it polls the watched pid (its start time too, so a reused pid is not mistaken for
it); once the process is gone it prunes that process's containers of the run every poll until none has appeared
for `settle_s` (a box whose create was in flight still lands), then exits.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from pinpoint.environments.processes import pid_exists, process_start
from pinpoint.environments.watch import watched_runs

#: how often the reaper looks at the watched process and, after it is gone, at the engine
POLL_S = 1.0
#: after the process is gone: stop once no container of the run has appeared for this long
SETTLE_S = 10.0
#: and stop pruning after this long whatever happens (an engine that never answers)
MAX_REAP_S = 300.0


def alive(pid: int, start: str | None) -> bool:
    """`pid` is still the process the reaper was started for."""
    if not Path("/proc").is_dir():  # no /proc: signal 0 says whether the pid exists
        return pid_exists(pid)
    return process_start(pid) == start and start is not None


def release_own_boxes() -> int:
    """Remove, now, the boxes this process started (of every run it labelled boxes for): on Ctrl-C or SIGTERM a
    process must not wait for its threads' commands to end before its boxes go; how many were removed."""
    from pinpoint.environments.engine import client
    from pinpoint.environments.labels import prune_containers

    removed = 0
    for run_id in watched_runs():
        try:
            removed += prune_containers(client(), run_id, os.getpid())
        except Exception:  # noqa: BLE001 - an engine away: the reaper removes them once this process is gone
            continue
    return removed


def reap(run_id: str, pid: int | None, poll_s: float = POLL_S, settle_s: float = SETTLE_S,
         max_s: float = MAX_REAP_S) -> int:
    """Prune the run's containers until none has appeared for `settle_s`; returns how many were removed."""
    from pinpoint.environments.engine import client
    from pinpoint.environments.labels import prune_containers

    removed, began = 0, time.monotonic()
    quiet_since = began
    while time.monotonic() - began < max_s:
        try:
            found = prune_containers(client(), run_id, pid)
        except Exception:  # noqa: BLE001 - an engine that is briefly away: try again at the next poll
            found = 0
        removed += found
        now = time.monotonic()
        if found:
            quiet_since = now
        elif now - quiet_since >= settle_s:
            break
        time.sleep(poll_s)
    return removed


def sweep_orphans() -> int:
    """Remove this user's boxes on this engine whose starting process on this host is gone (what `pinpoint env
    prune` removes); how many. An engine that does not answer removes nothing."""
    from pinpoint.environments.engine import client
    from pinpoint.environments.labels import prune_containers

    try:
        return prune_containers(client(), every_user=False, orphans_only=True)
    except Exception:  # noqa: BLE001 - a sweep is a courtesy: the run goes on without it
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pinpoint.environments.reaper", description=__doc__)
    parser.add_argument("--pid", type=int, required=True, help="the process whose death ends the run")
    parser.add_argument("--start", default="", help="its start time (/proc/PID/stat), so a reused pid is not it")
    parser.add_argument("--run-id", required=True, help="the run's container label (pinpoint.run)")
    parser.add_argument("--only-pid", action="store_true", help="only the containers that process started")
    parser.add_argument("--detach", action="store_true", help="start the reaper in a session of its own and return")
    parser.add_argument("--poll-s", type=float, default=POLL_S)
    parser.add_argument("--settle-s", type=float, default=SETTLE_S)
    args = parser.parse_args(argv)
    if not args.run_id.strip():  # an empty run id would select every pinpoint container of every run
        parser.error("--run-id must be a run's id, not empty")
    if args.detach:  # this launcher exits at once: the reaper is nobody's child but init's
        rest = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--detach"]
        subprocess.Popen([sys.executable, "-m", "pinpoint.environments.reaper", *rest], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                         close_fds=True)
        return 0
    sweep_orphans()
    start = args.start or None
    while alive(args.pid, start):
        time.sleep(args.poll_s)
    reap(args.run_id, args.pid if args.only_pid else None, args.poll_s, args.settle_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
