"""What a container changed outside its working tree, read from the host in its overlay2 upper layer.

Why: an in-place reset restores the working tree only; a warm box that is handed out again (pooled grading) must also
know that nothing else moved (a `.pth` in site-packages, a file in /tmp). `docker diff` tells, but costs the engine's
work (~0.8 s on a loaded machine); the upper layer holds exactly what the container wrote, and listing it from the
host costs about a millisecond for the few hundred entries an install leaves. Reading it changes nothing (the kernel
forbids changing an overlay's layers while it is mounted: removals go through the container).

`Layers.listing()` gives one `Entry` per upper-layer path; `changes(baseline, now)` compares two listings: paths that
are new (absent from the image too: deleting them restores the image's state) and paths that changed (an image file
modified or deleted, a folder made opaque, a baseline entry moved or gone: only a new container undoes those).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

#: the xattr overlayfs sets on an upper folder that hides the image's folder of the same path
OPAQUE_XATTR = "trusted.overlay.opaque"


@dataclass(frozen=True)
class Entry:
    """One upper-layer path: folders compare by kind and mode (their mtime moves with their children, which are
    compared themselves), everything else by its full stat (ctime included: a test cannot set it back)."""

    kind: str  # d (folder), f (file), l (symlink), w (whiteout: an image file deleted), o (other)
    mode: int
    stamp: tuple[int, ...] = ()
    opaque: bool = False


@dataclass
class Changes:
    """`new`: top-most paths absent from the image (removable); `changed`: paths only a new container restores."""

    new: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Layers:
    """A running container's overlay2 layers on the host: the writable upper folder and the image's lower ones."""

    upper: Path
    lowers: tuple[Path, ...]

    @classmethod
    def of(cls, attrs: dict) -> Layers | None:
        """From `container.attrs`; None when the storage driver is not overlay2 or its folders are not readable here
        (not root on the engine's machine, a remote engine)."""
        driver = attrs.get("GraphDriver") or {}
        data = driver.get("Data") or {}
        if driver.get("Name") != "overlay2" or not data.get("UpperDir"):
            return None
        upper = Path(data["UpperDir"])
        lowers = tuple(Path(p) for p in (data.get("LowerDir") or "").split(":") if p)
        if not os.access(upper, os.R_OK | os.X_OK):
            return None
        return cls(upper, lowers)

    def listing(self, skip: tuple[str, ...]) -> dict[str, Entry]:
        """Every upper-layer path (absolute, as the container sees it) but those under `skip` (absolute paths)."""
        found: dict[str, Entry] = {}
        stack = [("", self.upper)]
        while stack:
            rel_dir, folder = stack.pop()
            for item in os.scandir(folder):
                path = f"{rel_dir}/{item.name}"
                if any(path == s or path.startswith(s + "/") for s in skip):
                    continue
                st = item.stat(follow_symlinks=False)
                entry = _entry(item.path, st)
                found[path] = entry
                if entry.kind == "d":
                    stack.append((path, Path(item.path)))
        return found

    def in_image(self, path: str) -> bool:
        """Whether the image has `path`: the top-most lower layer that has an entry for it decides (a whiteout there
        means the image deleted it); a lower folder marked opaque hides the layers below it."""
        rel = path.lstrip("/")
        for lower in self.lowers:
            target = lower / rel
            try:
                st = os.lstat(target)
            except FileNotFoundError:
                if _opaque_parent(lower, rel):
                    return False
                continue
            except NotADirectoryError:
                return False
            return not _whiteout(st)
        return False


def changes(layers: Layers, baseline: dict[str, Entry], now: dict[str, Entry]) -> Changes:
    """What moved from `baseline` to `now` (two listings of the same container)."""
    found = Changes()
    new_dirs: list[str] = []
    for path in sorted(now):
        entry, before = now[path], baseline.get(path)
        if any(path.startswith(d + "/") for d in new_dirs):
            continue  # inside a new folder: removed with it
        if before is not None:
            if entry != before:
                found.changed.append(path)
            continue
        if entry.kind == "w" or entry.opaque:
            found.changed.append(path)
        elif layers.in_image(path):
            if entry.kind != "d":
                found.changed.append(path)  # an image file copied up: modified
        else:
            found.new.append(path)
            if entry.kind == "d":
                new_dirs.append(path)
    found.changed += [path for path in sorted(baseline) if path not in now]
    return found


def _entry(path: str, st: os.stat_result) -> Entry:
    if _whiteout(st):
        return Entry("w", st.st_mode)
    if stat.S_ISDIR(st.st_mode):
        return Entry("d", st.st_mode, opaque=_is_opaque(path))
    kind = "l" if stat.S_ISLNK(st.st_mode) else "f" if stat.S_ISREG(st.st_mode) else "o"
    return Entry(kind, st.st_mode, (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_uid, st.st_gid))


def _whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _is_opaque(path: str | Path) -> bool:
    try:
        return os.getxattr(path, OPAQUE_XATTR, follow_symlinks=False) == b"y"
    except OSError:
        return False


def _opaque_parent(lower: Path, rel: str) -> bool:
    """Whether a folder above `rel` in `lower` is opaque (the image's layers below it do not show there)."""
    parts = rel.split("/")[:-1]
    return any(_is_opaque(lower.joinpath(*parts[:i])) for i in range(1, len(parts) + 1))
