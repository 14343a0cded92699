"""Every folder pinpoint reads or writes, resolved when asked (never at import), each overridable by one variable.

| function       | default                                        | variable               |
|----------------|------------------------------------------------|------------------------|
| `shared_data`  | `$XDG_DATA_HOME/pinpoint` (~/.local/share/...) | `PINPOINT_SHARED_DATA` |
| `repos_dir`    | `<shared_data>/repos`                          | `PINPOINT_REPOS_DIR`   |
| `cache_dir`    | `$XDG_CACHE_HOME/pinpoint` (~/.cache/...)      | `PINPOINT_CACHE`       |
| `runs_dir`     | `runs` under the working directory             | `PINPOINT_RUNS`        |
| `dockerd_log`  | `/var/log/pinpoint-dockerd.log`                | `PINPOINT_DOCKERD_LOG` |

Defaults are the user's standard folders, never the installed package's location: a wheel install has no checkout
around it, and a development checkout's data is pointed at by the dev setup, the tests and the lab (the variable).
"""

from __future__ import annotations

import os
from pathlib import Path


def _env_path(name: str, default: Path) -> Path:
    value = os.environ.get(name, "").strip()
    return Path(value).expanduser() if value else default


def _xdg(name: str, fallback: str) -> Path:
    """An XDG base folder: the variable when it holds an absolute path (the spec ignores a relative one)."""
    value = os.environ.get(name, "").strip()
    return Path(value) if value and os.path.isabs(value) else Path.home() / fallback


def shared_data() -> Path:
    """The read-only data folder (SWE-bench dev rows, offline repositories, bug sets)."""
    return _env_path("PINPOINT_SHARED_DATA", _xdg("XDG_DATA_HOME", ".local/share") / "pinpoint")


def repos_dir() -> Path:
    """Offline repository histories as `<owner>__<name>.git.tar`."""
    return _env_path("PINPOINT_REPOS_DIR", shared_data() / "repos")


def cache_dir() -> Path:
    """Derived files reused across runs: extracted repositories, build locks, LLM confidence scores."""
    return _env_path("PINPOINT_CACHE", _xdg("XDG_CACHE_HOME", ".cache") / "pinpoint")


def runs_dir() -> Path:
    """The root of run results: `<runs_dir>/<run_id>/<model>/...` (see `swebench_eval.layout`)."""
    return _env_path("PINPOINT_RUNS", Path("runs"))


def dockerd_log() -> Path:
    """Where a dockerd that pinpoint starts writes its log."""
    return _env_path("PINPOINT_DOCKERD_LOG", Path("/var/log/pinpoint-dockerd.log"))
