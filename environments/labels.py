"""Labels on every container pinpoint starts, so `pinpoint env prune` finds them all, even after a crash."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import uuid

import docker
from pinpoint.environments.errors import UsageError
from pinpoint.environments.processes import process_start
from pinpoint.environments.watch import watch_boxes

MANAGED_LABEL = "pinpoint.managed"
RUN_LABEL = "pinpoint.run"
#: the process that started the container: a worker's reaper removes only its own process's boxes
PID_LABEL = "pinpoint.pid"
#: who started the container (uid): `env prune` leaves other users' boxes alone unless told `--all`
USER_LABEL = "pinpoint.user"
#: the machine of that process: a pid is only judged (alive or gone) on the machine it belongs to
HOST_LABEL = "pinpoint.host"
#: a run id handed down to the processes of one run (a rollout's Ray workers), so all their containers share it
RUN_ID_ENV = "PINPOINT_RUN_ID"
RUN_ID_PATTERN = re.compile(r"[0-9a-f]{12}")


def _run_id() -> str:
    inherited = os.environ.get(RUN_ID_ENV, "")
    return inherited if RUN_ID_PATTERN.fullmatch(inherited) else uuid.uuid4().hex[:12]


#: one id per run (a process's own, or the one its run handed down): containers of one run can be told apart
RUN_ID = _run_id()


def checked_run_id() -> str:
    """This process's run id; a `PINPOINT_RUN_ID` that is not a run id is a UsageError, not silently replaced
    (the user would prune by a name no box carries)."""
    given = os.environ.get(RUN_ID_ENV)
    if given is not None and not RUN_ID_PATTERN.fullmatch(given):
        raise UsageError(f"{RUN_ID_ENV}={given!r} is not a run id: 12 lowercase hex characters (e.g. "
                         f"{uuid.uuid4().hex[:12]}), or unset it for a new one")
    return RUN_ID


def container_labels(**extra: str) -> dict[str, str]:
    """The labels of a box this process starts; the first one also starts the reaper that removes this
    process's boxes once it is gone (environments/reaper.py)."""
    watch_boxes(RUN_ID)
    return {MANAGED_LABEL: "1", RUN_LABEL: RUN_ID, PID_LABEL: str(os.getpid()), USER_LABEL: str(os.getuid()),
            HOST_LABEL: socket.gethostname(), **extra}


def prune_containers(client: docker.DockerClient, run_id: str | None = None, pid: int | None = None, *,
                     every_user: bool = True, orphans_only: bool = False) -> int:
    """Force-remove pinpoint's containers: every one, or only those of `run_id`, of the process `pid`, of this
    user (`every_user=False`), whose starting process is gone (`orphans_only`); returns how many were removed."""
    wanted = [f"{MANAGED_LABEL}=1"] + ([f"{RUN_LABEL}={run_id}"] if run_id else [])
    wanted += [f"{PID_LABEL}={pid}"] if pid is not None else []
    wanted += [] if every_user else [f"{USER_LABEL}={os.getuid()}"]
    removed = 0
    for container in client.containers.list(all=True, filters={"label": wanted}):
        if orphans_only and _owner_alive(container.labels):
            continue
        with contextlib.suppress(docker.errors.NotFound):  # removed concurrently: already gone
            container.remove(force=True)
            removed += 1
    return removed


def _owner_alive(labels: dict[str, str]) -> bool:
    """The process that started the container still runs (a box of a live run); no pid label, or another
    machine's pid (this one cannot see it): assume so."""
    owner = labels.get(PID_LABEL, "")
    elsewhere = labels.get(HOST_LABEL, socket.gethostname()) != socket.gethostname()
    return not owner.isdigit() or elsewhere or process_start(int(owner)) is not None
