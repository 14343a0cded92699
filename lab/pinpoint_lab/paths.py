"""Where the lab keeps what it measures, and where it finds the development data.

The lab runs from a development checkout (an editable install), so its results live beside its sources in
`lab/results` (or `$PINPOINT_LAB_RESULTS`), never in the product's docs or its shipped checkpoints.
"""

from __future__ import annotations

import os
from pathlib import Path

LAB_ROOT = Path(__file__).resolve().parents[1]

#: the checkout's development data (SWE-bench dev rows, offline repositories, bug sets), beside the repository
DEV_DATA = LAB_ROOT.parents[1] / "shared" / "data"


def results_dir() -> Path:
    """The lab's results and resumable caches (bench rows, the fusion corpus, trained checkpoints)."""
    value = os.environ.get("PINPOINT_LAB_RESULTS", "").strip()
    return Path(value).expanduser() if value else LAB_ROOT / "results"


def use_dev_data() -> None:
    """Point the product at the checkout's data unless the caller named a folder (PINPOINT_SHARED_DATA)."""
    if DEV_DATA.is_dir():
        os.environ.setdefault("PINPOINT_SHARED_DATA", str(DEV_DATA))
