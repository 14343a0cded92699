"""Fuse ranked suspect lists from several signals with reciprocal-rank fusion (Cormack et al., 2009).

Signals score on incomparable scales (a traceback heuristic, a transformer's softmax, an Ochiai coefficient), so only
ranks are fused. A span inherits support from the spans of other signals that contain it: a traceback line inside a
function the issue names ranks above either alone, and a whole-file suspect lifts every line suspect in that file;
a broad span gains nothing from narrow suspects inside it, so whole files never outrank the lines they hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from pinpoint.localization.mentions import NAME as MENTIONS
from pinpoint.localization.retrieval import is_test_path
from pinpoint.localization.suspects import LocalizationRequest, Localizer, Placement, Suspect, Vote

#: what separates the spectrum's lead lines from each other and from the best of the rest (far below one rank's 1/61)
LEAD_STEP = 1e-4


def _ranks_by_path(suspects: Sequence[Suspect]) -> dict[str, list[tuple[int, int, int]]]:
    """(rank, start, end) of each suspect, per path, in rank order: a span is looked up among its own file's only."""
    index: dict[str, list[tuple[int, int, int]]] = {}
    for rank, s in enumerate(suspects):
        index.setdefault(s.path, []).append((rank, s.start_line, s.end_line))
    return index


def reciprocal_rank_fusion(
    ranked: dict[str, Sequence[Suspect]], k: float = 60.0, weights: dict[str, float] | None = None
) -> list[Suspect]:
    """One list, best first: each distinct span scores sum_signal w / (k + rank of that signal's best span containing it).

    A span's own signal counts at its own rank; other signals count at the rank of their best suspect that contains
    it. Ties go to the narrower span (more precise), then path and line for a stable order.
    """
    weights = weights or {}
    spans: dict[tuple[str, int, int], list[Suspect]] = {}
    for suspects in ranked.values():
        for s in suspects:
            spans.setdefault((s.path, s.start_line, s.end_line), []).append(s)
    indexes = {signal: _ranks_by_path(suspects) for signal, suspects in ranked.items()}
    fused = []
    for (path, start, end), members in spans.items():
        score = 0.0
        votes = []
        for signal, suspects in ranked.items():
            rank = next((i for i, first, last in indexes[signal].get(path, ()) if first <= start and end <= last), None)
            if rank is None:
                continue
            score += weights.get(signal, 1.0) / (k + rank + 1)
            own = [m for m in members if m.signal == signal]
            wider = suspects[rank]
            note = own[0].describe() if own else f"inside {wider.path}:{wider.start_line}-{wider.end_line}"
            votes.append(Vote(signal, rank + 1, note))
        fused.append(Suspect(path, start, end, score, "fusion", votes=tuple(votes)))
    fused.sort(key=lambda s: (-s.score, s.end_line - s.start_line, s.path, s.start_line))
    return fused


def fuse_localizers(
    localizers: Iterable[Localizer], request: LocalizationRequest, k: float = 60.0, weights: dict[str, float] | None = None
) -> tuple[list[Suspect], dict[str, list[Suspect]]]:
    """Run every localizer and fuse; also return each signal's own list (trajectories keep both)."""
    ranked = {}
    for loc in localizers:
        ranked[loc.name] = list(loc.localize(request))
    return reciprocal_rank_fusion({n: s for n, s in ranked.items() if s}, k=k, weights=weights), ranked


@dataclass(frozen=True)
class FusionRule:
    """How `fuse` combines the members once the failing tests are in hand (a spectrum is fused). The defaults are
    the agent's rule, chosen leave one repository out among the variants the lab's fusion choice measures on every
    committed oracle row: MBFL a member at half weight, `mentions` at double weight, only the switches that made a
    failing test pass fused, the best of them leading the top file, and no spectrum lead (with `mentions` fused,
    reciprocal rank orders the top file's lines better than the spectrum alone)."""

    #: reciprocal-rank weight per member (1 for any other)
    weights: tuple[tuple[str, float], ...] = (("mbfl", 0.5), (MENTIONS, 2.0))
    #: per member, a score its suspects must exceed to be fused: `predicates` above 0.1 keeps only switches that made
    #: a failing test pass (one that did not scores at most `predicates.CHANGED_WEIGHT`)
    floors: tuple[tuple[str, float], ...] = (("predicates", 0.1),)
    #: the spectrum's top single lines in fused's top file that lead the list (0: none)
    spectrum_lead: int = 0
    #: `predicates` lines scoring at least this (a switch that made this share of the failing tests pass, plus a
    #: tenth of the share it changed) lead the top file ahead of the spectrum's, two at most (None: no such lead);
    #: on 21 dev rows thresholds 0.11-1.0 and 1-3 lines gave the same or less than 0.5 and 2
    switch_lead: float | None = 0.5
    #: the files the failing tests are named after (`test_names`) open the list, in its order, before fusion's
    #: others: the one file-level fact the members do not see (docs/localization.md, "Files the failing tests are
    #: named after")
    named_first: bool = True


#: the rule before the leave-one-repository-out choice: every member at full weight, every switch fused, the
#: spectrum's top three lines leading the top file
PLAIN_RULE = FusionRule(weights=(), floors=(), spectrum_lead=3)


def fuse(per_signal: dict[str, Sequence[Suspect]], files: str = "anchor",
         rule: FusionRule = FusionRule()) -> list[Suspect]:
    """What the agent and `bench localize` call fused: with a spectrum, reciprocal rank over every signal as
    `rule` says (weights, floors, which lines lead the top file: `fuse_with_spectrum`); with no execution signal,
    its files in the order of the file-level anchor (BM25), which the others only refine (`refine_files`);
    `files="interleave"` alternates the anchor's files with reciprocal rank's instead (measured beside it, not the
    default: no guarantee at k > 1)."""
    signals = {n: s for n, s in per_signal.items() if s}
    if signals.get("spectrum"):
        return fuse_with_spectrum(signals, rule)
    fused = reciprocal_rank_fusion(signals)
    if FILE_ANCHOR in signals and not any(n in signals for n in EXECUTION_SIGNALS):
        order = anchored_file_order(fused, signals[FILE_ANCHOR])
        if files == "interleave":
            order = interleaved(order, [p for p in dict.fromkeys(s.path for s in fused) if not is_test_path(p)])
        return refine_files(fused, signals[FILE_ANCHOR], order)
    return fused


def fuse_with_spectrum(signals: dict[str, Sequence[Suspect]], rule: FusionRule = FusionRule()) -> list[Suspect]:
    """Reciprocal rank over the members (each member's suspects above its floor, at its weight), the files the
    failing tests are named after first, then the top file led by the spectrum's top lines, and ahead of them by
    the predicates whose switch makes failing tests pass: fusion is best at the file, the execution signals at the
    line within it."""
    floors = dict(rule.floors)
    members = {n: [s for s in v if s.score > floors[n]] if n in floors else list(v) for n, v in signals.items()}
    fused = reciprocal_rank_fusion({n: v for n, v in members.items() if v}, weights=dict(rule.weights))
    if rule.named_first and members.get(NAMED):
        fused = refine_files(fused, members[NAMED])
    if rule.spectrum_lead:
        fused = lead_with_lines(fused, signals["spectrum"], take=rule.spectrum_lead)
    if rule.switch_lead is None:
        return fused
    switched = [s for s in signals.get("predicates", ()) if s.start_line == s.end_line and s.score >= rule.switch_lead]
    return lead_with_lines(fused, switched, take=2, name="predicates") if switched else fused


def interleaved(first: Sequence[str], second: Sequence[str]) -> list[str]:
    """Round robin, `first` leading, each file once: the top k holds `first`'s top ceil(k/2) by construction."""
    out: dict[str, None] = {}
    for i in range(max(len(first), len(second))):
        for ranking in (first, second):
            if i < len(ranking):
                out.setdefault(ranking[i], None)
    return list(out)


#: signals whose evidence is not the issue's text (the failing tests' runs and output)
EXECUTION_SIGNALS = ("spectrum", "ldb", "traceback", "test_names")
#: the signal whose files lead the fused list where the rule says so (`FusionRule.named_first`)
NAMED = "test_names"
#: the file-level member a text-only fusion's file order refines
FILE_ANCHOR = "bm25"
#: what a span placed below a better-scored one is scored under it by (far below a rank's step, ~1e-4 at rank 50)
DEMOTE_STEP = 1e-7


def anchored_file_order(fused: Sequence[Suspect], anchor: Sequence[Suspect]) -> list[str]:
    """The anchor's code files in its order, its equal scores ordered as `fused` orders those files; then every
    other code file of `fused` in fused order."""
    first = {p: i for i, p in enumerate(dict.fromkeys(s.path for s in fused if not is_test_path(s.path)))}
    best: dict[str, float] = {}
    for s in anchor:
        if s.path in first:
            best.setdefault(s.path, s.score)
    ranked = sorted(best, key=lambda p: (-best[p], first.get(p, len(first))))
    return ranked + [p for p in first if p not in best]


def refine_files(fused: Sequence[Suspect], anchor: Sequence[Suspect],
                 order: Sequence[str] | None = None) -> list[Suspect]:
    """`fused` reordered so its files come in `anchored_file_order`, each span as early as that allows: a span
    waits only until every file the anchor ranks above its own has shown a span. Why: when every member reads the
    same issue text, their votes are not independent, and reciprocal rank let the weakest file ranker (retrieval,
    whose spans also collect the file rankers' votes) reorder the strongest's files. The fused file ranking is then
    the anchor's at every k, except where the anchor ties or ends (test files are never held back). `order`, when
    given, is the file order to impose instead (every code file of `fused`, once)."""
    order = list(order) if order is not None else anchored_file_order(fused, anchor)
    position = {p: i for i, p in enumerate(order)}
    remaining, out, opens, opened = list(fused), [], set(), 0
    while remaining:
        i = next(i for i, s in enumerate(remaining) if is_test_path(s.path) or position[s.path] <= opened)
        span = remaining.pop(i)
        if not is_test_path(span.path) and position[span.path] == opened:
            opened += 1
            opens.add(len(out))
        out.append(span)
    return _in_score_order(out, opens - {0}, f"{anchor[0].signal} file order" if anchor else "file order")


def _in_score_order(spans: Sequence[Suspect], strict: set[int], why: str) -> list[Suspect]:
    """Scores lowered where the order moved a span below a lower-scored one, so the list stays in score order for
    every reader, and strictly below its predecessor at the indices in `strict` (a file the anchor ranks lower
    must not read as tied with the one before it); the fused score stays in the span's placements."""
    out: list[Suspect] = []
    for i, s in enumerate(spans):
        if out and (s.score > out[-1].score or (i in strict and s.score >= out[-1].score)):
            s = replace(s, score=out[-1].score - DEMOTE_STEP, placements=(*s.placements, Placement(why, 0, s.score)))
        out.append(s)
    return out


def lead_with_lines(fused: Sequence[Suspect], signal: Sequence[Suspect], take: int = 3,
                    name: str = "spectrum") -> list[Suspect]:
    """`fused` with the top `take` single-line suspects of `signal` (the spectrum) that lie in fused's first code
    file moved to the front: fusion is best at the file, the spectrum at the line within it. Measured on the 136
    dev rows' cached oracle results: fused line Hit@10 0.25 -> 0.29 (variants of 1-3 files and 3-5 lines all gave
    0.27-0.29; none lost), files unchanged."""
    top_file = next((s.path for s in fused if not is_test_path(s.path)), None)
    lead = [s for s in signal if s.start_line == s.end_line and s.path == top_file][:take]
    keys = {(s.path, s.start_line, s.end_line) for s in lead}
    moved = [s for s in fused if (s.path, s.start_line, s.end_line) in keys]
    order = {(s.path, s.start_line): i for i, s in enumerate(lead)}
    moved.sort(key=lambda s: order[(s.path, s.start_line)])
    rest = [s for s in fused if (s.path, s.start_line, s.end_line) not in keys]
    # the lead's scores are raised just above the rest, so the list stays in score order for every reader
    ceiling = max([s.score for s in [*moved, *rest]], default=0.0)
    lifted = [replace(s, score=ceiling + LEAD_STEP * (len(moved) - i),
                      placements=(*s.placements, Placement(f"{name} lead", i + 1, s.score))) for i, s in enumerate(moved)]
    return lifted + rest


#: how far a tie-breaking signal moves a line: inside its tie group only (Ochiai values differ by far more), and
#: still far above `lab/ties.py`'s relative 1e-9, so the split is real when ties are counted in expectation
TIE_STEP = 1e-7


def split_ties(ranked: Sequence[Suspect], scores: dict[tuple[str, int], float], signal: str,
               notes: dict[tuple[str, int], str] | None = None) -> list[Suspect]:
    """`ranked` (the spectrum) with its tied lines split by another signal's line `scores` (each in [0, 1]): a
    single-line suspect's score rises by `TIE_STEP` times its line's score, so only lines of equal score are
    reordered and lines the other signal does not score keep their place. `notes` go into the evidence."""
    notes = notes or {}
    out = []
    for s in ranked:
        key = (s.path, s.start_line)
        value = scores.get(key) if s.start_line == s.end_line else None
        if value:
            s = replace(s, score=s.score + TIE_STEP * value, evidence=f"{s.evidence}; {signal}: {notes.get(key, value)}")
        out.append(s)
    return sorted(out, key=lambda s: -s.score)


def top_lines(suspects: Sequence[Suspect], k: int, max_span: int = 80,
              limit: int | None = None) -> list[tuple[str, int, Suspect]]:
    """The k most suspicious distinct lines, walking the fused list: a span gives at most `max(1, k // 2)` lines,
    so one broad span (a function, a file) cannot crowd out the next suspects. `limit` walks on past k (same cap
    per span, so the first k are unchanged): how far a tie group at rank k reaches.

    Which lines a broad span gives: those that narrower suspects (a spectrum line, a traceback frame) name inside it,
    in their order; only a span no narrower suspect falls in gives its first lines (measured on the dev rows'
    cached `bench localize` results: line Hit@10 0.06 -> 0.07 on 136 issue rows, 0.21 -> 0.26 on 42 oracle rows).
    FLARE refines one line at a time; spans longer than `max_span` lines (whole files, big classes) rank other
    suspects but name no line.
    """
    narrow = [s for s in suspects if s.end_line - s.start_line < NARROW_SPAN]
    limit = max(k, limit or k)
    out: list[tuple[str, int, Suspect]] = []
    taken: set[tuple[str, int]] = set()
    for s in suspects:
        if s.end_line - s.start_line >= max_span:
            continue
        for line in _span_lines(s, narrow)[: max(1, k // 2)]:
            if len(out) < limit and (s.path, line) not in taken:
                taken.add((s.path, line))
                out.append((s.path, line, s))
        if len(out) >= limit:
            break
    return out


#: a suspect spanning fewer lines than this names lines, not a region
NARROW_SPAN = 3


def _span_lines(span: Suspect, narrow: Sequence[Suspect]) -> list[int]:
    """The lines a suspect offers: its own when narrow; else the narrow suspects' lines inside it, or its first."""
    if span.end_line - span.start_line < NARROW_SPAN:
        return list(range(span.start_line, span.end_line + 1))
    inside = [s.start_line for s in narrow if s.path == span.path and span.start_line <= s.start_line <= span.end_line]
    return list(dict.fromkeys(inside)) or list(range(span.start_line, span.end_line + 1))
