"""Line-level localization accuracy of the diagnostic model beside baselines computed in the same run.

Every method ranks the program's candidate lines (lines holding at least one lexical unit); hit@k means a gold line
is among the first k. Ties are broken at random *in expectation* (`expected_hit_at_k`), so a method that scores many
lines equally (spectrum-based localization often does, the random baseline always does) is not flattered or
punished by line order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from pinpoint.localization.features import featurize
from pinpoint.localization.model import Checkpoint, line_scores
from pinpoint.localization.repair import line_gains
from pinpoint.localization.scorer import LocalScorer

from pinpoint_lab.localization.corpora import Program, humanevalfix
from pinpoint_lab.localization.examples import Example, build_examples
from pinpoint_lab.localization.spectrum import ochiai, run_tests_with_coverage

KS = (1, 3, 10)


def expected_hit_at_k(scores: dict[int, float], gold: set[int], k: int) -> float:
    """P(a gold line is in the top k) when lines are ranked by score, ties in random order."""
    groups: dict[float, list[int]] = {}
    for line, score in scores.items():
        groups.setdefault(score, []).append(line)
    taken = 0
    for score in sorted(groups, reverse=True):
        members = groups[score]
        g = sum(1 for line in members if line in gold)
        slots = min(k - taken, len(members))
        if g and slots >= len(members):
            return 1.0
        if g and slots > 0:
            return 1.0 - math.comb(len(members) - g, slots) / math.comb(len(members), slots)
        taken += len(members)
        if taken >= k:
            return 0.0
    return 0.0


def candidate_lines(ex: Example) -> list[int]:
    return sorted({u.line for u in ex.units if u.type != "comment"})


def diagnostic_ranker(checkpoint: Checkpoint) -> Callable[[Example], dict[int, float]]:
    model = checkpoint.model()

    def rank(ex: Example) -> dict[int, float]:
        feats = featurize(ex.units, ex.confidences, checkpoint.vocab, checkpoint.config.confidence)
        with torch.no_grad():
            scores = line_scores(model.score_units(feats), feats["lines"])
        return {line: scores.get(line, float("-inf")) for line in candidate_lines(ex)}

    return rank


def random_ranker(ex: Example) -> dict[int, float]:
    return dict.fromkeys(candidate_lines(ex), 0.0)


def lowest_confidence_ranker(ex: Example) -> dict[int, float]:
    """A line is as suspicious as its least confident unit (FLARE's confidence, the sum variant)."""
    worst: dict[int, float] = {}
    for unit, conf in zip(ex.units, ex.confidences["sum"], strict=True):
        if conf is not None and unit.type != "comment":
            worst[unit.line] = max(worst.get(unit.line, float("-inf")), -conf)
    return {line: worst.get(line, float("-inf")) for line in candidate_lines(ex)}


def sbfl_ranker(tests_of: dict[str, tuple[str, str]]) -> Callable[[Example], dict[int, float]]:
    """Ochiai over per-assert coverage; `tests_of[id] = (test code, entry point)`."""

    def rank(ex: Example) -> dict[int, float]:
        tests, entry = tests_of[ex.id]
        scores = ochiai(run_tests_with_coverage(ex.code, tests, entry))
        return {line: scores.get(line, 0.0) for line in candidate_lines(ex)}

    return rank


def repair_ranker(scorer: LocalScorer, descriptions: dict[str, str]) -> Callable[[Example], dict[int, float]]:
    """Lines by their best one-edit repair's rise in log-probability, the program's description read first
    (`descriptions[id]`; absent or empty: the code alone). Lines with no candidate repair come last."""

    def rank(ex: Example) -> dict[int, float]:
        gains = line_gains(ex.code, scorer, descriptions.get(ex.id, ""))
        return {line: gains.get(line, float("-inf")) for line in candidate_lines(ex)}

    return rank


def repair_on_top_ranker(diagnostic: Callable[[Example], dict[int, float]], scorer: LocalScorer,
                         descriptions: dict[str, str], top: int = 5) -> Callable[[Example], dict[int, float]]:
    """What `agent.repair` does: the `top` lines `diagnostic` ranks first, reordered by their best repair's gain (the
    description read first); the other lines follow in the diagnostic's order. A fraction of `repair_ranker`'s cost:
    only the top lines' repairs are scored."""

    def rank(ex: Example) -> dict[int, float]:
        scores = diagnostic(ex)
        order = sorted(scores, key=lambda line: (-scores[line], line))
        gains = line_gains(ex.code, scorer, descriptions.get(ex.id, ""), order[:top])
        head = sorted(order[:top], key=lambda line: -gains.get(line, float("-inf")))  # stable: ties keep model order
        return {line: -float(position) for position, line in enumerate(head + order[top:])}

    return rank


def fused_ranker(rankers: Sequence[Callable[[Example], dict[int, float]]], k: float = 60.0
                 ) -> Callable[[Example], dict[int, float]]:
    """Reciprocal-rank fusion of line rankers (the formula of `fusion`); lines a ranker ties share its best rank, so
    the other ranker orders them (SBFL ties every line that all failing tests run)."""

    def rank(ex: Example) -> dict[int, float]:
        fused = dict.fromkeys(candidate_lines(ex), 0.0)
        for ranker in rankers:
            scores = ranker(ex)
            for line, score in scores.items():
                fused[line] += 1.0 / (k + 1 + sum(1 for other in scores.values() if other > score))
        return fused

    return rank


def memoized(ranker: Callable[[Example], dict[int, float]]) -> Callable[[Example], dict[int, float]]:
    """A ranker that runs once per example id (SBFL runs the program's tests; fusion asks again)."""
    seen: dict[str, dict[int, float]] = {}
    return lambda ex: seen[ex.id] if ex.id in seen else seen.setdefault(ex.id, ranker(ex))


@dataclass
class MethodResult:
    method: str
    hits: dict[int, float] = field(default_factory=lambda: dict.fromkeys(KS, 0.0))
    n: int = 0

    def add(self, scores: dict[int, float], gold: set[int]) -> None:
        for k in KS:
            self.hits[k] += expected_hit_at_k(scores, gold, k)
        self.n += 1

    def row(self) -> dict:
        return {"method": self.method, "n": self.n} | {f"top{k}": self.hits[k] / max(1, self.n) for k in KS}


def evaluate(
    examples: Sequence[Example], rankers: dict[str, Callable[[Example], dict[int, float]]]
) -> list[dict]:
    """Accuracy rows, one per method, over examples that have a gold line among their candidate lines."""
    results = {name: MethodResult(name) for name in rankers}
    for ex in examples:
        gold = set(ex.gold_lines)
        if not gold & set(candidate_lines(ex)):
            continue
        for name, ranker in rankers.items():
            results[name].add(ranker(ex), gold)
    return [r.row() for r in results.values()]


def line_accuracy(name: str, programs: Sequence[Program], checkpoint: Checkpoint, scorer: LocalScorer, *,
                  repair: bool = False, repair_top: int | None = None, sbfl: bool = True,
                  log: Callable[[str], None] = print) -> list[dict]:
    """`pinpoint-lab bench lines` on one evaluation set: the diagnostic model beside the random and lowest-confidence
    baselines; with `repair`, repair likelihood (on the diagnostic's top `repair_top` lines, or on every line) and
    its fusions; on HumanEvalFix with `sbfl`, Ochiai over its tests and its fusions."""
    examples = build_examples(programs, scorer, log)
    diagnostic = memoized(diagnostic_ranker(checkpoint))
    rankers = {"diagnostic (FLARE)": diagnostic, "random line": random_ranker,
               "lowest confidence": lowest_confidence_ranker}
    repairs = []
    descriptions = {p.id: p.description for p in programs}
    if repair and repair_top:
        log(f"{name}: repair likelihood on the diagnostic's top {repair_top} lines (cached; else seconds "
            "to minutes a program)")
        repairs = [memoized(repair_on_top_ranker(diagnostic, scorer, descriptions, repair_top))]
        rankers[f"repair on top {repair_top}"] = repairs[0]
        rankers["diagnostic + repair"] = fused_ranker([diagnostic, *repairs])
    elif repair:
        log(f"{name}: repair likelihood (each line's one-edit repairs scored; cached, ~20 s a program if not)")
        repairs = [memoized(repair_ranker(scorer, descriptions))]
        rankers["repair likelihood"] = repairs[0]
        if any(p.description for p in programs):  # the code read alone too: a second view of each repair
            repairs.append(memoized(repair_ranker(scorer, {})))
            rankers["repair likelihood, code alone"] = repairs[1]
        rankers["diagnostic + repair"] = fused_ranker([diagnostic, *repairs])
    if name.startswith("humanevalfix") and sbfl:
        sbfl_ranked = memoized(sbfl_ranker({p.id: (p.tests, p.entry_point) for p in humanevalfix()}))
        rankers["sbfl (ochiai)"] = sbfl_ranked
        rankers["diagnostic + sbfl"] = fused_ranker([diagnostic, sbfl_ranked])
        if repairs:
            rankers["diagnostic + repair + sbfl"] = fused_ranker([diagnostic, *repairs, sbfl_ranked])
    return evaluate(examples, rankers)


def format_table(table: dict[str, list[dict]]) -> str:
    width = max([14, *(len(name) for name in table)])
    lines = [f"{'dataset':<{width}} {'method':<20} {'n':>5} {'top1':>7} {'top3':>7} {'top10':>7}"]
    for dataset, rows in table.items():
        for row in rows:
            lines.append(
                f"{dataset:<{width}} {row['method']:<20} {row['n']:>5} "
                + " ".join(f"{100 * row[f'top{k}']:>6.1f}%" for k in KS)
            )
    return "\n".join(lines)
