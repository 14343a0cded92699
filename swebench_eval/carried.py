"""Result folders carried from a worker to the driver, so the driver is the only writer of a run's folders.

A task the executor runs away from the driver (a Ray task, on whichever node) writes into a scratch run root of
its own, with the run's layout below it (`scratch_layout`); it returns the folders it wrote as `FolderFiles`
(relative path to bytes), and the driver writes them into the real layout (`FolderFiles.write`: each file atomic,
the verdict file last). A resume on the driver then sees every report and trajectory, whatever node made it, and
no node needs the runs root on a shared filesystem. The local backend's threads write in place, as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pinpoint.environments.files import scratch_dir, write_atomic
from pinpoint.swebench_eval.layout import RunLayout

#: written last, removed first: while it is missing the folder is not taken as finished (a resume redoes it)
VERDICT_FILES = ("report.json",)


@dataclass(frozen=True)
class FolderFiles:
    """The regular files of one result folder, by path relative to it."""

    files: dict[str, bytes] = field(default_factory=dict)

    @classmethod
    def read(cls, folder: Path) -> FolderFiles:
        """Every regular file below `folder` (none when it does not exist)."""
        folder = Path(folder)
        if not folder.is_dir():
            return cls()
        return cls({str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()})

    def write(self, folder: Path) -> None:
        """Write every file into `folder`, each atomically; a verdict file is removed first and written last, so a
        driver killed midway leaves a folder a resume grades again, never an old verdict beside new files."""
        folder = Path(folder)
        for name in VERDICT_FILES:
            (folder / name).unlink(missing_ok=True)
        for name in sorted(self.files, key=lambda n: n in VERDICT_FILES):
            write_atomic(folder / name, self.files[name])

    def __bool__(self) -> bool:
        return bool(self.files)


@contextlib.contextmanager
def scratch_layout(layout: RunLayout) -> Iterator[RunLayout]:
    """`layout` under a temporary root on this node (same run id and model below it), removed afterwards."""
    with scratch_dir("pinpoint-scratch-") as root:
        yield RunLayout(layout.run_id, layout.model, root)
