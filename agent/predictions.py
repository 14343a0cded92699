"""preds.jsonl in SWE-bench's shape, appended safely by many workers and processes.

Each prediction is one line written under an exclusive file lock, flushed and fsynced before the lock is released,
so a killed batch leaves only whole lines; a torn last line (power loss mid-write) is skipped with a warning when the
file is read back. Ids already present are what a resumed batch skips.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    lock_path = path.with_name(path.name + ".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_predictions(path: str | Path) -> dict[str, dict]:
    """instance_id -> prediction; the last line for an id wins; unreadable lines are reported and skipped."""
    path = Path(path)
    out: dict[str, dict] = {}
    if not path.exists():
        return out
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            out[row["instance_id"]] = row
        except (json.JSONDecodeError, KeyError, TypeError):
            print(f"pinpoint: {path}:{number}: skipping an unreadable prediction line", file=sys.stderr)
    return out


def append_prediction(path: str | Path, instance_id: str, patch: str, model: str, **extra) -> None:
    """Append one prediction line atomically with respect to other writers; durable when this returns."""
    path = Path(path)
    row = {"instance_id": instance_id, "model_name_or_path": model, "model_patch": patch, **extra}
    data = (json.dumps(row) + "\n").encode()
    with _locked(path):
        # a torn last line from a crash must not glue onto ours
        if path.exists() and path.stat().st_size:
            with open(path, "rb") as handle:
                handle.seek(-1, os.SEEK_END)
                if handle.read(1) != b"\n":
                    data = b"\n" + data
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
