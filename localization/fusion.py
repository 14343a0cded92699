"""Fuse ranked suspect lists from several signals with reciprocal-rank fusion (Cormack et al., 2009).

Signals score on incomparable scales (a traceback heuristic, a transformer's softmax, an Ochiai coefficient), so only
ranks are fused. A span inherits support from the spans of other signals that contain it: a traceback line inside a
function the issue names ranks above either alone, and a whole-file suspect lifts every line suspect in that file;
a broad span gains nothing from narrow suspects inside it, so whole files never outrank the lines they hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from localization.suspects import LocalizationRequest, Localizer, Suspect


def _within(inner: Suspect, outer: Suspect) -> bool:
    return inner.path == outer.path and outer.start_line <= inner.start_line and inner.end_line <= outer.end_line


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
    fused = []
    for (path, start, end), members in spans.items():
        probe = Suspect(path, start, end, 0.0, "fusion")
        score = 0.0
        evidence = []
        for signal, suspects in ranked.items():
            rank = next((i for i, s in enumerate(suspects) if _within(probe, s)), None)
            if rank is None:
                continue
            score += weights.get(signal, 1.0) / (k + rank + 1)
            own = [m for m in members if m.signal == signal]
            if own:
                evidence.append(f"[{signal} #{rank + 1}] {own[0].evidence}")
            else:
                evidence.append(f"[{signal} #{rank + 1}] inside {suspects[rank].path}:{suspects[rank].start_line}"
                                f"-{suspects[rank].end_line}")
        fused.append(Suspect(path, start, end, score, "fusion", " | ".join(evidence)))
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


def top_lines(suspects: Sequence[Suspect], k: int, max_span: int = 80) -> list[tuple[str, int, Suspect]]:
    """The k most suspicious distinct lines, walking the fused list: each span gives its lines in order, at most
    `max(1, k // 2)` of them, so one broad span (a function, a file) cannot crowd out the next suspects.

    FLARE refines one line at a time; line-level signals (tracebacks, the diagnostic model) rank their lines first.
    Spans longer than `max_span` lines (whole files, big classes) rank other suspects but name no line.
    """
    out: list[tuple[str, int, Suspect]] = []
    taken: set[tuple[str, int]] = set()
    per_span = max(1, k // 2)
    for s in suspects:
        if s.end_line - s.start_line >= max_span:
            continue
        given = 0
        for line in range(s.start_line, s.end_line + 1):
            if len(out) >= k or given >= per_span:
                break
            if (s.path, line) not in taken:
                taken.add((s.path, line))
                out.append((s.path, line, s))
                given += 1
        if len(out) >= k:
            break
    return out
