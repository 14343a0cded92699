"""Labels on every container pinpoint starts, so `pinpoint env prune` finds them all, even after a crash."""

from __future__ import annotations

import contextlib
import uuid

import docker

MANAGED_LABEL = "pinpoint.managed"
RUN_LABEL = "pinpoint.run"
#: one id per process: containers of one run can be told apart from those of another
RUN_ID = uuid.uuid4().hex[:12]


def container_labels(**extra: str) -> dict[str, str]:
    return {MANAGED_LABEL: "1", RUN_LABEL: RUN_ID, **extra}


def prune_containers(client: docker.DockerClient, run_id: str | None = None) -> int:
    """Force-remove every pinpoint container (or only those of `run_id`); returns how many were removed."""
    filters = {"label": [f"{MANAGED_LABEL}=1"] + ([f"{RUN_LABEL}={run_id}"] if run_id else [])}
    removed = 0
    for container in client.containers.list(all=True, filters=filters):
        with contextlib.suppress(docker.errors.NotFound):  # removed concurrently: already gone
            container.remove(force=True)
            removed += 1
    return removed
