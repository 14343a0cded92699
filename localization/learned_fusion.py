"""A learned fusion of every signal to lines: a listwise linear ranker over per-line features (the coverage spectrum's
counts and scores, how near the failing tests' deepest frames a line is, the rank and width of each signal's best
span holding it, its file's rank per signal, how many signals support it), in place of reciprocal rank.

Reciprocal rank only sees ranks, so it cannot tell a line every failing and no passing test runs from one that ties
with a hundred others on Ochiai, nor weigh a traceback's frame above a BM25 file. The ranker reads those as
features. Candidates are the lines the failing tests ran (their `LineRecord`s) and the lines of each signal's narrow
spans; the model scores each, and `LearnedFusion` returns the top lines as `learned` suspects, followed by the
reciprocal-rank list (so file- and function-level suspects keep their places after the lines).

The models are small JSON (`checkpoints/fusion-oracle.json` when tests ran, `fusion-issue.json` otherwise): feature names, the scaler's means and scales, the weights.
Training and scoring need only numpy.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
from pinpoint.localization.execution import ExecutionEvidence, rank_lines
from pinpoint.localization.fusion import fuse as fuse_rrf
from pinpoint.localization.fusion import reciprocal_rank_fusion
from pinpoint.localization.retrieval import is_test_path
from pinpoint.localization.suspects import Suspect

SIGNALS = ("retrieval", "lexical", "bm25", "traceback", "spectrum", "ldb")
#: spectrum lines kept per row and per localization (by spectrum rank; the failing tests' deepest files first)
MAX_RECORDS = 400
#: spans wider than this (whole files, big classes) rank files, not lines
MAX_SPAN = 80
MAX_CANDIDATES = 800
#: learned line suspects returned before the reciprocal-rank list
MAX_LINES = 100
RRF_K = 60.0
CHECKPOINTS = Path(__file__).with_name("checkpoints")


def checkpoint(setting: str) -> Path:
    """The shipped model of a setting: `oracle` (failing tests ran) or `issue` (issue text only)."""
    return CHECKPOINTS / f"fusion-{setting}.json"


# -- what the ranker reads ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LineRecord:
    """A line some failing test ran: its spectrum (`rank` is its place in the Ochiai order), its distance from the
    failing tests' deepest frames (0: a deepest frame; None: in no frame), how close to a failing test's end it ran
    (0: the last line; None: not among the recent, or not recorded)."""

    path: str
    line: int
    ef: int
    ep: int
    failed: int
    passed: int
    ochiai: float
    dstar: float
    rank: int
    frame_depth: int | None = None
    recency: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping) -> LineRecord:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})


def frame_depths(evidence: ExecutionEvidence) -> dict[tuple[str, int], int]:
    """Per line in a failing test's traceback, its smallest distance from that traceback's deepest frame."""
    depths: dict[tuple[str, int], int] = {}
    for test in evidence.failing:
        for depth, frame in enumerate(reversed(test.frames)):
            key = (frame.path, frame.line)
            depths[key] = min(depth, depths.get(key, depth))
    return depths


def line_records(evidence: ExecutionEvidence | None, limit: int = MAX_RECORDS) -> list[LineRecord]:
    """The spectrum's best `limit` lines as records (none without evidence or failing runs)."""
    if evidence is None or not evidence.failing:
        return []
    depths = frame_depths(evidence)
    return [LineRecord(s.path, s.line, s.ef, s.ep, s.failed, s.passed, round(s.ochiai, 6), round(s.dstar, 6), rank,
                       depths.get((s.path, s.line)), getattr(s, "recency", None))
            for rank, s in enumerate(rank_lines(evidence)[:limit])]


class _SignalIndex:
    """One signal's suspects by path, for the best (lowest-rank) span holding a line and a file's rank."""

    def __init__(self, suspects: Sequence[Suspect]) -> None:
        self.by_path: dict[str, list[tuple[int, Suspect]]] = {}
        self.file_rank: dict[str, int] = {}
        for rank, s in enumerate(suspects):
            self.by_path.setdefault(s.path, []).append((rank, s))
            self.file_rank.setdefault(s.path, len(self.file_rank))

    def best(self, path: str, line: int) -> tuple[int, Suspect] | None:
        return next(((r, s) for r, s in self.by_path.get(path, ()) if s.start_line <= line <= s.end_line), None)


def candidates(per_signal: Mapping[str, Sequence[Suspect]], records: Sequence[LineRecord],
               limit: int = MAX_CANDIDATES) -> list[tuple[str, int]]:
    """The lines the failing tests ran, then the lines of every signal's narrow spans taken rank by rank across
    signals, at most `limit`."""
    out = dict.fromkeys((r.path, r.line) for r in records)
    narrow = [(rank, s) for suspects in per_signal.values() for rank, s in enumerate(suspects)
              if s.end_line - s.start_line < MAX_SPAN]
    for _rank, s in sorted(narrow, key=lambda item: item[0]):
        for line in range(s.start_line, s.end_line + 1):
            if len(out) >= limit:
                return list(out)
            out.setdefault((s.path, line))
    return list(out)[:limit]


def _spectrum_features(record: LineRecord | None, ties: int) -> list[float]:
    if record is None:
        return [0.0] * 10
    dstar = record.dstar / (1.0 + record.dstar)
    recent = [1.0, 1.0 / (1.0 + record.recency)] if record.recency is not None else [0.0, 0.0]
    return [1.0, record.ochiai, dstar, record.ef / max(1, record.failed), record.ep / max(1, record.passed),
            1.0 / (1.0 + record.rank), math.log1p(record.rank) / math.log1p(MAX_RECORDS), math.log1p(ties), *recent]


def _frame_features(record: LineRecord | None) -> list[float]:
    depth = record.frame_depth if record is not None else None
    if depth is None:
        return [0.0, 0.0, 0.0]
    return [1.0, float(depth == 0), 1.0 / (1.0 + depth)]


def _signal_features(index: _SignalIndex, path: str, line: int) -> list[float]:
    """The rank and width of the signal's best span holding the line, whether it is the line itself, the file's
    rank in the signal."""
    file_rank = index.file_rank.get(path)
    file_rr = 1.0 / (1.0 + file_rank) if file_rank is not None else 0.0
    found = index.best(path, line)
    if found is None:
        return [0.0, 0.0, 0.0, file_rr]
    rank, s = found
    width = s.end_line - s.start_line + 1
    return [1.0 / (1.0 + rank), math.log1p(width) / math.log(1000.0), float(width == 1), file_rr]


def _support_features(signal_rows: list[list[float]], ranks: list[int | None]) -> list[float]:
    """How many signals hold the line, hold its file, and its reciprocal-rank score (what RRF alone would say)."""
    holding = sum(1 for r in ranks if r is not None)
    files = sum(1 for row in signal_rows if row[3] > 0)
    rrf = sum(RRF_K / (RRF_K + r + 1) for r in ranks if r is not None)
    return [float(holding), float(files), rrf]


FEATURES = (
    "spectrum_has", "ochiai", "dstar", "ef_share", "ep_share", "spectrum_rr", "spectrum_log_rank", "ties_log",
    "recent_has", "recent_rr", "frame_has", "frame_deepest", "frame_rr",
    *(f"{s}_{f}" for s in SIGNALS for f in ("rr", "width", "line", "file_rr")),
    "signals_holding", "signals_file", "rrf",
)


def features(per_signal: Mapping[str, Sequence[Suspect]], records: Sequence[LineRecord],
             lines: Sequence[tuple[str, int]]) -> np.ndarray:
    """One row of `FEATURES` per candidate line."""
    by_line = {(r.path, r.line): r for r in records}
    tie_counts: dict[tuple[float, float], int] = {}
    for r in records:
        tie_counts[(r.ochiai, r.dstar)] = tie_counts.get((r.ochiai, r.dstar), 0) + 1
    indexes = [_SignalIndex(per_signal.get(s, ())) for s in SIGNALS]
    out = np.zeros((len(lines), len(FEATURES)), dtype=np.float64)
    for i, (path, line) in enumerate(lines):
        record = by_line.get((path, line))
        ties = tie_counts.get((record.ochiai, record.dstar), 0) if record else 0
        signal_rows = [_signal_features(index, path, line) for index in indexes]
        ranks = [found[0] if (found := index.best(path, line)) else None for index in indexes]
        out[i] = [*_spectrum_features(record, ties), *_frame_features(record),
                  *(v for row in signal_rows for v in row), *_support_features(signal_rows, ranks)]
    return out


# -- the model ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FusionModel:
    """A linear ranker over standardized `FEATURES`: score = w . (x - mean) / scale + b."""

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    trained_on: str = ""

    def score(self, x: np.ndarray) -> np.ndarray:
        if x.size == 0:
            return np.zeros(len(x))
        z = (x - np.asarray(self.mean)) / np.asarray(self.scale)
        return z @ np.asarray(self.weights) + self.bias

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> FusionModel:
        raw = json.loads(Path(path).read_text())
        model = cls(**{**raw, **{k: tuple(raw[k]) for k in ("features", "mean", "scale", "weights")}})
        if model.features != FEATURES:
            raise ValueError(f"{path} was trained on other features; train it again (pinpoint-lab bench fusion --save)")
        return model


@dataclass(frozen=True)
class _Batch:
    """Every training row's candidates stacked once (rows contiguous, each from `starts`), so one gradient step is
    a few array operations over all rows instead of a Python loop over them."""

    x: np.ndarray
    gold: np.ndarray
    starts: np.ndarray
    row: np.ndarray

    @classmethod
    def of(cls, groups: Sequence[tuple[np.ndarray, np.ndarray]]) -> _Batch:
        sizes = np.array([len(y) for _, y in groups])
        return cls(np.vstack([x for x, _ in groups]), np.concatenate([y for _, y in groups]) > 0,
                   np.concatenate([[0], np.cumsum(sizes)[:-1]]), np.repeat(np.arange(len(groups)), sizes))

    def _softmax(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row: the softmax of `s` over its candidates, and its logsumexp (`-inf` entries weigh nothing)."""
        top = np.maximum.reduceat(s, self.starts)
        e = np.exp(s - top[self.row])
        total = np.add.reduceat(e, self.starts)
        return e / total[self.row], top + np.log(total)

    def loss(self, w: np.ndarray, l2: float) -> tuple[float, np.ndarray]:
        s = self.x @ w
        p, log_all = self._softmax(s)
        q, log_gold = self._softmax(np.where(self.gold, s, -np.inf))  # q: the softmax over the gold lines alone
        rows = len(self.starts)
        # log P(gold) = logsumexp(s over gold) - logsumexp(s), in log space: a far-behind gold line underflows p
        loss = 0.5 * l2 * float(w @ w) - float((log_gold - log_all).sum()) / rows
        return loss, l2 * w + self.x.T @ (p - q) / rows


def _listwise_loss(w: np.ndarray, groups: Sequence[tuple[np.ndarray, np.ndarray]], l2: float
                   ) -> tuple[float, np.ndarray]:
    """Mean over rows of -log P(a gold line | the row), P a softmax of the scores over the row's candidates, plus
    `l2` |w|^2 / 2; and its gradient (every row must hold a gold line)."""
    return _Batch.of(groups).loss(w, l2)


def train(groups: Sequence[tuple[np.ndarray, np.ndarray]], l2: float = 0.1, max_evaluations: int = 500,
          trained_on: str = "") -> FusionModel:
    """Fit a listwise ranker on (features, labels) per row: each row is one choice among its candidates (a
    conditional logit), so rows with hundreds of candidates weigh as much as rows with few, and only the order
    within a row is learned. Rows without a gold candidate say nothing about order and are left out. Minimized by
    L-BFGS with a strong-Wolfe line search (torch's): plain gradient descent at a fixed step diverged on the dev
    rows and the mutant corpus (the loss rose from 5.5 to 7-14 and from 6.3 to 30-60 over 1,500 steps)."""
    import torch

    kept = [(x, y) for x, y in groups if 0 < y.sum() < len(y)]
    if not kept:
        raise ValueError("no training row has a gold line among its candidates")
    stacked = np.vstack([x for x, _ in kept])
    mean, scale = stacked.mean(axis=0), stacked.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    batch = _Batch.of([((x - mean) / scale, y) for x, y in kept])
    weights = torch.zeros(stacked.shape[1], dtype=torch.float64, requires_grad=True)
    search = torch.optim.LBFGS([weights], lr=1.0, max_iter=max_evaluations, max_eval=max_evaluations,
                               tolerance_grad=1e-9, tolerance_change=1e-12, history_size=20,
                               line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        loss, grad = batch.loss(weights.detach().numpy(), l2)
        weights.grad = torch.from_numpy(grad)
        return torch.tensor(loss, dtype=torch.float64)

    search.step(closure)
    w = weights.detach().numpy()
    return FusionModel(FEATURES, tuple(mean.tolist()), tuple(scale.tolist()), tuple(w.tolist()), 0.0, trained_on)


# -- fusing -------------------------------------------------------------------------------------------------------
class LearnedFusion:
    """Per-signal suspects (and the spectrum's line records, when tests ran) to one list: the model's top lines as
    `learned` suspects, then the reciprocal-rank fusion for the spans the lines do not cover. Without a `model`,
    the shipped one of the setting the records say (tests ran or not) is loaded when first needed.

    `lead`: the model only orders lines inside the file reciprocal rank ranks first: its best `lead` lines there
    lead the agent's fused list (`fusion.fuse`), which is otherwise kept, so every file and function ranking is
    reciprocal rank's (the model is asked the narrower question mutants can teach: which line of a file)."""

    def __init__(self, model: FusionModel | None = None, max_lines: int = MAX_LINES, lead: int | None = None) -> None:
        self.model = model
        self.max_lines = max_lines
        self.lead = lead
        self._shipped: dict[str, FusionModel] = {}

    def model_for(self, records: Sequence[LineRecord]) -> FusionModel:
        if self.model is not None:
            return self.model
        setting = "oracle" if records else "issue"
        if setting not in self._shipped:
            self._shipped[setting] = FusionModel.load(checkpoint(setting))
        return self._shipped[setting]

    def rank(self, per_signal: Mapping[str, Sequence[Suspect]], records: Sequence[LineRecord] = ()) -> list[tuple[
            str, int, float]]:
        """Candidate lines with their scores, best first (ties: path, line)."""
        lines = candidates(per_signal, records)
        scores = self.model_for(records).score(features(per_signal, records, lines))
        order = sorted(range(len(lines)), key=lambda i: (-scores[i], lines[i]))
        return [(*lines[i], float(scores[i])) for i in order]

    def fuse(self, per_signal: Mapping[str, Sequence[Suspect]], records: Sequence[LineRecord] = ()) -> list[Suspect]:
        signals = {n: list(v) for n, v in per_signal.items() if v}
        by_line = {(r.path, r.line): r for r in records}
        ranked = self.rank(signals, records)
        if self.lead is None:
            ranked, rest = ranked[: self.max_lines], reciprocal_rank_fusion(signals)
        else:  # the top file's best lines, scored just above the fused list they lead
            rest = fuse_rrf(signals)
            top_file = next((s.path for s in rest if not is_test_path(s.path)), None)
            ranked = [r for r in ranked if r[0] == top_file][: self.lead]
            floor = ranked[-1][2] if ranked else 0.0
            ceiling = max((s.score for s in rest), default=0.0)
            ranked = [(path, line, ceiling + 1.0 + score - floor) for path, line, score in ranked]
        learned = [Suspect(path, line, line, score, "learned", _evidence(signals, by_line.get((path, line)), path, line))
                   for path, line, score in ranked]
        return learned + rest


def _evidence(per_signal: Mapping[str, Sequence[Suspect]], record: LineRecord | None, path: str, line: int) -> str:
    """What supports the line, for the prompt: the spectrum's counts and each signal's span holding it."""
    parts = []
    if record is not None:
        frame = f", {record.frame_depth} frames from a failure's deepest" if record.frame_depth is not None else ""
        parts.append(f"run by {record.ef}/{record.failed} failing, {record.ep}/{record.passed} passing tests "
                     f"(ochiai {record.ochiai:.2f}){frame}")
    for name, suspects in per_signal.items():
        found = _SignalIndex(suspects).best(path, line)
        if found is not None:
            parts.append(f"[{name} #{found[0] + 1}] {found[1].evidence[:160]}")
    return " | ".join(parts)[:800]
