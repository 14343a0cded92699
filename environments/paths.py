"""Every folder pinpoint reads or writes, resolved when asked (never at import), each overridable by one variable.

| function       | default                                   | variable               |
|----------------|-------------------------------------------|------------------------|
| `shared_data`  | `../shared/data` beside the project       | `PINPOINT_SHARED_DATA` |
| `repos_dir`    | `<shared_data>/repos`                     | `PINPOINT_REPOS_DIR`   |
| `cache_dir`    | `~/.cache/pinpoint`                       | `PINPOINT_CACHE`       |
| `runs_dir`     | `runs` under the working directory        | `PINPOINT_RUNS`        |
| `dockerd_log`  | `/var/log/pinpoint-dockerd.log`           | `PINPOINT_DOCKERD_LOG` |

The project root is only used to find the shared data of a source checkout; results never go there, because for
a non-editable install it would be site-packages.
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def _env_path(name: str, default: Path) -> Path:
    value = os.environ.get(name, "").strip()
    return Path(value).expanduser() if value else default


def shared_data() -> Path:
    """The read-only data folder (SWE-bench dev rows, offline repositories, bug sets)."""
    return _env_path("PINPOINT_SHARED_DATA", PROJECT_ROOT.parent / "shared" / "data")


def repos_dir() -> Path:
    """Offline repository histories as `<owner>__<name>.git.tar`."""
    return _env_path("PINPOINT_REPOS_DIR", shared_data() / "repos")


def cache_dir() -> Path:
    """Derived files reused across runs: extracted repositories, build locks, LLM confidence scores."""
    return _env_path("PINPOINT_CACHE", Path.home() / ".cache" / "pinpoint")


def runs_dir() -> Path:
    """The root of run results: `<runs_dir>/<run_id>/<model>/...` (see `swebench_eval.layout`)."""
    return _env_path("PINPOINT_RUNS", Path("runs"))


def dockerd_log() -> Path:
    """Where a dockerd that pinpoint starts writes its log."""
    return _env_path("PINPOINT_DOCKERD_LOG", Path("/var/log/pinpoint-dockerd.log"))
