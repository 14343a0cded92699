"""One results layout for every command, keyed as SWE-bench keys its logs: by run id, then model, then instance.

    <runs_dir>/<run_id>/<model>/preds.jsonl                      predictions (run, batch, fix, demo)
    <runs_dir>/<run_id>/<model>/trajectories/<instance>/         trajectory.json, checkpoint.sqlite
    <runs_dir>/<run_id>/<model>/eval/<instance>/                 report.json, test_output.txt, eval.sh, patch.diff
    <runs_dir>/<run_id>/summary.json                             every row graded under this run id so far

`pinpoint run ID --evaluate` and `pinpoint eval --predictions <that preds.jsonl> --run-id <same>` therefore read
and write the same report, and two models under one run id never overwrite each other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pinpoint.environments import paths


def safe_name(text: str) -> str:
    """`text` as one path component (model names such as `openai/gpt-4o` hold slashes)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "run"


@dataclass(frozen=True)
class RunLayout:
    """Where one (run id, model) pair keeps its files."""

    run_id: str
    model: str
    root: Path | None = None

    @property
    def run_root(self) -> Path:
        return Path(self.root or paths.runs_dir()) / safe_name(self.run_id)

    @property
    def folder(self) -> Path:
        return self.run_root / safe_name(self.model)

    @property
    def predictions(self) -> Path:
        return self.folder / "preds.jsonl"

    @property
    def summary(self) -> Path:
        return self.run_root / "summary.json"

    def trajectory_dir(self, instance_id: str) -> Path:
        return self.folder / "trajectories" / safe_name(instance_id)

    def eval_dir(self, instance_id: str) -> Path:
        return self.folder / "eval" / safe_name(instance_id)

    def with_model(self, model: str) -> RunLayout:
        return RunLayout(self.run_id, model, self.root)


def run_id_of_predictions(path: Path) -> str:
    """The run id a predictions file belongs to: its run folder's for `<run_id>/<model>/preds.jsonl`, else its stem."""
    path = Path(path)
    return path.parents[1].name if path.name == "preds.jsonl" and len(path.parents) > 2 else path.stem


def dataset_run_id(dataset: str | None) -> str:
    """The default run id of `run`/`batch` on a dataset: its file name without suffixes, or its hub name."""
    if not dataset:
        return "swebench_verified_dev"
    name = Path(dataset).name if Path(dataset).suffix else dataset
    return safe_name(name.split(".")[0])
