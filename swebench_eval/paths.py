"""Where the harness finds shared data and keeps its caches and results (each overridable by environment)."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]

#: read-only data every checkout has at ../shared/data
SHARED_DATA = Path(os.environ.get("PINPOINT_SHARED_DATA", PROJECT_ROOT.parent / "shared" / "data"))

#: extracted repositories and other derived files, reused across runs
CACHE_DIR = Path(os.environ.get("PINPOINT_CACHE", Path.home() / ".cache" / "pinpoint"))

#: evaluation results: runs/eval/<run_id>/<instance_id>/
RUNS_DIR = Path(os.environ.get("PINPOINT_RUNS", PROJECT_ROOT / "runs"))
