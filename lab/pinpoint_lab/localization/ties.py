"""Hit@k counted honestly over ties: a ranking that lists equal scores in some order (path order, recency) can put
a gold item inside the top k by the accident of that order. Counted "in expectation over ties", a tie group that
straddles rank k contributes the probability that a uniformly random order of the group puts a gold item within k
(hypergeometric), as peer tools (FauxPy with ties broken at random) and `lab/evaluation.py` count it.

A tie group is a maximal run of consecutive items with equal scores (to a relative 1e-9, so float sums that differ
only in their last bits still tie); a ranking not sorted by score is read as given, run by run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: scores this close (relative) are one tie: RRF sums of the same ranks added in another order differ in the last bit
REL_TOL = 1e-9


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-12)


def tie_runs(scores: Sequence[float]) -> list[tuple[int, int]]:
    """[start, end) of each run of equal consecutive scores."""
    runs: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(scores) + 1):
        if i == len(scores) or not _same(scores[i], scores[start]):
            runs.append((start, i))
            start = i
    return runs


def top_tie(scores: Sequence[float]) -> int:
    """How many items share the top score (0 for an empty ranking)."""
    runs = tie_runs(scores)
    return runs[0][1] - runs[0][0] if runs else 0


def _straddle(gold: Sequence[bool], scores: Sequence[float], k: int) -> tuple[int, int, int, int, int]:
    """(gold before the run that straddles k, gold in it, its size, its slots within k, gold after it)."""
    for start, end in tie_runs(scores):
        if start < k < end:
            return (sum(gold[:start]), sum(gold[start:end]), end - start, k - start, sum(gold[end:]))
    cut = min(k, len(gold))
    return sum(gold[:cut]), 0, 0, 0, sum(gold[cut:])


def expected_any(gold: Sequence[bool], scores: Sequence[float], k: int) -> float:
    """P(some gold item is within the top k) over random orders of every tie group."""
    before, inside, size, slots, _ = _straddle(gold, scores, k)
    if before:
        return 1.0
    if not inside:
        return 0.0
    return 1.0 - math.comb(size - inside, slots) / math.comb(size, slots)


def expected_all(gold: Sequence[bool], scores: Sequence[float], k: int, total: int) -> float:
    """P(all `total` gold items are within the top k) over random orders of every tie group (0 when some gold
    item is not ranked at all)."""
    before, inside, size, slots, after = _straddle(gold, scores, k)
    if total == 0 or before + inside + after < total or after:
        return 0.0
    if not inside:
        return 1.0
    if inside > slots:
        return 0.0
    return math.comb(size - inside, slots - inside) / math.comb(size, slots)
