"""Durable writes: a file is either its old content or its whole new content, never half of one.

Every result file pinpoint rewrites (trajectory.json, report.json, summary.json, the eval logs) goes through here:
the text lands in a temporary file in the same folder, is fsynced, and is renamed over the target. A process
killed mid-write, or a disk that fills up, leaves the previous file (or none); a killed writer's temporary file
(named with its pid) is removed by the next write of the same file. Temporary folders (a clone, a scratch run
folder, a build's rootfs) are named with their pid the same way, and the next folder of the same kind removes those
of processes that are gone.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import Any

from pinpoint.environments.processes import pid_exists


def write_atomic(path: Path, data: str | bytes) -> None:
    """Replace `path` with `data` (str is UTF-8) in one rename; the folder is created when missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8", errors="surrogateescape") if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _drop_orphans(path)


def _drop_orphans(path: Path) -> None:
    """Remove the temporary files of `path` left by writers that died mid-write (their pid is gone)."""
    for orphan in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        if _gone(orphan.name[len(path.name) + 2:].split(".", 1)[0]):
            orphan.unlink(missing_ok=True)


def _gone(pid: str) -> bool:
    """`pid` (as a file name holds it) names another process of this machine that no longer runs."""
    return pid.isdigit() and int(pid) != os.getpid() and not pid_exists(int(pid))


def process_tempdir(prefix: str, parent: str | None = None) -> Path:
    """A new folder `<prefix><host>.<pid>-<random>` under `parent` (default: the system's temporary folder). The
    folders of the same prefix and host whose process is gone (killed, so no cleanup of its own ran) are removed
    first: a killed `fix`, Ray worker or build leaves its clone or rootfs behind only until the next one starts. The
    host's name keeps a folder shared by several machines from losing another machine's live folders."""
    parent = parent or tempfile.gettempdir()
    remove_orphan_folders(prefix, parent)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{_host()}.{os.getpid()}-", dir=parent))


def remove_orphan_folders(prefix: str = "pinpoint-", parent: str | None = None) -> list[str]:
    """Remove the folders `<prefix>...<host>.<pid>-<random>` under `parent` (default: the system's temporary
    folder) made on this machine by a process that no longer runs; returns their names. `process_tempdir` does this
    for its prefix before making a folder; with the default prefix it covers every kind of pinpoint folder."""
    parent = parent or tempfile.gettempdir()
    host = f"{_host()}."
    removed = []
    for orphan in Path(parent).glob(f"{glob.escape(prefix)}*{glob.escape(host)}*-*"):
        pid = orphan.name.rpartition(host)[2].split("-", 1)[0]
        if _gone(pid) and _own_folder(orphan):
            shutil.rmtree(orphan, ignore_errors=True)
            removed.append(orphan.name)
    return removed


def _host() -> str:
    """This machine's name, as a folder name may hold it (no dot or dash: they separate the fields)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname()) or "host"


def _own_folder(path: Path) -> bool:
    try:
        return path.is_dir() and not path.is_symlink() and path.stat().st_uid == os.getuid()
    except OSError:
        return False


@contextlib.contextmanager
def scratch_dir(prefix: str, parent: str | None = None) -> Iterator[Path]:
    """A `process_tempdir`, removed when the block ends."""
    path = process_tempdir(prefix, parent)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def write_json_atomic(path: Path, data: Any, indent: int | None = 1) -> None:
    """`data` as JSON (unknown types as their str), written with `write_atomic`."""
    write_atomic(path, json.dumps(data, indent=indent, default=str))


def jsonl_records(text: str) -> Iterator[tuple[int, Any, str | None]]:
    """(line number, value, problem) for each non-blank line of JSONL text; a line that is not JSON has value None
    and the decoder's message as its problem. Lines end at "\\n" only: U+2028 may sit inside a JSON string, where
    `str.splitlines` would cut it. Every JSONL reader of pinpoint reads through here, each with its own policy for
    a bad line (skip it, or name it in an error)."""
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line), None
        except ValueError as exc:
            yield number, None, getattr(exc, "msg", str(exc))


def json_objects(path: Path) -> list[dict]:
    """The JSON objects of a JSONL file that is appended to while it is read (a rollout's dataset): a line cut by
    a killed writer, or one that is not an object, is skipped."""
    return [row for _, row, _ in jsonl_records(Path(path).read_text(errors="replace")) if isinstance(row, dict)]


def last_per_key(rows: list[dict], key: Callable[[int, dict], Hashable]) -> list[dict]:
    """The last row of each `key(index, row)`, in the order those last rows were written (an appended retry
    replaces the earlier row of its key)."""
    latest: dict[Hashable, dict] = {}
    for index, row in enumerate(rows):
        k = key(index, row)
        latest.pop(k, None)
        latest[k] = row
    return list(latest.values())
