"""Edit metrics (PreciseCoder): how many lines a prediction changes, and how many of them the fix needed.

Both patches are read in the coordinates of the original (base-commit) file. A patch is a list of *runs*: maximal
blocks of consecutive `-`/`+` lines in a hunk. A run covers an interval of original lines: [first removed, last
removed] when it removes lines, or the insertion point k - 0.5 when it only inserts before original line k.
A run is worth max(removed, added) *edited lines* (so a one-line modification is one edited line, not two).

- An edited line of the prediction is **needed** when its location lies within 0.5 lines of a gold run's interval in
  the same file: the same original line, or an insertion point bordering it. A removed line's location is its own
  line; surplus added lines of a run (beyond its removals) share the run's interval.
- **precision** = needed edited lines / edited lines of the prediction.
- **recall** = gold runs ("faults") touched by at least one needed edited line / gold runs.
- F1 is their harmonic mean. Location only: whether the new text is *right* is what the tests decide.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

TOLERANCE = 0.5


@dataclass(frozen=True)
class Run:
    path: str
    start: float
    end: float
    removed: tuple[int, ...]
    added: int

    @property
    def size(self) -> int:
        return max(len(self.removed), self.added)

    def units(self) -> list[tuple[float, float]]:
        """One (start, end) location per edited line."""
        spots: list[tuple[float, float]] = [(line, line) for line in self.removed]
        return spots + [(self.start, self.end)] * (self.size - len(self.removed))


def _runs(patch: str) -> list[Run]:
    try:
        files = PatchSet(patch or "")
    except UnidiffParseError as exc:
        raise ValueError(f"not a unified diff: {exc}") from None
    runs: list[Run] = []
    for patched in files:
        path = patched.path
        for hunk in patched:
            removed: list[int] = []
            added = 0
            next_source = hunk.source_start
            for line in [*hunk, None]:
                if line is not None and line.is_removed:
                    removed.append(line.source_line_no)
                    next_source = line.source_line_no + 1
                elif line is not None and line.is_added:
                    added += 1
                else:
                    if removed or added:
                        start, end = (removed[0], removed[-1]) if removed else (next_source - 0.5, next_source - 0.5)
                        runs.append(Run(path, start, end, tuple(removed), added))
                    removed, added = [], 0
                    if line is not None and line.source_line_no is not None:
                        next_source = line.source_line_no + 1
    return runs


def _touches(a: tuple[float, float], b: Run) -> bool:
    return a[0] <= b.end + TOLERANCE and b.start <= a[1] + TOLERANCE


@dataclass(frozen=True)
class EditMetrics:
    edited_lines: int
    needed_lines: int
    gold_lines: int
    gold_faults: int
    faults_touched: int
    files_edited: int
    precision: float
    recall: float
    f1: float
    noop: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _counts(runs: list[Run]) -> dict[str, int]:
    return {"added": sum(run.added for run in runs), "removed": sum(len(run.removed) for run in runs),
            "total": sum(run.size for run in runs), "files": len({run.path for run in runs})}


def edited_lines(patch: str) -> dict[str, int]:
    """The size of a patch: its edited lines (`total`; a modified line counts once), the lines it adds and removes,
    and the files it edits. The one count the agent's search, trajectories, preds.jsonl and `edit_metrics` report;
    zeros for an empty patch or one that is not a unified diff."""
    try:
        return _counts(_runs(patch))
    except ValueError:
        return _counts([])


def gold_locations(patch: str) -> dict[str, list[tuple[float, float]]]:
    """Per file, the (start, end) pre-image lines of each run of edited lines a patch makes (a pure insertion is the
    half line before which it inserts): where a fix lands, for localization rewards and views."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for run in _runs(patch):
        spans.setdefault(run.path, []).append((run.start, run.end))
    return spans


def patch_gold_lines(patch: str) -> dict[str, set[int]]:
    """Lines of the original files a unified diff changes (for a pure insertion, the line it goes before)."""
    from unidiff import PatchSet

    gold: dict[str, set[int]] = {}
    for patched in PatchSet(patch):
        lines = gold.setdefault(patched.path, set())
        for hunk in patched:
            pending_insert = removed_in_block = False
            for line in hunk:
                if line.is_removed:
                    lines.add(line.source_line_no)
                    removed_in_block = True
                elif line.is_added:
                    pending_insert = pending_insert or not removed_in_block
                else:  # context ends a change block
                    if pending_insert:
                        lines.add(line.source_line_no)
                    pending_insert = removed_in_block = False
            if pending_insert:
                lines.add(hunk.source_start + hunk.source_length)
    return gold


def edit_metrics(pred_patch: str, gold_patch: str) -> EditMetrics:
    """PreciseCoder precision / recall / F1 of `pred_patch` against `gold_patch` (see the module docstring)."""
    pred, gold = _runs(pred_patch), _runs(gold_patch)
    gold_by_file: dict[str, list[tuple[int, Run]]] = {}
    for index, run in enumerate(gold):
        gold_by_file.setdefault(run.path, []).append((index, run))
    needed = 0
    touched: set[int] = set()
    for run in pred:
        for unit in run.units():
            hits = [i for i, g in gold_by_file.get(run.path, []) if _touches(unit, g)]
            if hits:
                needed += 1
                touched.update(hits)
    size = _counts(pred)
    edited = size["total"]
    precision = needed / edited if edited else 0.0
    recall = len(touched) / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return EditMetrics(
        edited_lines=edited,
        needed_lines=needed,
        gold_lines=sum(run.size for run in gold),
        gold_faults=len(gold),
        faults_touched=len(touched),
        files_edited=size["files"],
        precision=round(precision, 4),
        recall=round(recall, 4),
        f1=round(f1, 4),
        noop=edited == 0,
    )
