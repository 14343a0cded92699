"""What a command said on stderr, apart from the `run id: ...` line every box-starting command prints first."""

from __future__ import annotations

RUN_ID_PREFIX = "run id: "


def said(err: str) -> list[str]:
    """stderr's lines without the run id announcement (the id a user gives `env prune --label`)."""
    return [line for line in err.splitlines() if not line.startswith(RUN_ID_PREFIX)]
